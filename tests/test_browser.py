"""The explorer in a real browser: JupyterLab and Voila on 127.0.0.1, driven by Playwright in Chromium.

Every server and browser started here is stopped here, on failure too. Requests to any host
other than 127.0.0.1 are blocked and recorded, and the tests assert that none was needed.
"""

from __future__ import annotations

import os
import pathlib
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import local_only, need_chromium
from zero_lessons import GB, units
from zero_lessons.explorer.views import GPU_STEPS
from zero_lessons.memory import per_gpu

ROOT = pathlib.Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
need_chromium()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A Jupyter or Voila server in its own process group, stopped on exit whatever happens."""

    def __init__(self, args: list[str], ready_url: str | None, port: int, workdir: pathlib.Path):
        env = os.environ | {
            "JUPYTER_CONFIG_DIR": str(workdir / "config"),
            "JUPYTER_RUNTIME_DIR": str(workdir / "run"),
            "JUPYTER_PATH": str(ROOT / "share" / "jupyter"),
        }  # the project's offline Voila template
        self.log = (workdir / "server.log").open("w")
        self.proc = subprocess.Popen(
            args, cwd=workdir, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            self._wait(ready_url, port)
        except BaseException:
            self.stop()
            raise

    def _wait(self, url: str | None, port: int, timeout: float = 90) -> None:
        """Poll `url` (or, without one, the port) until the server answers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if url:
                    urllib.request.urlopen(url, timeout=2).close()
                else:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"server not ready after {timeout} s; see {self.log.name}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> pathlib.Path:
    """A scratch folder with a copy of the explorer, so autosave never touches the committed file."""
    folder = tmp_path_factory.mktemp("explorer")
    shutil.copy(ROOT / "notebooks" / "05_explorer.ipynb", folder / "05_explorer.ipynb")
    return folder


@pytest.fixture
def page(browser):
    """A fresh page that blocks, and records, every request not addressed to 127.0.0.1."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    blocked = local_only(context)
    tab = context.new_page()
    tab.blocked = blocked
    try:
        yield tab
    finally:
        context.close()


def expected_zero3(gpus: int, params: int) -> str:
    """The ZeRO-3 total the table must show, computed by the package."""
    return units.format_number(per_gpu(params, gpus, 3).total / GB)


def shown_zero3(page) -> str:
    """The ZeRO-3 total currently shown in the explorer's table."""
    return page.locator(".zero-explorer table.zero-table tr").nth(4).locator("td").nth(5).inner_text()


def check_explorer(page, name: str) -> list[float]:
    """Assert the explorer renders and follows keyboard and typing; return keypress-to-update times in ms."""
    page.wait_for_selector(".zero-explorer table.zero-table", timeout=120_000)
    assert page.locator(".zero-explorer .widget-slider").count() == 2
    assert page.locator(".zero-explorer svg.zero-chart").count() == 3
    assert "lowest stage that fits: ZeRO-1" in page.locator(".zero-verdict").inner_text()
    assert shown_zero3(page) == expected_zero3(8, 7_500_000_000)
    handle = page.locator(".zero-explorer .widget-slider", has_text="GPUs").locator(".noUi-handle")
    handle.focus()
    page.evaluate("""() => { window.__keys = [];
        document.addEventListener('keydown', () => window.__keys.push(performance.now()), true); }""")
    latencies = []
    for gpus in GPU_STEPS[GPU_STEPS.index(8) + 1 :][:10]:  # each ArrowRight moves to the next stop
        expected = expected_zero3(gpus, 7_500_000_000)
        # One call sets the wanted value and starts watching: were they two, a late redraw of the previous
        # step could match the previous value in between and end the wait before the key is pressed.
        page.evaluate(
            """want => { window.__seen = null; window.__want = want;
            new MutationObserver((_, obs) => {
                const rows = document.querySelectorAll('.zero-explorer table.zero-table tr');
                if (rows.length > 4 && rows[4].children[5].textContent === window.__want) {
                    window.__seen = performance.now(); obs.disconnect(); } })
                .observe(document.body, {subtree: true, childList: true, characterData: true}); }""",
            expected,
        )
        page.keyboard.press("ArrowRight")
        page.wait_for_function("() => window.__seen !== null", timeout=20_000)
        assert shown_zero3(page) == expected
        latencies.append(page.evaluate("() => window.__seen - window.__keys[window.__keys.length - 1]"))
    box = page.locator(".zero-explorer .widget-text", has_text="params").locator("input")
    box.fill("13B")
    box.press("Enter")
    expected = expected_zero3(gpus, 13 * 10**9)
    page.wait_for_function(
        "want => { const r = document.querySelectorAll('.zero-explorer table.zero-table tr');"
        " return r.length > 4 && r[4].children[5].textContent === want; }",
        arg=expected,
        timeout=20_000,
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"explorer-{name}.png"), full_page=True)
    assert page.blocked == [], f"external requests were attempted: {page.blocked}"
    print(
        f"\n{name}: keypress → table updated, median {statistics.median(latencies):.0f} ms "
        f"over {len(latencies)} presses (max {max(latencies):.0f} ms)"
    )
    return latencies


def test_explorer_in_jupyterlab(workdir, page):
    port, token = free_port(), secrets.token_hex(16)
    lab = workdir / "lab"
    # Render every cell, not only those in view, so the explorer exists in the DOM wherever it sits.
    tracker = lab / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text('{"windowingMode": "none"}')
    server = Server(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            "--allow-root",
            f"--ServerApp.root_dir={workdir}",
            f"--LabApp.user_settings_dir={lab / 'settings'}",
            f"--LabApp.workspaces_dir={lab / 'workspaces'}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
        ],
        f"http://127.0.0.1:{port}/api/status?token={token}",
        port,
        workdir,
    )
    try:
        page.goto(f"http://127.0.0.1:{port}/lab/tree/05_explorer.ipynb?token={token}")
        page.wait_for_function(
            "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
            " && window.jupyterapp.shell.currentWidget.sessionContext"
            " && window.jupyterapp.shell.currentWidget.sessionContext.session",
            timeout=120_000,
        )
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
            timeout=120_000,
        )
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        check_explorer(page, "jupyterlab")
    finally:
        server.stop()


def test_explorer_in_voila(workdir, page):
    port, token = free_port(), secrets.token_hex(16)
    server = Server(
        [
            sys.executable,
            "-m",
            "voila",
            str(workdir / "05_explorer.ipynb"),
            "--no-browser",
            f"--port={port}",
            "--Voila.ip=127.0.0.1",
            f"--token={token}",
            "--template=zero-offline",
        ],
        None,
        port,
        workdir,
    )  # Voila runs the notebook on each page load, so probe the port only
    try:
        page.goto(f"http://127.0.0.1:{port}/?token={token}")
        check_explorer(page, "voila")
    finally:
        server.stop()
