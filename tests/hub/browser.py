"""A student's real browser on the hub: Playwright driving Debian's chromium (no browser download).

`chromium(pw)` starts the browser with the flags this closed network needs; `Student` logs in
through the hub's login form, opens a notebook in JupyterLab (the server runs with
expose_app_in_browser, so the page's `window.jupyterapp` is JupyterLab itself), types an answer
into a cell, runs cells as Shift+Enter would (without waiting, so that two students run at once),
waits for them, reads a cell's output text and saves as Ctrl+S does.
"""
from __future__ import annotations

import shutil

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

_PANEL = "window.jupyterapp.shell.currentWidget"
_INDEX = f"""(marker) => {_PANEL}.content.widgets.findIndex(
    c => c.model.sharedModel.getSource().includes(marker))"""


def chromium(pw):
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)


class Student:
    """One student's browser context (cookies of their own) on the hub at `hub_url`."""

    def __init__(self, browser, hub_url: str, name: str, password: str):
        self.name, self.hub_url = name, hub_url
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.page = self.context.new_page()
        self.page.set_default_timeout(120_000)
        self.page.goto(f"{hub_url}/hub/login")
        self.page.fill("input[name=username]", name)
        self.page.fill("input[name=password]", password)
        self.page.click("input[type=submit], button[type=submit]")
        self.page.wait_for_url(lambda url: "/hub/login" not in url, timeout=120_000)

    def open(self, path: str) -> None:
        """Open `path` (relative to the server's root) in JupyterLab; wait for its kernel."""
        self.page.goto(f"{self.hub_url}/user/{self.name}/lab/tree/{path}", timeout=180_000)
        self.page.wait_for_function(
            f"() => window.jupyterapp && {_PANEL} && {_PANEL}.sessionContext"
            f" && {_PANEL}.sessionContext.session && {_PANEL}.sessionContext.session.kernel"
            f" && {_PANEL}.content.widgets.length > 0", timeout=180_000)

    def cell(self, marker: str) -> int:
        index = self.page.evaluate(_INDEX, marker)
        assert index >= 0, f"{self.name}: no cell containing {marker!r} in the open notebook"
        return index

    def type_into(self, marker: str, source: str) -> None:
        """Replace the source of the cell that contains `marker` with `source`."""
        self.page.evaluate(f"([i, s]) => {_PANEL}.content.widgets[i].model.sharedModel"
                           ".setSource(s)", [self.cell(marker), source])

    def start(self, markers: list[str]) -> None:
        """Run the cells holding `markers`, one after the other, as Shift+Enter on each would;
        returns at once (`wait` waits)."""
        indices = [self.cell(m) for m in markers]
        self.page.evaluate(
            f"""(indices) => {{
            window.__dltutorRun = 'running';
            (async () => {{
                const panel = {_PANEL};
                for (const i of indices) {{
                    panel.content.activeCellIndex = i;
                    const ok = await window.jupyterapp.commands.execute('notebook:run-cell');
                    if (ok === false) {{ window.__dltutorRun = 'error in cell ' + i; return; }}
                }}
                window.__dltutorRun = 'done';
            }})().catch(e => {{ window.__dltutorRun = 'error: ' + e; }});
        }}""", indices)

    def wait(self, timeout_s: float = 600) -> str:
        self.page.wait_for_function("() => window.__dltutorRun !== 'running'",
                                    timeout=timeout_s * 1000)
        return self.page.evaluate("() => window.__dltutorRun")

    def output(self, marker: str) -> str:
        """The text of the outputs of the cell holding `marker`, as the notebook keeps them."""
        return self.page.evaluate(f"""(i) => {{
            const outs = {_PANEL}.content.widgets[i].model.outputs;
            const text = [];
            for (let k = 0; k < outs.length; k++) {{
                const o = outs.get(k).toJSON();
                if (o.text) text.push([].concat(o.text).join(''));
                if (o.data && o.data['text/plain']) text.push([].concat(o.data['text/plain']).join(''));
                if (o.traceback) text.push(o.traceback.join('\\n'));
            }}
            return text.join('');
        }}""", self.cell(marker))

    def save(self) -> None:
        self.page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        self.page.wait_for_function(f"() => !{_PANEL}.context.model.dirty", timeout=60_000)

    def screenshot(self, path) -> None:
        """The page with the last cell run (its output) in view."""
        self.page.evaluate(f"() => {_PANEL}.content.activeCell.node.scrollIntoView(false)")
        self.page.screenshot(path=str(path), full_page=False)

    def close(self) -> None:
        self.context.close()
