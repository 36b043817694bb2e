"""The layout's rules, read from the source with `ast`: which part may import which, no private names across
modules, small modules and functions; and one explorer update checks each input once.

The parts (README, "Architecture"): the core at the top of the package; `present`, `planning` and `explorer`
above it; `lab`, `workshop`, `run` and `cli` at the edges.
"""

from __future__ import annotations

import ast
import pathlib
from collections import Counter
from unittest import mock

import pytest

from zero_lessons.explorer import views  # imported before counting: the widget builds its default Settings

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "zero_lessons"
#: The core: no import from any other part of the package.
CORE = (
    "units",
    "checks",
    "stages",
    "recipes",
    "inputs",
    "memory",
    "communication",
    "symbolic",
    "simulate",
    "tables",
)
#: The parts outside the core.
PARTS = ("present", "explorer", "planning", "lab", "cli", "workshop", "run")
#: Which parts each part must never import (the core's row is every part).
NEVER = {
    **{core: PARTS for core in CORE},
    "present": ("explorer", "lab", "cli", "workshop", "run"),
    "planning": ("present", "explorer", "lab", "cli", "workshop", "run"),
}
#: What the command line must start without, whichever path through the package it takes.
HEAVY = ("sympy", "matplotlib", "ipywidgets", "numpy")
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 300, 40


def module_name(path: pathlib.Path) -> str:
    """zero_lessons/present/table.py -> "zero_lessons.present.table"; an __init__.py names its package."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def part(module: str) -> str:
    """The part a module belongs to: "zero_lessons.present.table" -> "present"; the package itself -> ""."""
    return module.split(".")[1] if "." in module else ""


def imports(module: str) -> list[tuple[str, str, int, bool]]:
    """Every import in `module`: (module imported, name taken from it or "", line, at module level)."""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    inside = {
        id(n)
        for f in ast.walk(TREES[module])
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(f)
    }
    found = []
    for node in ast.walk(TREES[module]):
        top = id(node) not in inside
        if isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno, top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:  # `from . import memory` imports the module zero_lessons.memory
                sub = f"{source}.{alias.name}"
                target = (sub, "") if sub in MODULES else (source, alias.name)
                found.append((*target, node.lineno, top))
    return found


def test_the_arrows_point_one_way():
    wrong = []
    for module in MODULES:
        banned = NEVER.get(part(module), ())
        for target, _, line, _ in imports(module):
            if target.startswith("zero_lessons.") and part(target) in banned and part(target) != part(module):
                wrong.append(f"{module}:{line} imports {target}")
    assert wrong == []


def closure(start: str) -> set[str]:
    """`start` and every package module it loads on import: module-level imports, and each parent package."""
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module in seen or module not in MODULES:
            continue
        seen.add(module)
        parents = [".".join(module.split(".")[:k]) for k in range(1, module.count(".") + 1)]
        todo += parents + [t for t, _, _, top in imports(module) if top and t.startswith("zero_lessons")]
    return seen


def test_the_command_line_never_loads_a_heavy_library():
    loaded = closure("zero_lessons.cli") | {m for m in MODULES if m.startswith("zero_lessons.cli")}
    assert {"zero_lessons.cli.grammar", "zero_lessons.present.table", "zero_lessons.memory"} <= loaded
    heavy = [
        f"{module}:{line} imports {target}"
        for module in sorted(loaded)
        for target, _, line, _ in imports(module)
        if target.split(".")[0] in HEAVY
    ]
    assert heavy == []  # at module level or inside a function, in the CLI and everything it loads


def test_no_module_takes_a_private_name_from_another():
    private = []
    for module in MODULES:
        private += [
            f"{module}:{line} takes {target}.{name}"
            for target, name, line, _ in imports(module)
            if name.startswith("_") and not name.startswith("__")
        ]
        modules_here = {
            alias.asname or alias.name
            for node in ast.walk(TREES[module])
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
            if f"{node.module or ''}".split(".")[-1] != alias.name
        }
        short = {m.rpartition(".")[2] for m in MODULES} & modules_here
        private += [
            f"{module}:{node.lineno} reads {node.value.id}.{node.attr}"
            for node in ast.walk(TREES[module])
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in short
            and node.attr[:1] == "_"
            and node.attr[:2] != "__"
        ]
    assert private == []


def test_modules_and_functions_stay_small():
    long = [
        f"{m}: {len(p.read_text().splitlines())} lines"
        for m, p in MODULES.items()
        if len(p.read_text().splitlines()) > MAX_MODULE_LINES
    ]
    long += [
        f"{m}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for m, tree in TREES.items()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


def test_the_package_root_loads_the_core_only():
    roots = {part(t) for t, _, _, _ in imports("zero_lessons") if t.startswith("zero_lessons.")}
    assert roots <= set(CORE)


def test_sub_packages_export_a_few_names():
    for name in ("present", "explorer", "planning", "lab", "workshop", "run"):
        exported = next(
            ast.literal_eval(node.value)
            for node in TREES[f"zero_lessons.{name}"].body
            if isinstance(node, ast.Assign) and node.targets[0].id == "__all__"
        )
        assert len(exported) <= 12, (name, exported)


# Coerce at the edges: one explorer update checks each input once and computes each stage's memory once.

COUNTED = {  # name -> (module, function)
    "checks.params": ("checks", "params"),
    "checks.gpus": ("checks", "gpus"),
    "checks.whole": ("checks", "whole"),
    "checks.memory": ("checks", "memory"),
    "checks.bandwidth": ("checks", "bandwidth"),
    "recipes.get": ("recipes", "get"),
    "memory.per_gpu": ("memory", "per_gpu"),
    "memory.per_stage": ("memory", "per_stage"),
    "memory.breakdown": ("memory", "breakdown"),
    "communication.elements_sent": ("communication", "elements_sent"),
}


@pytest.fixture
def counted():
    """Every COUNTED function wrapped in a mock that counts its calls (and calls it)."""
    import importlib

    patches = {}
    for key, (module, function) in COUNTED.items():
        target = importlib.import_module(f"zero_lessons.{module}")
        patches[key] = mock.patch.object(target, function, wraps=getattr(target, function))
    started = {key: patch.start() for key, patch in patches.items()}
    yield started
    mock.patch.stopall()


def test_one_explorer_update_checks_each_input_once_and_computes_each_quantity_once(counted):
    settings = views.Settings()  # the defaults: the article's 7.5B on 8 x 80 GB
    view = views.compute_view(settings)
    shown = [
        view.table.to_html(),
        view.verdict,
        views.plot_memory_bars(view),
        views.plot_scaling(view),
        views.plot_comm(view),
        views.comm_html(view),
        views.advice_html(view),
    ]
    assert all(shown)
    calls = {key: wrapped.call_count for key, wrapped in counted.items()}
    # Each input once, in Settings (through its Setup): Ψ, N_d, the recipe, the memory per GPU, the
    # activations, the link.
    assert calls["checks.params"] == calls["checks.gpus"] == calls["recipes.get"] == 1
    memories = Counter(call.args[0] for call in counted["checks.memory"].call_args_list)
    assert memories == {"gpu_memory": 1, "activations": 1} and calls["checks.bandwidth"] == 1
    # Each stage's memory once (today's code computed the four stages twice, through per_gpu, 8 calls), shared
    # by the table, the verdict and the advice; the paper's traffic (table) and the ring traffic (comm views)
    # once per stage each.
    assert (calls["memory.per_stage"], calls["memory.breakdown"], calls["memory.per_gpu"]) == (1, 4, 0)
    assert calls["communication.elements_sent"] == 2 * 4
    # checks.whole also checks the display functions' own arguments (decimals shown, a count in a title, the
    # scaling grid's top); as a check of an input it runs once for Ψ and once for N_d.
    named = Counter(call.args[0] for call in counted["checks.whole"].call_args_list)
    assert (named["params"], named["gpus"], named["max_gpus"]) == (1, 1, 1)
    assert set(named) == {
        "params",
        "gpus",
        "max_gpus",
        "digits",
        "count",
        "left",
    }  # left: a table row's text columns
    assert named["count"] == 3  # the titles of the table, the bars and the scaling chart say "7.5B"
