"""The rendered book: built offline, then read in Chromium with every non-local request blocked."""

from __future__ import annotations

import functools
import http.server
import pathlib
import subprocess
import sys
import threading

import pytest

from conftest import local_only, need, need_chromium, need_module, tool

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
need_chromium()
need_module("jupyter_book", "the book extra installs it; `make test` does")
# The first build fetches MathJax and the widget manager with `npm pack`; later builds use .cache/npm.
npm_problem = tool("build_book").npm_missing()
need("npm", npm_problem is None, f"{npm_problem}; `make test` installs npm when run as root")


class Quiet(http.server.SimpleHTTPRequestHandler):
    """A static file handler that does not log every request to stderr."""

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    """Build the book, and serve it on 127.0.0.1 for the module's tests; stop the server afterwards."""
    build = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_book.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    print("\n" + build.stdout.strip().splitlines()[-1])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(SITE)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def open_page(browser, site):
    """Open a book page with every request that is not for 127.0.0.1 blocked, and recorded."""
    context = browser.new_context(viewport={"width": 1300, "height": 1000})
    blocked = local_only(context)

    def go(path: str):
        page = context.new_page()
        page.goto(f"{site}/{path}", wait_until="networkidle")
        page.blocked = blocked
        return page

    try:
        yield go
    finally:
        context.close()


def test_math_is_rendered(open_page):
    page = open_page("notebooks/02_partitioning_stage_by_stage.html")
    page.wait_for_selector("mjx-container", timeout=30_000)
    assert page.locator("mjx-container").count() >= 10
    body = page.locator("article").inner_text()
    assert "\\frac" not in body and "\\displaystyle" not in body and "$" not in body
    assert page.blocked == []


def test_article_table_and_figures_on_lesson_two(open_page):
    page = open_page("notebooks/02_partitioning_stage_by_stage.html")
    rows = page.locator("table.zero-table").first.locator("tr")
    totals = [rows.nth(i).locator("td").nth(5).inner_text() for i in range(1, 5)]
    assert totals == ["120", "41.25", "28.125", "15"]
    figures = page.locator("article img")
    assert figures.count() >= 3
    assert all(figures.nth(i).evaluate("img => img.naturalWidth > 0") for i in range(figures.count()))
    assert page.blocked == []


def test_explorer_page_shows_the_saved_widget_once(open_page):
    page = open_page("notebooks/05_explorer.html")
    page.wait_for_selector(".zero-explorer", timeout=30_000)
    assert page.locator(".zero-explorer").count() == 1
    assert page.locator(".zero-explorer table.zero-table").count() == 1
    assert "lowest stage that fits: ZeRO-1" in page.locator(".zero-explorer .zero-verdict").inner_text()
    assert "make lab" in page.locator("article").inner_text()  # how to get live widgets
    assert page.blocked == []


@pytest.mark.parametrize(
    "path",
    [
        "index.html",
        "notebooks/01_the_training_state.html",
        "notebooks/03_communication.html",
        "notebooks/04_choosing_a_stage.html",
        "notebooks/06_deepspeed_in_practice.html",
        "notebooks/07_lab_measure_it.html",
        "notebooks/11_workshop_exercises.html",
        "docs/instructor.html",
    ],
)
def test_every_page_loads_offline(open_page, path):
    page = open_page(path)
    assert page.locator("article h1").count() >= 1
    assert page.blocked == []
