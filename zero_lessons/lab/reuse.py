"""One lab run shared within a test session, so `make test` runs the lab matrix once, not twice. No torch.

Only when the environment variable ZERO_LESSONS_LAB_REUSE names a folder. tests/test_lab.py sets it
to a fresh folder of the session's own and runs the lab there; lessons 10 and 11, executed later in
the same session by nbval, then find that run (each its own modes of it) instead of starting ranks.
A run is found only under its key: a hash of every source file of the package, the versions of
Python, torch and DeepSpeed, the world sizes and the modes, so any change to them runs the lab again.
Only measurements are kept: the predictions are always computed afresh. A learner's kernel and the
command line never set the variable, so there the lab always runs.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from importlib import metadata
from pathlib import Path

ENV = "ZERO_LESSONS_LAB_REUSE"
PACKAGE = Path(__file__).resolve().parents[1]


def _version(distribution: str) -> str:
    """An installed distribution's version, read without importing it (so never torch in the parent)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "absent"


def key(ranks: tuple[int, ...], modes: tuple[str, ...]) -> str:
    """A hash of everything a run's measurements depend on: the package's code, the versions, the matrix."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(f"{path.relative_to(PACKAGE).as_posix()}\0".encode() + path.read_bytes() + b"\0")
    digest.update(repr((sys.version, _version("torch"), _version("deepspeed"), ranks, modes)).encode())
    return digest.hexdigest()


def _path(ranks: tuple[int, ...], modes: tuple[str, ...]) -> Path | None:
    """Where a run of this matrix is kept, or None when reuse is off."""
    folder = os.environ.get(ENV)
    return Path(folder) / f"{key(ranks, modes)}.pickle" if folder else None


def load(ranks: tuple[int, ...], modes: tuple[str, ...]):
    """The kept (measurements, seconds) of a run of this matrix with this code, or None."""
    path = _path(ranks, modes)
    if path is None or not path.is_file():
        return None
    with path.open("rb") as file:
        return pickle.load(file)


def save(ranks: tuple[int, ...], modes: tuple[str, ...], measured: list, seconds: float) -> None:
    """Keep a run's measurements and wall time, when reuse is on."""
    path = _path(ranks, modes)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_bytes(pickle.dumps((measured, seconds)))
    partial.replace(path)  # a reader never sees half a file
