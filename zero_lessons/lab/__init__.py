"""The lab: train a small model on 1, 2 and 4 CPU ranks (gloo, 127.0.0.1) and set what each rank really
holds and sends beside what the package predicts.

Torch and DeepSpeed are imported only inside the ranks (`worker.py`, `ds_worker.py`), never by
`import zero_lessons.lab`.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import ds_predict, predict

#: Modes in report order, with the name a reader knows them by.
TORCH_NAMES = {"ddp": "DDP", "zero_redundancy_optimizer": "ZeroRedundancyOptimizer",
               "fsdp_reshard": "FSDP2 fully_shard", "fsdp_no_reshard": "FSDP2, reshard_after_forward=False",
               "fsdp_bf16": "FSDP2, bf16 MixedPrecisionPolicy"}
DEEPSPEED_NAMES = {"ds_zero0": "DeepSpeed ZeRO-0", "ds_zero1": "DeepSpeed ZeRO-1", "ds_zero2": "DeepSpeed ZeRO-2",
                   "ds_zero2_reduce": "DeepSpeed ZeRO-2, reduce to owners",
                   "ds_zero3": "DeepSpeed ZeRO-3, all sharded",
                   "ds_zero3_reuse0": "DeepSpeed ZeRO-3, reuse distance 0",
                   "ds_zero3_no_reuse": "DeepSpeed ZeRO-3, no reuse or prefetch",
                   "ds_zero3_persistent": "DeepSpeed ZeRO-3, default threshold"}
MODE_NAMES = TORCH_NAMES | DEEPSPEED_NAMES
FIELDS = ("weights", "gradients", "optimizer", "step_counters", "other")


class LabError(RuntimeError):
    """A rank failed or hung; the message says which and why."""


@dataclass(frozen=True)
class Row:
    """One rank of one mode at one world size: measured and predicted side by side."""

    mode: str  #: key of MODE_NAMES
    gpus: int  #: world size N
    rank: int  #: this rank
    measured: dict  #: bytes held by field, plus "traffic" (elements per collective) and "traffic_bytes"
    predicted: dict  #: the same fields, from `predict`

    @property
    def matches(self) -> bool:
        """Whether every measured number equals its prediction (for DeepSpeed, every single message too)."""
        keys = (*FIELDS, "traffic", "messages") if "messages" in self.predicted else (*FIELDS, "traffic")
        return all(self.measured[k] == self.predicted[k] for k in keys)


def predicted(mode: str, gpus: int, rank: int) -> dict:
    """What the package predicts for one rank of one mode: held bytes by field, traffic, and DeepSpeed's messages."""
    if mode in ds_predict.ZERO_CONFIG:
        return ds_predict.held(mode, predict.WIDTHS, gpus, rank) | {
            "traffic": ds_predict.traffic(mode, predict.WIDTHS, gpus),
            "messages": ds_predict.messages(mode, predict.WIDTHS, gpus)}
    return predict.held(mode, predict.WIDTHS, gpus, rank) | {"traffic": predict.traffic(mode, predict.WIDTHS, gpus)}


def extensions_dir() -> str:
    """Where DeepSpeed compiles its extension: $TORCH_EXTENSIONS_DIR if set, else .cache/ in a source checkout,
    else a folder in the system's temporary directory. Never the user's home."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return os.environ["TORCH_EXTENSIONS_DIR"]
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file():
        return str(root / ".cache" / "torch_extensions")
    return str(Path(tempfile.gettempdir()) / "zero-lessons-torch-extensions")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank(rank: int, world: int, port: int, modes: tuple[str, ...], results, extensions: str, log: str) -> None:
    """A rank's entry point. Everything it prints, from Python or C++, goes to the file `log`; then, and
    only here in the child process, torch is imported."""
    output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(output, 1)
    os.dup2(output, 2)
    from . import worker

    worker.run(rank, world, port, modes, results, extensions)


def _tail(path: Path, lines: int = 15) -> str:
    """The last lines of a rank's log, for an error message."""
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        text = ""
    return "\n".join(text.splitlines()[-lines:]) if text else "(it printed nothing)"


def _spawn(world: int, modes: tuple[str, ...], timeout: float) -> list[dict]:
    """Run `modes` on `world` ranks; return every rank's report, or stop them all and raise LabError.

    Each rank writes what it prints (DeepSpeed is chatty) to its own log in a temporary folder; a
    failure quotes the end of the failing rank's log.
    """
    ctx = multiprocessing.get_context("spawn")
    results, port, extensions = ctx.Queue(), free_port(), extensions_dir()
    with tempfile.TemporaryDirectory(prefix="zero-lab-") as logs:
        log = [Path(logs) / f"rank{r}.log" for r in range(world)]
        procs = [ctx.Process(target=_rank, args=(r, world, port, modes, results, extensions, str(log[r])),
                             daemon=True) for r in range(world)]
        reports: list[dict] = []
        try:
            for proc in procs:
                proc.start()
            deadline = time.monotonic() + timeout
            while len(reports) < world * len(modes):
                try:
                    kind, data = results.get(timeout=max(0.1, min(5, deadline - time.monotonic())))
                except queue.Empty:
                    dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                    if dead:
                        raise LabError(f"lab with {world} ranks failed: rank {dead[0]} exited with "
                                       f"{procs[dead[0]].exitcode}; the end of its output:\n{_tail(log[dead[0]])}") from None
                    if time.monotonic() > deadline:
                        raise LabError(f"lab with {world} ranks failed: no answer after {timeout:.0f} s") from None
                    continue
                if kind == "error":
                    raise LabError(f"rank {data['rank']} of {world} failed:\n{data['traceback']}")
                reports.append(data)
            for proc in procs:
                proc.join(timeout=30)
        finally:
            for proc in procs:  # success, failure or Ctrl-C: no rank outlives the lab
                if proc.is_alive():
                    proc.terminate()
                    proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
    return reports


def run(ranks: tuple[int, ...] = (1, 2, 4), modes: tuple[str, ...] = tuple(MODE_NAMES),
        timeout: float = 300) -> tuple[list[Row], float]:
    """Run every mode at every world size; return the rows, sorted, and the wall time in seconds.

    `timeout` bounds each world size's run; the first DeepSpeed run also compiles its extension.
    """
    start, rows = time.monotonic(), []
    for world in ranks:
        for report in _spawn(world, modes, timeout):
            mode, rank = report["mode"], report["rank"]
            measured = report["held"] | {"traffic": report["elements"], "traffic_bytes": report["bytes"],
                                         "messages": sorted(map(tuple, report["messages"])),
                                         "first_step_traffic": report["first_step"]["elements"]}
            rows.append(Row(mode, world, rank, measured, predicted(mode, world, rank)))
    rows.sort(key=lambda r: (list(MODE_NAMES).index(r.mode), r.gpus, r.rank))
    return rows, time.monotonic() - start
