"""`make lab HEADLESS=1` (the README's command for a hub or a remote node) prints a URL that logs in.

The real command runs (set-up step included, idempotent) in its own process group. Its output is
read until JupyterLab announces its URL; then every token printed up to there must be the server's
(one token, generated once), a URL with that token must have been printed, and exactly what was
printed must log in: /api/kernelspecs answers 200 with the course kernels, a wrong token gets 403.
The server is then shut down through its API with that token, and nothing of the group may be left.

Two forms: the default (PORT=0, no TOKEN: JupyterLab chooses both and prints its own URL) and
PORT/TOKEN given on the command line (JupyterLab masks a given token, so the Makefile prints the URL).
"""
import json
import os
import queue
import re
import secrets
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from dltutor.core.dist import free_port

ROOT = Path(__file__).resolve().parents[1]
URL_WAIT = 120      # the set-up step runs first (a stamp check when already done)
EXIT_WAIT = 30

URL_RE = re.compile(r"(https?://[^\s/?]+)/\S*?[?&]token=([^\s&'\")]+)")
TOKEN_RE = re.compile(r"token\s*[=:]\s*['\"]?([^\s&'\")]+)")     # "token: X", "token=X", "--...token=X"
ANNOUNCE_RE = re.compile(r"ServerApp\]\s+https?://")              # JupyterLab's own URL line
MASK = "..."


def _reader(stream, lines: queue.Queue):
    for line in iter(stream.readline, ""):
        lines.put(line)
    lines.put(None)


def _get(url: str, timeout: float = 10) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _wait_listening(base: str, proc, timeout: float = 30) -> None:
    """JupyterLab logs its URL just before it listens (the bind is an io-loop callback): wait."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _get(f"{base}/api", timeout=5)
            return
        except urllib.error.URLError as e:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"nothing answers on {base} ({e.reason})") from e
            time.sleep(0.2)


def _group_members(pgid: int) -> list:
    left = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                left.append(p.info)
        except (psutil.Error, ProcessLookupError, OSError):
            pass
    return left


@pytest.mark.slow
@pytest.mark.parametrize("given", [False, True], ids=["default-port0-token", "given-port-token"])
def test_make_lab_headless_prints_a_url_that_logs_in(tmp_path, given):
    port, token_given = (free_port(), secrets.token_hex(12)) if given else (0, None)
    args = ["make", "--no-print-directory", "lab", "HEADLESS=1", f"PORT={port}"]
    if given:
        args.append(f"TOKEN={token_given}")
    env = {k: v for k, v in os.environ.items()
           if k not in ("TOKEN", "PORT", "HOST", "HEADLESS", "JUPYTER_TOKEN",
                        "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
               PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, bufsize=1, start_new_session=True)
    pgid = proc.pid                       # start_new_session: make leads its own process group
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True)
    reader.start()
    out: list[str] = []

    def shown() -> str:
        return "".join(out)[-6000:]

    try:
        # 1. read until JupyterLab announces its URL (it listens right after: _wait_listening)
        deadline = time.monotonic() + URL_WAIT
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no URL announced within {URL_WAIT} s:\n{shown()}"
            try:
                line = lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            assert line is not None, f"make exited ({proc.wait(5)}) before a URL:\n{shown()}"
            out.append(line)
            if ANNOUNCE_RE.search(line):
                break
        text = "".join(out)

        # 2. what was printed: the URLs and every token mentioned anywhere
        urls = URL_RE.findall(text)
        assert urls, f"no URL printed:\n{shown()}"
        base = urls[0][0]
        printed = sorted({t for t in TOKEN_RE.findall(text) + [t for _, t in urls] if t != MASK})
        assert printed, f"no token printed (only {MASK!r}):\n{shown()}"

        # 3. log in with exactly what was printed: every printed token is the server's
        _wait_listening(base, proc)
        for t in printed:
            status, body = _get(f"{base}/api/kernelspecs?token={t}")
            assert status == 200, f"the printed token {t!r} gets HTTP {status} from {base}:\n{shown()}"
            specs = json.loads(body)["kernelspecs"]
            assert {"python3", "dltutor"} & set(specs), f"no course kernel among {sorted(specs)}"
        assert len(printed) == 1, f"more than one token printed: {printed}:\n{shown()}"
        (token,) = printed
        real_urls = [(b, t) for b, t in urls if t != MASK]
        assert real_urls, f"no URL with the token was printed (only ?token={MASK}):\n{shown()}"
        for b, t in real_urls:
            status, _ = _get(f"{b}/api/kernelspecs?token={t}")
            assert status == 200, f"the printed URL {b}/lab?token={t} gets HTTP {status}"
        status, _ = _get(f"{base}/api/kernelspecs?token=wrong{token}")
        assert status == 403, f"a wrong token got HTTP {status}, not 403"
        if given:
            assert token == token_given, (token, token_given)
            assert base.endswith(f":{port}"), (base, port)

        # 4. shut the server down with the token; make and everything in its group must end
        req = urllib.request.Request(f"{base}/api/shutdown", method="POST", data=b"",
                                     headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status in (200, 202, 204), r.status
        try:
            rc = proc.wait(EXIT_WAIT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"make lab did not exit within {EXIT_WAIT} s of /api/shutdown:\n{shown()}")
        assert rc == 0, f"make lab exited {rc}:\n{shown()}"
        deadline = time.monotonic() + 10
        while (left_over := _group_members(pgid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left_over, f"processes of make's group left after the shutdown: {left_over}"
    finally:
        if proc.poll() is None or _group_members(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        reader.join(5)
        proc.stdout.close()
