"""The system programs the tests need beyond Python packages: check them, and as root on Debian install them.

Run: python3 tools/system_deps.py [test|book]   (`make test` and `make book` run it first)
When something is missing: as root with apt-get, install it from Debian (`apt-get update -qq`, then
`apt-get install -y -qq ...`, with no prompt and no stdin); otherwise print one line that says what to
install, and exit 1, so that no test runs without what it needs.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass

from build_book import npm_missing

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: where the browser and book tests find Debian's Chromium
CHROMIUM_PATH = pathlib.Path("/usr/bin/chromium")


@dataclass(frozen=True)
class Need:
    """Something a command needs from the system, the Debian packages that bring it, and who uses it."""

    packages: tuple[str, ...]  #: Debian packages that provide it
    used_by: str  #: what needs it, in words
    present: Callable[[], bool]  #: whether it is there now


CHROMIUM = Need(
    ("chromium", "chromium-driver"),
    "the browser and book tests drive Debian's Chromium",
    CHROMIUM_PATH.exists,
)
NPM = Need(
    ("npm",),
    "the first book build fetches MathJax and the widget manager with `npm pack`",
    lambda: npm_missing() is None,
)
COMPILER = Need(
    ("g++",),
    "DeepSpeed compiles a small C++ extension on the lab's first run",
    lambda: shutil.which("c++") is not None or shutil.which("g++") is not None,
)
HEADERS = Need(
    ("python3-dev",),
    "that extension includes Python.h",
    lambda: pathlib.Path(sysconfig.get_paths()["include"], "Python.h").exists(),
)
VENV = Need(
    ("python3-venv",),
    "`python3 -m venv .venv` needs ensurepip",
    lambda: (ROOT / ".venv").exists() or importlib.util.find_spec("ensurepip") is not None,
)
#: command -> what it needs. Debian's own Python keeps its headers and ensurepip in separate packages.
NEEDS = {
    "test": (CHROMIUM, NPM, COMPILER) + ((HEADERS, VENV) if sys.base_prefix == "/usr" else ()),
    "book": (NPM,),
}


def missing(needs: tuple[Need, ...]) -> list[Need]:
    """The needs not met now."""
    return [need for need in needs if not need.present()]


def packages(needs: list[Need]) -> list[str]:
    """The Debian packages that meet `needs`, in order."""
    return [package for need in needs for package in need.packages]


def advice(command: str, needs: list[Need]) -> str:
    """One line: what `make <command>` lacks, who uses it, and how to install it."""
    parts = "; ".join(f"{' and '.join(need.packages)} ({need.used_by})" for need in needs)
    return (
        f"make {command} needs {parts}. Install them with `apt-get install -y {' '.join(packages(needs))}`, "
        f"or run make {command} as root to have them installed."
    )


def install(names: list[str]) -> int:
    """Install Debian packages, no prompt and no stdin; return apt-get's status (output shown on failure)."""
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    for step in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *names]):
        done = subprocess.run(
            step,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        if done.returncode != 0:
            print("\n".join(done.stdout.splitlines()[-20:]), file=sys.stderr)
            return done.returncode
    return 0


def main(argv: list[str]) -> int:
    """Check the needs of the command named in `argv` (default test); install or explain what is missing."""
    command = argv[0] if argv else "test"
    if command not in NEEDS or len(argv) > 1:
        print(
            f"system_deps: command must be one of {', '.join(NEEDS)}, got {' '.join(argv)!r}", file=sys.stderr
        )
        return 2
    lacking = missing(NEEDS[command])
    if not lacking:
        return 0
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"system_deps: {advice(command, lacking)}", file=sys.stderr)
        return 1
    names = packages(lacking)
    print(
        f"system_deps: installing {' '.join(names)} from Debian for make {command} (a minute or two)",
        flush=True,
    )
    status = install(names)
    if status != 0:
        print(f"system_deps: apt-get install {' '.join(names)} exited with status {status}", file=sys.stderr)
        return 1
    still = missing(lacking)
    if still:
        print(f"system_deps: installed, but still missing: {advice(command, still)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
