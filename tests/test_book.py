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
ARTIFACTS = ROOT / "test-artifacts"
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


def test_article_table_is_styled(open_page):
    page = open_page("notebooks/02_partitioning_stage_by_stage.html")
    cells = page.locator("table.zero-table").first.locator("tr").nth(3).locator("td")
    style = "(td, p) => getComputedStyle(td).getPropertyValue(p)"
    assert cells.nth(5).inner_text() == "28.125" and cells.nth(5).evaluate(style, "text-align") == "right"
    assert cells.nth(0).evaluate(style, "text-align") == "left"  # stage and partitions are text
    assert all(float(cells.nth(i).evaluate(style, "padding-left")[:-2]) >= 8 for i in range(8))


def test_explorer_page_shows_the_saved_widget_once(open_page):
    page = open_page("notebooks/05_explorer.html")
    page.wait_for_selector(".zero-explorer", timeout=30_000)
    assert page.locator(".zero-explorer").count() == 1
    assert page.locator(".zero-explorer table.zero-table").count() == 1
    assert "lowest stage that fits: ZeRO-1" in page.locator(".zero-explorer .zero-verdict").inner_text()
    assert "make lab" in page.locator("article").inner_text()  # how to get live widgets
    note = page.locator(".zero-explorer .zero-static-note")
    assert note.is_visible() and "Static snapshot" in note.inner_text()  # on the widget itself
    box = page.locator(".zero-explorer .widget-text input").first
    assert box.evaluate("e => getComputedStyle(e).pointerEvents") == "none"  # it takes no input it ignores
    assert page.blocked == []


def test_one_repository_address_feeds_the_clone_command_and_the_buttons(open_page):
    import yaml

    url = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())["repository"]["url"]
    page = open_page("notebooks/05_explorer.html")
    banner = page.locator(".bd-header-announcement").inner_text()
    assert f"git clone {url}.git && cd zero-lessons && make lab" in banner
    links = page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)")
    assert url in links  # the repository button
    owner_name = url.removeprefix("https://github.com/")
    assert (
        f"https://mybinder.org/v2/gh/{owner_name}/main?urlpath=lab/tree/notebooks/05_explorer.ipynb" in links
    )


def test_mathjax_is_only_what_the_pages_load():
    mathjax = SITE / "_static" / "mathjax"
    size = sum(f.stat().st_size for f in mathjax.rglob("*") if f.is_file())
    assert (mathjax / "tex-chtml.js").exists() and size < 3 * 10**6, size  # the whole package is 24 MB


#: Elements that must never be cut off: outputs, code, tables and the explorer.
BOXES = "article :is(div.cell_output, div.output, pre, table, .zero-explorer)"
CLIPPED = """sel => {
    const article = document.querySelector('article').getBoundingClientRect();
    const scrolls = e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);
    const inScroller = e => { for (let p = e; p && p.tagName !== 'ARTICLE'; p = p.parentElement)
        if (scrolls(p)) return true; return false; };
    return [...document.querySelectorAll(sel)].filter(e => e.clientWidth > 0 && !inScroller(e) && (
        e.getBoundingClientRect().right > article.right + 1 || e.scrollWidth > e.clientWidth + 1))
        .map(e => `${e.tagName}.${e.className} ${e.scrollWidth} > ${e.clientWidth}`); }"""


def lesson_pages() -> list[str]:
    """Every lesson page in the book's table of contents, as built paths."""
    import yaml

    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    files = [toc["root"], *(chapter["file"] for chapter in toc["chapters"])]
    return [f"{name}.html" for name in files if name.startswith("notebooks/")]


@pytest.fixture(params=[(1400, 900), (390, 844)], ids=["desktop", "phone"])
def reader(request, browser, site):
    """Open pages at one screen size; record console errors, failed requests and blocked requests."""
    width, height = request.param
    context = browser.new_context(viewport={"width": width, "height": height})
    blocked = local_only(context)

    def go(path: str):
        page = context.new_page()
        page.problems = []
        page.on("console", lambda m: page.problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda err: page.problems.append(f"page error: {err}"))
        page.on(
            "response", lambda r: page.problems.append(f"{r.status} {r.url}") if r.status >= 400 else None
        )
        page.goto(f"{site}/{path}", wait_until="networkidle")
        page.blocked = blocked
        return page

    try:
        yield go
    finally:
        context.close()


def test_every_lesson_fits_its_screen_with_nothing_cut_off_and_no_console_errors(reader):
    ARTIFACTS.mkdir(exist_ok=True)
    seen = {}
    for path in lesson_pages():
        page = reader(path)
        wide = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        clipped = page.evaluate(CLIPPED, BOXES)
        if path.endswith(("02_partitioning_stage_by_stage.html", "05_explorer.html")):
            name = f"book-{path.split('/')[-1][:-5]}-{page.viewport_size['width']}.png"
            page.screenshot(path=str(ARTIFACTS / name), full_page=True)
        if wide > 0 or clipped or page.problems or page.blocked:
            seen[path] = {
                "wider by": wide,
                "clipped": clipped[:5],
                "console": page.problems,
                "blocked": page.blocked,
            }
        page.close()
    assert seen == {}


#: The explorer's controls: text boxes, menus, buttons and sliders.
CONTROLS = ".zero-explorer :is(input, select, button, .widget-slider)"


def test_every_explorer_control_lies_inside_the_explorer(reader):
    page = reader("notebooks/05_explorer.html")
    page.wait_for_selector(".zero-explorer", timeout=30_000)
    outside = page.evaluate(
        """sel => { const box = document.querySelector('.zero-explorer').getBoundingClientRect();
        return [...document.querySelectorAll(sel)].map(e => e.getBoundingClientRect())
            .filter(r => r.width > 0 && (r.left < box.left - 0.5 || r.right > box.right + 0.5))
            .map(r => [r.left, r.right, box.left, box.right].map(Math.round)); }""",
        CONTROLS,
    )
    controls = page.locator(CONTROLS).count()
    assert controls >= 14 and outside == []  # on a phone the 360 px controls shrink to the column


def test_the_navigation_drawer_opens(reader):
    page = reader("notebooks/05_explorer.html")
    sidebar = page.locator("#pst-primary-sidebar")
    phone = page.viewport_size["width"] < 960
    assert (
        sidebar.is_visible() != phone
    )  # the contents show beside the page on a desktop, in a drawer on a phone
    page.locator("button.primary-toggle").first.click()
    page.wait_for_timeout(600)  # the drawer slides
    if phone:  # the theme opens the contents in a drawer of its own, over the page
        link = page.locator("a:visible", has_text="Lesson 5 · The explorer").first
        box = link.bounding_box(timeout=5_000)
        assert box is not None and 0 <= box["x"] and box["x"] + box["width"] <= 390
    else:
        assert not sidebar.is_visible()  # ☰ collapses the sidebar on a desktop


@pytest.mark.parametrize(
    "path",
    [
        "index.html",
        "notebooks/01_the_training_state.html",
        "notebooks/03_communication.html",
        "notebooks/04_choosing_a_stage.html",
        "notebooks/06_deepspeed_estimator.html",
        "notebooks/07_offload.html",
        "notebooks/08_offload_traffic_and_time.html",
        "notebooks/09_offload_nvme_and_advice.html",
        "notebooks/10_lab_pytorch.html",
        "notebooks/11_lab_deepspeed.html",
        "notebooks/19_workshop_exercises.html",
        "docs/instructor.html",
    ],
)
def test_every_page_loads_offline(open_page, path):
    page = open_page(path)
    assert page.locator("article h1").count() >= 1
    assert page.blocked == []
