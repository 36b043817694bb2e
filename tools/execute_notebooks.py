"""Re-execute lessons in place, top to bottom in a fresh kernel, and strip volatile metadata.

Run: python tools/execute_notebooks.py notebooks/01_*.ipynb ...   (or `make notebooks`).
Running it twice leaves `git diff` empty: no timings, no kernel versions, seeded hashing.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import sys
import time

import nbformat
from nbclient import NotebookClient

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
KEEP_CELL_METADATA = ("tags", "jupyter")  # jupyter: {"source_hidden": true}, a folded answer check
VIEW = "application/vnd.jupyter.widget-view+json"


def clean(nb: nbformat.NotebookNode) -> None:
    """Keep only what a reader needs: the kernel name, cell tags, and the outputs."""
    widgets = nb.metadata.get("widgets")
    nb.metadata = nbformat.NotebookNode(kernelspec=KERNELSPEC, language_info={"name": "python"})
    if widgets:
        nb.metadata["widgets"] = widgets
    for cell in nb.cells:
        cell.metadata = nbformat.NotebookNode(
            {k: v for k, v in cell.metadata.items() if k in KEEP_CELL_METADATA}
        )


def widget_order(nb: nbformat.NotebookNode) -> list[str]:
    """Widget model ids in a stable order: depth first from each displayed widget, in cell order."""
    state = (
        nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    )
    roots = [
        out["data"][VIEW]["model_id"]
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if VIEW in out.get("data", {})
    ]
    order: list[str] = []

    def visit(model_id: str) -> None:
        if model_id in state and model_id not in order:
            order.append(model_id)
            for ref in re.findall(r"IPY_MODEL_([0-9a-f]+)", json.dumps(state[model_id], sort_keys=True)):
                visit(ref)

    for root in roots:
        visit(root)
    rest = sorted(
        set(state) - set(order),
        key=lambda m: re.sub(r"IPY_MODEL_[0-9a-f]+", "", json.dumps(state[m], sort_keys=True)),
    )
    return order + rest


def stable_widget_ids(nb: nbformat.NotebookNode, name: str) -> str:
    """The notebook as JSON text, with random widget model ids renamed and sorted by a stable order."""
    text = nbformat.writes(nb)
    for index, old in enumerate(widget_order(nb)):
        text = text.replace(old, hashlib.sha1(f"{name}:{index}".encode()).hexdigest()[:32])
    nb = nbformat.reads(text, as_version=4)
    widgets = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json")
    if widgets:
        widgets["state"] = {key: widgets["state"][key] for key in widget_order(nb)}
    return nbformat.writes(nb)


def cell_timeout() -> int:
    """Seconds one cell may run: 120, or ZL_CELL_TIMEOUT (1 to 3600) for a loaded machine."""
    text = os.environ.get("ZL_CELL_TIMEOUT", "120")
    if not text.isdigit() or not 1 <= int(text) <= 3600:
        raise SystemExit(f"ZL_CELL_TIMEOUT must be a whole number of seconds from 1 to 3600, got {text!r}")
    return int(text)


def execute(path: pathlib.Path) -> float:
    """Execute one notebook in place and return the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=cell_timeout(),
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    seconds = time.perf_counter() - start
    clean(nb)
    path.write_text(stable_widget_ids(nb, path.name) + "\n")
    return seconds


def main(paths: list[str]) -> None:
    """Execute each path given, and print how long each took."""
    os.environ["PYTHONHASHSEED"] = "0"  # the kernel inherits it: set and dict order stay put
    for name in paths:
        print(f"{name}: {execute(pathlib.Path(name)):.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
