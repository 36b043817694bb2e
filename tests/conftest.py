"""Helpers shared by the tests: Debian Chromium with the network closed, and optional heavy dependencies.

Outside CI a test that needs Chromium or DeepSpeed skips with the reason when it is missing;
under CI=true the same absence is a failure, because `.ci/run` and `make test` install both.
"""

from __future__ import annotations

import importlib
import os
import pathlib
from urllib.parse import urlparse

import pytest

CHROMIUM = pathlib.Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def need(what: str, present: bool, how: str) -> None:
    """Skip (outside CI) or fail (under CI=true) when `what` is not `present`."""
    if present:
        return
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"CI=true but {what} is missing: {how}")
    pytest.skip(f"{what} is not installed ({how})", allow_module_level=True)


def need_chromium() -> None:
    """Debian's Chromium, which the browser and book tests drive."""
    need("/usr/bin/chromium", CHROMIUM.exists(), "apt-get install -y chromium chromium-driver; .ci/run does it")


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
