"""Browser test: the ring all-reduce widget works in a real JupyterLab, driven by a real chromium.

JupyterLab is started headless on a free 127.0.0.1 port with a token, on a temporary copy of the
notebooks (so autosave never touches the repo). Playwright for Python drives Debian's chromium
(`/usr/bin/chromium`; no browser download), runs all cells of notebook 05, clicks Next and checks
that the widget's step/phase text changed. A screenshot is kept in test-artifacts/.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "05_ring_allreduce_visualizer.ipynb"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyterlab(tmp_path):
    assert os.path.exists(CHROMIUM), "chromium is missing: run `make setup-test` (installs Debian's chromium)"
    work = tmp_path / "course"
    shutil.copytree(ROOT / "course" / "notebooks", work / "notebooks")
    shutil.copytree(ROOT / "course" / "labs", work / "labs")
    port, token = _free_port(), "dltutor-browser-test"
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"))
    log = open(tmp_path / "jupyter.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--port-retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
         "--LabApp.expose_app_in_browser=True", "--ServerApp.disable_check_xsrf=True"]
        + (["--allow-root"] if os.geteuid() == 0 else []),
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "jupyter.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "JupyterLab did not start in 90 s"
                time.sleep(0.5)
        yield url, token
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=20)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        log.close()


def _phase_text(page) -> str:
    return page.locator(".dltutor-ring-phase").first.inner_text(timeout=5_000)


def test_ring_widget_steps_in_jupyterlab(jupyterlab):
    from playwright.sync_api import sync_playwright

    url, token = jupyterlab
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/lab/tree/notebooks/{NOTEBOOK}?token={token}", timeout=120_000)
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext.session",
                                   timeout=120_000)
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            phase = page.locator(".dltutor-ring-phase").first
            phase.wait_for(state="visible", timeout=240_000)
            before = _phase_text(page)
            page.locator(".dltutor-ring-next").first.click()
            page.wait_for_function(
                "(b) => { const e = document.querySelector('.dltutor-ring-phase');"
                " return e && e.innerText !== b; }", arg=before, timeout=30_000)
            after = _phase_text(page)
            phase.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "ring_widget.png"), full_page=False)
        finally:
            browser.close()
    assert before != after, "clicking Next did not change the widget's phase text"
    assert re.search(r"step \d+ of \d+", after), f"unexpected phase text after Next: {after!r}"
