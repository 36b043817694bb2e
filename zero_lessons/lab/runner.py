"""Running the lab: a process per rank, a time limit, no rank left behind; then measured beside predicted.
No torch: the ranks import it, this process never does.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import socket
import tempfile
import time
from pathlib import Path

from .. import checks
from . import modes as table
from . import predict_deepspeed, predict_torch, reuse
from .modes import MODE_NAMES, Mode
from .results import Predicted, Results, Row
from .timeline_setup import STEP_NAMES

#: Each framework's prediction: (mode, gpus, rank) -> Predicted.
PREDICTIONS = {table.PYTORCH: predict_torch.predict, table.DEEPSPEED: predict_deepspeed.predict}
MAX_RANKS = 8  #: ranks per run; each is a process with its own torch
MAX_TIMEOUT = 3600  #: seconds one world size may take, at most


class LabError(RuntimeError):
    """A rank failed or hung; the message says which and why."""


def predict(mode: Mode, gpus: int, rank: int) -> Predicted:
    """What the package predicts one rank of `mode` holds and sends."""
    return PREDICTIONS[mode.framework](mode, gpus, rank)


def extensions_dir() -> str:
    """Where DeepSpeed compiles its extension: $TORCH_EXTENSIONS_DIR if set, else .cache/ in a source
    checkout, else a folder in the system's temporary directory. Never the user's home."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return os.environ["TORCH_EXTENSIONS_DIR"]
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file():
        return str(root / ".cache" / "torch_extensions")
    return str(Path(tempfile.gettempdir()) / "zero-lessons-torch-extensions")


def clear_batons(folder: str, since: float) -> list[Path]:
    """Remove the build locks in `folder` made at or after `since` (a time.time()), and return them.

    Every DeepSpeed rank loads its compiled ops through torch's FileBaton: it makes `<op>/lock`, builds or
    finds the library, and removes the lock. A rank stopped in between leaves the lock behind, and every later
    rank waits for it forever. Call this once the ranks started at `since` are stopped."""
    cleared = []
    for lock in Path(folder).glob("*/lock"):
        with contextlib.suppress(OSError):
            if lock.stat().st_mtime >= since:
                lock.unlink()
                cleared.append(lock)
    return cleared


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank(
    rank: int, world: int, port: int, keys: tuple[str, ...], results, extensions: str, log: str
) -> None:
    """A rank's entry point. Everything it prints, from Python or C++, goes to the file `log`; then, and
    only here in the child process, torch is imported."""
    output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(output, 1)
    os.dup2(output, 2)
    from . import ranks

    ranks.run(rank, world, port, keys, results, extensions)


def _tail(path: Path, lines: int = 15) -> str:
    """The last lines of a rank's log, for an error message."""
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        text = ""
    return "\n".join(text.splitlines()[-lines:]) if text else "(it printed nothing)"


def _collect(procs: list, results, logs: list[Path], expected: int, timeout: float) -> list:
    """The ranks' `expected` reports, or LabError when one fails, dies or `timeout` seconds pass."""
    reports: list = []
    deadline, world = time.monotonic() + timeout, len(procs)
    while len(reports) < expected:
        try:
            kind, data = results.get(timeout=max(0.1, min(5, deadline - time.monotonic())))
        except queue.Empty:
            dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if dead:
                raise LabError(
                    f"lab with {world} ranks failed: rank {dead[0]} exited with "
                    f"{procs[dead[0]].exitcode}; the end of its output:\n{_tail(logs[dead[0]])}"
                ) from None
            if time.monotonic() > deadline:
                raise LabError(f"lab with {world} ranks failed: no answer after {timeout:.0f} s") from None
            continue
        if kind == "error":
            raise LabError(f"rank {data[0]} of {world} failed:\n{data[1]}")
        reports.append(data)
    return reports


def _spawn(world: int, keys: tuple[str, ...], timeout: float) -> list:
    """Run `keys` on `world` ranks: each rank's (key, rank, Measured), or stop them all and raise LabError.

    Each rank writes what it prints (DeepSpeed is chatty) to its own log in a temporary folder; a
    failure quotes the end of the failing rank's log.
    """
    ctx = multiprocessing.get_context("spawn")
    results, port, extensions = ctx.Queue(), free_port(), extensions_dir()
    with tempfile.TemporaryDirectory(prefix="zero-lab-") as folder:
        logs = [Path(folder) / f"rank{r}.log" for r in range(world)]
        procs = [
            ctx.Process(
                target=_rank, args=(r, world, port, keys, results, extensions, str(logs[r])), daemon=True
            )
            for r in range(world)
        ]
        started = time.time()
        try:
            for proc in procs:
                proc.start()
            reports = _collect(procs, results, logs, world * len(keys), timeout)
            for proc in procs:
                proc.join(timeout=30)
        finally:
            stopped = [proc for proc in procs if proc.is_alive()]
            for proc in stopped:  # success, failure or Ctrl-C: no rank outlives the lab
                proc.terminate()
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            if stopped:  # a rank stopped while loading DeepSpeed's ops leaves their build lock
                clear_batons(extensions, started)
    return reports


def _matrix(ranks, keys, steps=()) -> tuple[tuple[int, ...], tuple[str, ...], tuple[str, ...]]:
    """The world sizes, mode keys and timeline keys, checked, each in the lab's order; or an error naming the
    field. Modes may be none when timelines are asked for."""
    if not isinstance(ranks, (tuple, list)) or not ranks:
        raise TypeError(
            f"ranks must be a non-empty tuple of world sizes from 1 to {MAX_RANKS}, got {checks.shown(ranks)}"
        )
    if not isinstance(steps, (tuple, list)) or not all(key in STEP_NAMES for key in steps):
        raise ValueError(
            f"steps must be a tuple of timeline keys from {', '.join(STEP_NAMES)}, got {checks.shown(steps)}"
        )
    if not isinstance(keys, (tuple, list)) or not (keys or steps):
        raise TypeError(
            f"modes must be a non-empty tuple of mode keys, such as ('ddp',), got {checks.shown(keys)}"
        )
    chosen = {table.get(key).key for key in keys}
    return (
        tuple(checks.whole("ranks", world, high=MAX_RANKS) for world in ranks),
        tuple(key for key in MODE_NAMES if key in chosen),
        tuple(key for key in STEP_NAMES if key in steps),
    )


def _within_full_run(worlds: tuple[int, ...], keys: tuple[str, ...]):
    """A kept run of every mode, cut down to `keys`: lesson 10 asks for PyTorch's modes, lesson 11 for
    DeepSpeed's, and the test session's one full run serves both. None when no such run is kept."""
    found = reuse.load(worlds, tuple(MODE_NAMES))
    if found is None:
        return None
    measured, seconds = found
    return [entry for entry in measured if entry[1] in keys], seconds


def run(
    ranks: tuple[int, ...] = (1, 2, 4),
    modes: tuple[str, ...] = tuple(MODE_NAMES),
    timeout: float = 300,
    steps: tuple[str, ...] = (),
) -> tuple[Results, float]:
    """Run every mode at every world size; return the results, sorted, and the wall time in seconds.

    `steps` names step timelines (`STEP_NAMES`) to measure in the same ranks, after the modes; they
    come back in `Results.timelines`. `timeout` bounds each world size's run; the first DeepSpeed
    run also compiles its extension. A run that `reuse` finds (only inside the test session) is not
    repeated, and its wall time is returned; a kept run that lacks a timeline asked for is run again.
    """
    worlds, keys, steps = _matrix(ranks, modes, steps)
    timeout = float(
        checks.amount("timeout", timeout, positive=True, high=(MAX_TIMEOUT, f"{MAX_TIMEOUT:,} s"))
    )
    found = reuse.load(worlds, keys) or _within_full_run(worlds, keys)
    if found is None or not set(steps) <= {key for _, key, _, _ in found[0]}:
        start = time.monotonic()
        measured = [(world, *report) for world in worlds for report in _spawn(world, keys + steps, timeout)]
        found = measured, time.monotonic() - start
        reuse.save(worlds, keys, *found)
    measured, seconds = found
    order = list(MODE_NAMES)
    rows = [
        Row(key, world, rank, data, predict(table.get(key), world, rank))
        for world, key, rank, data in measured
        if key in MODE_NAMES
    ]
    rows.sort(key=lambda row: (order.index(row.mode), row.gpus, row.rank))
    timelines = sorted(
        (data for _, key, _, data in measured if key in STEP_NAMES),
        key=lambda m: (list(STEP_NAMES).index(m.key), m.gpus, m.rank),
    )
    return Results(tuple(rows), tuple(timelines)), seconds
