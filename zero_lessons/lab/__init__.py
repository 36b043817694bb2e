"""The lab: train a small model on 1, 2 and 4 CPU ranks (gloo, 127.0.0.1) and set what each rank really
holds and sends beside what the package predicts.

Torch is imported only inside the ranks (`worker.py`), never by `import zero_lessons.lab`.
"""

from __future__ import annotations

import multiprocessing
import queue
import socket
import time
from dataclasses import dataclass

from . import predict

#: Modes in report order, with the name a reader knows them by.
MODE_NAMES = {"ddp": "DDP", "zero_redundancy_optimizer": "ZeroRedundancyOptimizer",
              "fsdp_reshard": "FSDP2 fully_shard", "fsdp_no_reshard": "FSDP2, reshard_after_forward=False",
              "fsdp_bf16": "FSDP2, bf16 MixedPrecisionPolicy"}
FIELDS = ("weights", "gradients", "optimizer", "step_counters")


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
        """Whether every measured number equals its prediction."""
        return all(self.measured[k] == self.predicted[k] for k in (*FIELDS, "traffic"))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank(*args) -> None:
    """A rank's entry point: only here, in the child process, is torch imported."""
    from . import worker

    worker.run(*args)


def _spawn(world: int, modes: tuple[str, ...], timeout: float) -> list[dict]:
    """Run `modes` on `world` ranks; return every rank's report, or stop them all and raise LabError."""
    ctx = multiprocessing.get_context("spawn")
    results, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, modes, results), daemon=True) for r in range(world)]
    reports: list[dict] = []
    try:
        for proc in procs:
            proc.start()
        deadline = time.monotonic() + timeout
        while len(reports) < world * len(modes):
            try:
                kind, data = results.get(timeout=max(0.1, min(5, deadline - time.monotonic())))
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    why = f"rank exited with {dead[0].exitcode}" if dead else f"no answer after {timeout:.0f} s"
                    raise LabError(f"lab with {world} ranks failed: {why}") from None
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
        timeout: float = 120) -> tuple[list[Row], float]:
    """Run every mode at every world size; return the rows, sorted, and the wall time in seconds."""
    start, rows = time.monotonic(), []
    for world in ranks:
        for report in _spawn(world, modes, timeout):
            mode, rank = report["mode"], report["rank"]
            measured = report["held"] | {"traffic": report["elements"], "traffic_bytes": report["bytes"]}
            predicted = predict.held(mode, predict.WIDTHS, world, rank) | {"traffic": predict.traffic(mode, predict.WIDTHS, world)}
            rows.append(Row(mode, world, rank, measured, predicted))
    rows.sort(key=lambda r: (list(MODE_NAMES).index(r.mode), r.gpus, r.rank))
    return rows, time.monotonic() - start
