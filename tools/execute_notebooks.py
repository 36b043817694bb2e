"""Re-execute lessons in place, top to bottom in a fresh kernel, and strip volatile metadata.

Run: python tools/execute_notebooks.py notebooks/01_*.ipynb ...   (or `make notebooks`).
Running it twice leaves `git diff` empty: no timings, no kernel versions, seeded hashing.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
KEEP_CELL_METADATA = ("tags",)


def clean(nb: nbformat.NotebookNode) -> None:
    """Keep only what a reader needs: the kernel name, cell tags, and the outputs."""
    widgets = nb.metadata.get("widgets")
    nb.metadata = nbformat.NotebookNode(kernelspec=KERNELSPEC, language_info={"name": "python"})
    if widgets:
        nb.metadata["widgets"] = widgets
    for cell in nb.cells:
        cell.metadata = nbformat.NotebookNode({k: v for k, v in cell.metadata.items() if k in KEEP_CELL_METADATA})


def execute(path: pathlib.Path) -> float:
    """Execute one notebook in place and return the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=120, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - start
    clean(nb)
    nbformat.write(nb, path)
    return seconds


def main(paths: list[str]) -> None:
    """Execute each path given, and print how long each took."""
    os.environ["PYTHONHASHSEED"] = "0"  # the kernel inherits it: set and dict order stay put
    for name in paths:
        print(f"{name}: {execute(pathlib.Path(name)):.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
