"""What a student's browser does on a portal, through the hub's REST API and the Jupyter protocol.

`Hub` starts JupyterHub (tests/hub/jupyterhub_config.py) from its own Python and stops it;
`login` posts the login form as a browser would; `run_cells` executes code on a kernel of the
user's server over the kernel websocket, the way JupyterLab does, and returns each cell's text
(`execute`: each cell's outputs as a notebook saves them, metadata included); `follow_gitpuller`
opens an nbgitpuller link as the browser does: the status page, its event stream, the redirect.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import unquote, urljoin

import requests
import websocket

HERE = Path(__file__).resolve().parent


class Hub:
    def __init__(self, env: dict, state: Path, python: Path, log: Path):
        self.env, self.state, self.log = env, state, log
        self.url = f"http://127.0.0.1:{env['HUB_PORT']}"
        self.api = self.url + "/hub/api"
        self.headers = {"Authorization": f"token {env['HUB_SERVICE_TOKEN']}"}
        cmd = [str(python), "-m", "jupyterhub", "-f", str(HERE / "jupyterhub_config.py")]
        self.proc = subprocess.Popen(cmd, cwd=state, env=env, stdout=log.open("w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_up(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the hub exited ({self.proc.returncode}):\n{self.tail()}")
            try:
                if requests.get(self.api, timeout=5).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(1)
        raise TimeoutError(f"the hub did not answer within {timeout} s:\n{self.tail()}")

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def call(self, method: str, path: str, **kw):
        r = requests.request(method, self.api + path, headers=self.headers, timeout=60, **kw)
        if r.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {r.status_code} {r.text}\n{self.tail()}")
        return r.json() if r.text else None

    def server(self, user: str) -> dict:
        return self.call("GET", f"/users/{user}").get("servers", {}).get("", {})

    def wait_server(self, user: str, ready: bool, timeout: float = 240) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.server(user)
            if (bool(s) and s.get("ready")) == ready:
                return s
            time.sleep(2)
        raise TimeoutError(f"{user}'s server ready={not ready} after {timeout} s:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)   # the hub stops the proxy it started
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def login(hub: Hub, user: str, password: str) -> requests.Session:
    """Log in through the hub's login page (form + its _xsrf token), as a browser does."""
    s = requests.Session()
    page = s.get(hub.url + "/hub/login", timeout=30)
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text)
    form = {"username": user, "password": password, **({"_xsrf": xsrf.group(1)} if xsrf else {})}
    r = s.post(hub.url + "/hub/login", data=form, allow_redirects=False, timeout=30)
    if r.status_code != 302 or "jupyterhub-session-id" not in s.cookies:
        raise RuntimeError(f"login failed: {r.status_code} {r.text[:300]}")
    return s


def _message(code: str, session: str) -> dict:
    return {"header": {"msg_id": uuid.uuid4().hex, "msg_type": "execute_request", "session": session,
                       "username": "student", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}}


def execute(server_url: str, token: str, kernel_id: str, cells: list[str],
            timeout: float = 300) -> list[list[dict]]:
    """Execute `cells` in order on kernel `kernel_id`; each cell's outputs (nbformat dicts), or
    raise with the error's traceback (the first cell that fails stops the run, as in JupyterLab)."""
    ws_url = server_url.replace("http", "ws", 1) + f"api/kernels/{kernel_id}/channels"
    ws = websocket.create_connection(ws_url, header=[f"Authorization: token {token}"],
                                     timeout=timeout)
    session, outputs = uuid.uuid4().hex, []
    try:
        for code in cells:
            msg = _message(code, session)
            ws.send(json.dumps(msg))
            outputs.append(_collect(ws, msg["header"]["msg_id"], code, timeout))
    finally:
        ws.close()
    return outputs


def text_of(outputs: list[dict]) -> str:
    out = []
    for o in outputs:
        if o["output_type"] == "stream":
            out.append(o["text"])
        elif o["output_type"] == "error":
            out.append("\n".join(o["traceback"]))
        else:
            out.append(o.get("data", {}).get("text/plain", ""))
    return "".join(out)


def run_cells(server_url: str, token: str, kernel_id: str, cells: list[str],
              timeout: float = 300) -> list[str]:
    """Each cell's stream/result text (see `execute`)."""
    return [text_of(o) for o in execute(server_url, token, kernel_id, cells, timeout)]


def _collect(ws, msg_id: str, code: str, timeout: float) -> list[dict]:
    out, reply, idle = [], None, False
    deadline = time.monotonic() + timeout
    while not (reply and idle):
        if time.monotonic() > deadline:
            raise TimeoutError(f"cell did not finish in {timeout} s:\n{code[:200]}")
        m = json.loads(ws.recv())
        if m.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, content = m["header"]["msg_type"], m["content"]
        if kind == "stream":
            out.append({"output_type": "stream", "name": content["name"], "text": content["text"]})
        elif kind in ("execute_result", "display_data"):
            o = {"output_type": kind, "data": content.get("data", {}),
                 "metadata": content.get("metadata", {})}
            if kind == "execute_result":
                o["execution_count"] = content.get("execution_count")
            out.append(o)
        elif kind == "error":
            out.append({"output_type": "error", "ename": content["ename"],
                        "evalue": content["evalue"], "traceback": content["traceback"]})
        elif kind == "status" and content["execution_state"] == "idle":
            idle = True
        elif kind == "execute_reply":
            reply = content
    if reply["status"] != "ok":
        raise RuntimeError(f"cell failed on the hub's kernel:\n{code[:300]}\n---\n"
                           f"{text_of(out)[-3000:]}")
    return out


def follow_gitpuller(session: requests.Session, link: str,
                     timeout: float = 180) -> tuple[requests.Response, list[str]]:
    """Open an nbgitpuller link as a browser does: follow it to the user's server (the hub's
    user-redirect and OAuth), read the status page's settings, run its sync (the event stream
    its JavaScript opens) to the end, then go where the page sends the browser. Returns that
    last response and the sync's output lines; raises when the sync reports an error."""
    page = session.get(link, timeout=60)
    page.raise_for_status()
    attrs = {k: unquote(v) for k, v in re.findall(r'data-([a-z-]+)="([^"]*)"', page.text)}
    if "repo" not in attrs:
        raise RuntimeError(f"{page.url} is not nbgitpuller's status page:\n{page.text[:500]}")
    query = {"_xsrf": attrs.get("xsrf", ""), "repo": attrs["repo"], "targetpath": attrs["targetpath"],
             **{k: attrs[k] for k in ("depth", "branch", "backup") if k in attrs}}
    base = urljoin(page.url, attrs["base-url"])          # the server's address, as the page's JS
    lines, done = [], None
    with session.get(base + "git-pull/api", params=query, stream=True,
                     timeout=timeout) as events:
        deadline = time.monotonic() + timeout
        for line in events.iter_lines(decode_unicode=True):
            if time.monotonic() > deadline:
                raise TimeoutError(f"nbgitpuller did not finish in {timeout} s: {lines[-5:]}")
            if not line or not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            lines.append(event.get("output") or event.get("message") or "")
            if event.get("phase") in ("finished", "error"):
                done = event
                break
    if done is None or done["phase"] != "finished":
        raise RuntimeError(f"nbgitpuller's sync failed: {done}\n{''.join(lines)[-2000:]}")
    landing = session.get(base + attrs["path"], timeout=60)
    return landing, lines
