"""Helpers shared by the tests: test tiers, Debian Chromium with the network closed, optional heavy packages.

Outside CI a test that needs Chromium or DeepSpeed skips with the reason when it is missing;
under CI=true the same absence is a failure, because `make test` installs both (tools/system_deps.py).
"""

from __future__ import annotations

import importlib
import itertools
import os
import pathlib
import re
import sys
from urllib.parse import urlparse

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: test file name prefix -> the marker its tests carry (`make check` leaves these out)
TIERS = {"test_lab": "lab", "test_browser": "browser", "test_book": "book"}
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def pytest_collection_modifyitems(items) -> None:
    """Mark each test with its tier: by file name for tests/, `notebook` for every nbval cell."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker("notebook")
        for prefix, marker in TIERS.items():
            if item.path.name.startswith(prefix):
                item.add_marker(marker)


def pytest_ignore_collect(collection_path, config) -> bool | None:
    """Leave a tier's file unimported when `-m` deselects all its tests (importing test_lab loads torch)."""
    marker = next((m for prefix, m in TIERS.items() if collection_path.name.startswith(prefix)), None)
    expression = config.getoption("markexpr")
    if marker is None or not expression or collection_path.suffix != ".py":
        return None
    try:  # a private pytest API: should it change, collect as usual (slower, never wrong)
        from _pytest.mark.expression import Expression

        compiled = Expression.compile(expression)
    except Exception:
        return None
    # Its tests carry `marker` and may carry any other: skip only if no combination would be selected.
    others = sorted(set(re.findall(r"[A-Za-z_]\w*", expression)) - {"and", "or", "not", marker})
    for values in itertools.product((False, True), repeat=len(others)):
        if _selects(compiled, {marker, *(name for name, on in zip(others, values, strict=True) if on)}):
            return None
    return True


def _selects(compiled, marks: set[str]) -> bool:
    """Whether a compiled `-m` expression selects a test that carries exactly `marks`."""
    return compiled.evaluate(lambda name, **kwargs: name in marks)


def tool(name: str):
    """The script tools/`name`.py as a module (tools/ is no package; its scripts import each other)."""
    if str(ROOT / "tools") not in sys.path:
        sys.path.append(str(ROOT / "tools"))
    return importlib.import_module(name)


def need(what: str, present: bool, how: str) -> None:
    """Skip (outside CI) or fail (under CI=true) when `what` is not `present`."""
    if present:
        return
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"CI=true but {what} is missing: {how}")
    pytest.skip(f"{what} is not installed ({how})", allow_module_level=True)


CHROMIUM = tool("system_deps").CHROMIUM_PATH


def need_chromium() -> None:
    """Debian's Chromium, which the browser and book tests drive."""
    need(
        str(CHROMIUM),
        CHROMIUM.exists(),
        "apt-get install -y chromium chromium-driver; `make test` does it when run as root",
    )


def need_module(name: str, how: str = "`make test` installs it with the lab extra"):
    """Import `name`, or skip / fail as `need` says."""
    try:
        return importlib.import_module(name)
    except ImportError:
        need(name, False, how)


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium, closed after the module's tests."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


def local_only(context) -> list[str]:
    """Abort every request of `context` not addressed to 127.0.0.1; return the list that records them."""
    blocked: list[str] = []

    def route(request_route):
        if urlparse(request_route.request.url).hostname in ("127.0.0.1", "localhost"):
            request_route.continue_()
        else:
            blocked.append(request_route.request.url)
            request_route.abort()

    context.route("**/*", route)
    return blocked


def cut_marks(ax) -> int:
    """How many of `axis_cut.mark_cut`'s slashes `ax` carries: 2 where its y axis is marked as cut."""
    from zero_lessons.present.axis_cut import SLASHES

    xs, _ = SLASHES
    return sum(
        1 for line in ax.lines if line.get_transform() == ax.transAxes and tuple(line.get_xdata()) == xs
    )
