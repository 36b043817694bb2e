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
import urllib.error
import urllib.request

import pytest

from conftest import local_only, need_chromium
from zero_lessons import GB, units
from zero_lessons.explorer.views import GPU_STEPS
from zero_lessons.memory import per_gpu

ROOT = pathlib.Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
#: How long to wait for the explorer to redraw after an input, in ms: generous, as a loaded 2-core CI machine
#: once took over 20 s (a fresh-clone run, session 30); keypress latencies are measured and reported apart.
UPDATE_TIMEOUT = 60_000
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
    context = browser.new_context(viewport={"width": 1400, "height": 900})
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


def shoot(page, name: str) -> None:
    """Save the whole explorer in test-artifacts/ (the page scrolls inside a panel: make it tall first)."""
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": 2200})
    try:
        page.locator(".zero-explorer").screenshot(path=str(ARTIFACTS / name))
    finally:
        page.set_viewport_size(size)


def settle(page) -> None:
    """Wait until the last view to update, the communication table, shows the table's ZeRO-3 total."""
    page.wait_for_function(
        """() => { const rows = document.querySelectorAll('.zero-explorer table.zero-table tr');
        const comm = document.querySelectorAll('.zero-explorer table.zero-comm tr');
        return rows.length > 4 && comm.length > 4
            && comm[4].lastChild.textContent.startsWith(rows[4].children[5].textContent + ' '); }""",
        timeout=UPDATE_TIMEOUT,
    )


def check_explorer(page, name: str) -> list[float]:
    """Assert the explorer renders and follows keyboard and typing; return keypress-to-update times in ms."""
    page.wait_for_selector(".zero-explorer table.zero-table", timeout=120_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"explorer-{name}-default.png"))
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
        page.wait_for_function("() => window.__seen !== null", timeout=UPDATE_TIMEOUT)
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
        timeout=UPDATE_TIMEOUT,
    )
    settle(page)
    shoot(page, f"explorer-{name}.png")
    assert not page.locator(".zero-static-note").is_visible()  # the note is for static pages only
    assert page.blocked == [], f"external requests were attempted: {page.blocked}"
    print(
        f"\n{name}: keypress → table updated, median {statistics.median(latencies):.0f} ms "
        f"over {len(latencies)} presses (max {max(latencies):.0f} ms)"
    )
    return latencies


CONTROLS = ".zero-explorer :is(.widget-text, .widget-dropdown, .widget-slider, .widget-toggle-buttons)"


def layout(page) -> dict:
    """Where the controls are: each control's box, the right-hand column's box, and the visible area."""
    return page.evaluate(
        """sel => {
        const box = e => { const r = e.getBoundingClientRect();
            return {left: r.left, right: r.right, top: r.top, width: r.width}; };
        const area = document.querySelector('.zero-explorer').closest('.jp-OutputArea-output');
        return {
            controls: [...document.querySelectorAll(sel)].map(box),
            right: box(document.querySelector('.zero-training-controls')),
            buttons: [...document.querySelectorAll('.zero-explorer .widget-toggle-button')].map(box),
            view: area ? box(area) : {left: 0, right: window.innerWidth},
        }; }""",
        CONTROLS,
    )


def type_into(page, label: str, text: str) -> None:
    """Type `text` into the explorer's text box labelled `label` and press Enter."""
    box = page.locator(".zero-explorer .widget-text", has_text=label).locator("input")
    box.fill(text)
    box.press("Enter")


def check_error_layout(page, name: str) -> None:
    """An input error shows under its box and moves nothing: controls stay in view, the right column stays."""
    page.locator(".zero-explorer").scroll_into_view_if_needed()
    before = layout(page)
    assert len(before["controls"]) == 14, before["controls"]  # 8 text boxes, 3 menus, 2 sliders, the unit
    for label, text, key in (
        ("params", "abc", "cannot read 'abc'"),
        ("memory/GPU", "lots", "cannot read 'lots'"),
        ("activations", "a lot", "activations: cannot read 'a lot'"),
    ):
        type_into(page, label, text)
        page.wait_for_function(
            "key => [...document.querySelectorAll('.zero-explorer .zero-error')]"
            ".some(e => e.textContent.includes(key))",
            arg=key,
            timeout=UPDATE_TIMEOUT,
        )
        after = layout(page)
        assert after["right"] == before["right"], (
            f"the right-hand column moved: {before['right']} -> {after['right']}"
        )
        view = after["view"]
        outside = [
            c for c in after["controls"] if c["left"] < view["left"] - 1 or c["right"] > view["right"] + 1
        ]
        assert outside == [], f"controls outside the visible area {view}: {outside}"
        assert len({round(b["top"]) for b in after["buttons"]}) == 1, "the unit buttons are stacked"
    page.screenshot(path=str(ARTIFACTS / f"explorer-{name}-error.png"))
    type_into(page, "params", "7.5B")
    type_into(page, "memory/GPU", "80 GB")
    type_into(page, "activations", "0")
    page.wait_for_function("() => document.querySelectorAll('.zero-explorer .zero-error').length === 0")
    assert layout(page)["right"] == before["right"]


def check_case(page, name: str) -> None:
    """Choosing GPT-2 XL shows its exact size readably and the lowest stage that fits on 4 × 16 GB."""
    page.locator(".zero-explorer .widget-dropdown", has_text="case").locator("select").select_option(
        label="GPT-2 XL (1.56 B) on 4 × 16 GB"
    )
    box = page.locator(".zero-explorer .widget-text", has_text="params").locator("input")
    page.wait_for_function(
        "() => document.querySelector('.zero-verdict').textContent.includes('of 16 GB')",
        timeout=UPDATE_TIMEOUT,
    )
    page.wait_for_function(  # the box's own view may redraw a moment after the verdict's
        "want => [...document.querySelectorAll('.zero-explorer .widget-text')]"
        ".find(e => e.textContent.includes('params')).querySelector('input').value === want",
        arg="1,557,611,200",
        timeout=UPDATE_TIMEOUT,
    )
    assert box.input_value() == "1,557,611,200"
    settle(page)
    shoot(page, f"explorer-{name}-case.png")


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
        # Before Run All, the saved explorer cell shows its summary, never the widget's repr.
        page.wait_for_selector("text=The ZeRO explorer: live controls", timeout=60_000)
        assert "VBox(children" not in page.locator(".jp-Notebook").inner_text()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "explorer-jupyterlab-before-run.png"))
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        check_explorer(page, "jupyterlab")
        check_error_layout(page, "jupyterlab")
        check_case(page, "jupyterlab")
    finally:
        server.stop()


def voila_command() -> list[str]:
    """The arguments `make voila` gives voila (from `make -n voila`): the test serves what learners get."""
    dry = subprocess.run(["make", "-n", "voila"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    line = next(line for line in dry.splitlines() if "/voila " in line)
    args = line.split("/voila ", 1)[1].split()
    assert args[-1] == "notebooks/05_explorer.ipynb" and "--template=zero-offline" in args, line
    return args[:-1]


#: Culling times for the test, in place of `make voila`'s ten minutes: long enough for a page on a busy
#: host to connect before its new kernel counts as idle with no client.
CULL_IDLE_S, CULL_EVERY_S = 10, 1


@pytest.fixture(scope="module")
def voila(workdir):
    """`make voila`'s command on the explorer copy, with short culling times; yields (base url, token)."""
    args = voila_command()
    assert "--MappingKernelManager.cull_idle_timeout=600" in args  # make voila culls idle kernels
    args = [a for a in args if not a.startswith("--MappingKernelManager.cull_")]
    port, token = free_port(), secrets.token_hex(16)
    server = Server(
        [
            sys.executable,
            "-m",
            "voila",
            str(workdir / "05_explorer.ipynb"),
            *args,
            f"--MappingKernelManager.cull_idle_timeout={CULL_IDLE_S}",
            f"--MappingKernelManager.cull_interval={CULL_EVERY_S}",
            "--no-browser",
            f"--port={port}",
            "--Voila.ip=127.0.0.1",
            f"--token={token}",
        ],
        None,
        port,
        workdir,
    )  # Voila runs the notebook on each page load, so probe the port only
    try:
        yield f"http://127.0.0.1:{port}", token
    finally:
        server.stop()


def test_explorer_in_voila(voila, page):
    base, token = voila
    page.goto(f"{base}/?token={token}")
    check_explorer(page, "voila")
    check_error_layout(page, "voila")
    check_case(page, "voila")


def test_voila_shows_only_the_dashboard_and_its_links_work(voila, page):
    base, token = voila
    page.goto(f"{base}/?token={token}")
    page.wait_for_selector(".zero-explorer table.zero-table", timeout=120_000)
    text = page.locator("body").inner_text()
    assert "The live explorer" in text  # the tagged heading and how to use the controls
    for absent in (
        "Live widgets need a Python kernel",
        "Lesson 6",
        "Start here",
        "Exercises",
        "Static snapshot",
    ):
        assert absent not in text, absent
    assert page.locator(".zero-explorer").bounding_box()["y"] < 900  # the dashboard opens on the controls
    links = page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)")
    answers = {url: page.request.get(url).status for url in links}
    assert all(status == 200 for status in answers.values()), answers
    print(f"\nvoila dashboard: {len(links)} links, all answered 200")
    assert page.blocked == []


def kernel_status(base: str, token: str, kernel: str) -> int:
    """The HTTP status of Voila's kernel API for `kernel`: 200 while it runs, 404 once it is gone."""
    try:
        with urllib.request.urlopen(f"{base}/api/kernels/{kernel}?token={token}", timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


def test_a_closed_dashboards_kernel_is_culled(voila, browser):
    base, token = voila
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    local_only(context)
    tab = context.new_page()
    tab.goto(f"{base}/?token={token}")
    tab.wait_for_selector(".zero-explorer table.zero-table", timeout=120_000)
    kernel = tab.evaluate(
        "() => JSON.parse(document.getElementById('jupyter-config-data').textContent).kernelId"
    )
    time.sleep(CULL_IDLE_S + 2 * CULL_EVERY_S)  # a connected kernel is never culled, however idle
    assert kernel_status(base, token, kernel) == 200
    context.close()
    deadline = (
        time.monotonic() + CULL_IDLE_S + 3 * CULL_EVERY_S + 10
    )  # culling time, and slack for a busy host
    while kernel_status(base, token, kernel) == 200 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert kernel_status(base, token, kernel) == 404
