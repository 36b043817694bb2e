"""Execute every lesson in a fresh kernel and print the seconds each takes, and the total.

Run: python benchmarks/notebook_times.py. Targets: ≤ 10 s per notebook, ≤ 60 s in all.
The notebooks are executed in memory; nothing on disk changes.
"""

import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]


def seconds(path: pathlib.Path) -> float:
    """Wall time to execute one notebook top to bottom, kernel start included."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    return time.perf_counter() - start


def main() -> None:
    """Time each lesson in teaching order."""
    total = 0.0
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        took = seconds(path)
        total += took
        print(f"{path.name:<40} {took:5.1f} s", flush=True)
    print(f"{'all notebooks':<40} {total:5.1f} s (targets: ≤ 10 s each, ≤ 60 s in all)")


if __name__ == "__main__":
    sys.exit(main())
