"""Packaging and set-up: pip and conda ask for the same packages; a built wheel ships every module and runs
when installed; the system check before `make test` says what is missing, or installs it; the fast tier
leaves the heavy tiers' files unimported."""

import importlib.metadata
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from types import SimpleNamespace

import pytest
import yaml
from packaging.requirements import Requirement

from conftest import pytest_ignore_collect, tool

ROOT = pathlib.Path(__file__).resolve().parents[1]


def pins(lines) -> dict[str, str]:
    """Map package name to pinned version from lines such as "sympy==1.14.0" or "sympy=1.14.0"."""
    found = {}
    for line in lines:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*==?\s*([\w.]+)", line.strip())
        assert match, f"not an exact pin: {line!r}"
        found[match[1].lower()] = match[2]
    return found


def test_pyproject_and_environment_agree():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_side = pins(project["dependencies"] + project["optional-dependencies"]["test"])
    conda = yaml.safe_load((ROOT / "environment.yml").read_text())
    names = [d for d in conda["dependencies"] if isinstance(d, str) and not d.startswith(("python=", "pip"))]
    assert pins(names) == pip_side
    assert conda["channels"] == ["conda-forge"]
    assert {"pip": ["-e ."]} in conda["dependencies"]


def test_runtime_dependencies_are_the_documented_ones():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert set(pins(project["dependencies"])) == {
        "sympy",
        "numpy",
        "matplotlib",
        "ipywidgets",
        "jupyterlab",
        "voila",
    }
    assert project["scripts"]["zero-lessons"] == "zero_lessons.cli:main"


def test_numeric_modules_do_not_import_heavy_libraries():
    import subprocess
    import sys

    code = (
        "import sys, zero_lessons.cli, zero_lessons; "
        "print(sorted(m for m in ('sympy', 'matplotlib', 'ipywidgets', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    """The wheel built offline by the installed setuptools, from a copy of what a build reads."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src)
    shutil.copytree(ROOT / "zero_lessons", src / "zero_lessons", ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    code = "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))"
    build = subprocess.run(
        [sys.executable, "-c", code, str(dist)], cwd=src, capture_output=True, text=True, timeout=120
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    assert "deprecat" not in (build.stdout + build.stderr).lower(), (
        build.stderr
    )  # nothing setuptools will drop
    return dist / build.stdout.strip().splitlines()[-1]


def test_the_setuptools_that_builds_here_is_in_the_declared_range():
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    (setuptools,) = [Requirement(r) for r in requires if Requirement(r).name == "setuptools"]
    assert setuptools.specifier.contains(importlib.metadata.version("setuptools"))
    assert not setuptools.specifier.contains("76.1.0")  # license = "MIT" (an SPDX string) needs 77


def test_wheel_ships_every_module_of_the_source_tree(wheel):
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name for name in archive.namelist() if name.endswith(".py")}
    source = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "zero_lessons").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert "zero_lessons/lab/__init__.py" in source
    assert sorted(source - shipped) == [], "left out of the wheel (does each folder have an __init__.py?)"
    assert sorted(shipped - source) == []


def test_wheel_carries_the_mit_license(wheel):
    with zipfile.ZipFile(wheel) as archive:
        (path,) = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        text, metadata = (
            archive.read(path).decode(),
            archive.read(path.replace("licenses/LICENSE", "METADATA")),
        )
    assert text.startswith("MIT License") and text == (ROOT / "LICENSE").read_text()
    assert b"License-Expression: MIT" in metadata


def test_installed_wheel_runs_outside_the_checkout(wheel, tmp_path):
    env_dir, outside = tmp_path / "venv", tmp_path / "elsewhere"
    outside.mkdir()
    venv.create(env_dir, with_pip=False)  # pip runs from this environment, into that one
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(env_dir / "bin" / "python"),
            "install",
            "--no-index",
            "--no-deps",
            "--quiet",
            "--disable-pip-version-check",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        env=clean,
        timeout=120,
    )
    assert install.returncode == 0, install.stderr

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(env_dir / "bin" / args[0]), *args[1:]],
            cwd=outside,
            capture_output=True,
            text=True,
            env=clean,
            timeout=60,
        )

    table = run("zero-lessons", "table", "--params", "7.5B", "--gpus", "8")
    assert table.returncode == 0 and table.stderr == ""
    assert [line.split()[-3] for line in table.stdout.splitlines()[2:]] == ["120", "41.25", "28.125", "15"]
    lab = run("zero-lessons", "lab", "--help")
    assert lab.returncode == 0 and "--ranks" in lab.stdout
    where = run("python", "-c", "import importlib.util as u; print(u.find_spec('zero_lessons.lab').origin)")
    assert pathlib.Path(where.stdout.strip()).is_relative_to(env_dir), where.stdout + where.stderr


def test_system_check_names_what_to_install_and_who_needs_it():
    deps = tool("system_deps")
    line = deps.advice("test", [deps.CHROMIUM, deps.NPM])
    assert "\n" not in line and "apt-get install -y chromium chromium-driver npm" in line
    assert "browser and book tests" in line and "book build" in line and "as root" in line


@pytest.mark.parametrize("root", [False, True])
def test_system_check_stops_or_installs_before_any_test(monkeypatch, capsys, root):
    deps = tool("system_deps")
    installed: list[list[str]] = []
    absent = deps.Need(("chromium",), "the browser tests", lambda: bool(installed))
    monkeypatch.setitem(deps.NEEDS, "test", (absent,))
    monkeypatch.setattr(deps.os, "geteuid", lambda: 0 if root else 1000)
    monkeypatch.setattr(deps.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(deps, "install", lambda names: installed.append(names) or 0)
    status = deps.main([])
    printed = capsys.readouterr()
    if root:
        assert (status, installed) == (0, [["chromium"]])
        assert printed.err == ""
    else:
        assert (status, installed) == (1, [])
        assert printed.err.count("\n") == 1 and "apt-get install -y chromium" in printed.err


def test_system_check_says_so_when_apt_get_fails(monkeypatch, capsys):
    deps = tool("system_deps")
    monkeypatch.setitem(deps.NEEDS, "test", (deps.Need(("chromium",), "the browser tests", lambda: False),))
    monkeypatch.setattr(deps.os, "geteuid", lambda: 0)
    monkeypatch.setattr(deps.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(deps, "install", lambda names: 100)
    assert deps.main(["test"]) == 1
    assert "exited with status 100" in capsys.readouterr().err


@pytest.mark.parametrize(
    "expression, name, ignored",
    [
        ("not lab and not browser and not book and not notebook and not slow", "test_lab.py", True),
        ("not lab and not browser and not book and not notebook and not slow", "test_browser.py", True),
        ("not lab and not browser and not book and not notebook and not slow", "test_memory.py", None),
        ("not lab", "test_lab_workshop.py", True),
        ("lab and not slow", "test_lab.py", None),  # a lab test that is not slow is selected
        ("slow", "test_lab.py", None),  # a lab test may also be marked slow
        ("", "test_lab.py", None),
    ],
)
def test_the_fast_tier_does_not_import_what_it_deselects(expression, name, ignored):
    config = SimpleNamespace(getoption=lambda option: {"markexpr": expression}[option])
    assert pytest_ignore_collect(ROOT / "tests" / name, config) is ignored
