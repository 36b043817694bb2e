"""The pip and conda descriptions of the project ask for the same packages, at the same versions."""

import pathlib
import re
import tomllib

import yaml

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
    assert set(pins(project["dependencies"])) == {"sympy", "numpy", "matplotlib", "ipywidgets", "jupyterlab", "voila"}
    assert project["scripts"]["zero-lessons"] == "zero_lessons.cli:main"


def test_numeric_modules_do_not_import_heavy_libraries():
    import subprocess
    import sys
    code = ("import sys, zero_lessons.cli, zero_lessons; "
            "print(sorted(m for m in ('sympy', 'matplotlib', 'ipywidgets', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
