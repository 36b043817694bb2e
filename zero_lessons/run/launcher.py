"""Start the training script under torchrun from Python and read back what every rank reports. No torch here.

`launch` runs, in a subprocess, what a user types on one machine,

    torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port P \\
        -m zero_lessons.run.train --ds-config ds.json

(through `loopback`, so that torchrun's store listens on 127.0.0.1 only), bounded by a time limit.
A failure becomes one line of `RunError`, and no rank outlives the call.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import checks
from ..lab.runner import clear_batons, extensions_dir, free_port

MAX_RANKS = 8  #: ranks per run; each is a process with its own torch and DeepSpeed
MAX_STEPS = 100  #: training steps per config, before the checkpoint
MAX_TIMEOUT = 3600  #: seconds one run may take, at most


class RunError(RuntimeError):
    """The run failed or timed out; the message is one line that says which and why."""


@dataclass(frozen=True)
class RankReport:
    """What one rank reported for one config: its losses, the bytes it held, and its checkpoint checks."""

    config: str  #: the config file's name
    rank: int  #: this rank
    world: int  #: ranks in the run, N
    stage: int  #: the config's zero_optimization.stage
    offload: str  #: what the config offloads: "none", "optimizer", "optimizer+parameters" (or "parameters")
    params: int  #: parameters in the script's model
    losses: tuple[float, ...]  #: this rank's loss at each step, on its own batch
    skipped_steps: int  #: steps skipped for an inf or NaN gradient (fp16; bf16 too at stages 1-2)
    held: dict[str, int]  #: bytes held after the last backward, by field, from the lab's counter
    consolidated: int | None  #: tensors rank 0 rebuilt with zero_to_fp32; None on other ranks and at stage 0
    files: tuple[str, ...] | None = None  #: the checkpoint's files, as rank 0 listed them; None elsewhere

    @property
    def total(self) -> int:
        """Every byte this rank held, all fields together."""
        return sum(self.held.values())


@dataclass(frozen=True)
class RunReport:
    """Every rank's report for every config of one launch, and how long the launch took."""

    ranks: tuple[RankReport, ...]  #: by config, in the order given, then by rank
    seconds: float  #: wall time of the launch, start-up and checkpoints included

    def of(self, config: str) -> tuple[RankReport, ...]:
        """The reports for the config file named `config`, one per rank."""
        return tuple(r for r in self.ranks if r.config == config)


def offload_of(config: dict) -> str:
    """What a DeepSpeed config offloads, in the advisor's words: none, optimizer, optimizer+parameters."""
    zero = config.get("zero_optimization", {})
    parts = {"optimizer": "offload_optimizer", "parameters": "offload_param"}
    offloaded = [part for part, key in parts.items() if zero.get(key, {}).get("device", "none") != "none"]
    return "+".join(offloaded) or "none"


def read_configs(ds_config: str | Path | Sequence[str | Path]) -> dict[Path, dict]:
    """Each config file's path and JSON, checked: it exists, holds a JSON object, and its name is unique."""
    paths = [Path(ds_config)] if isinstance(ds_config, (str, Path)) else [Path(p) for p in ds_config]
    if not paths or len({p.stem for p in paths}) < len(paths):
        names = ", ".join(map(str, paths)) or "none"
        raise ValueError(f"ds_config must name one or more files with different names, got {names}")
    configs = {}
    for path in paths:
        try:
            configs[path.absolute()] = config = json.loads(path.read_text())
        except OSError as error:
            raise ValueError(f"ds_config: cannot read {path}: {error.strerror}") from None
        except json.JSONDecodeError as error:
            raise ValueError(f"ds_config: {path} is not JSON: {error}") from None
        if not isinstance(config, dict):
            raise ValueError(f"ds_config: {path} must hold a JSON object, got {type(config).__name__}")
    return configs


def command(paths: Sequence[Path], ranks: int, steps: int, port: int, folder: Path) -> list[str]:
    """The torchrun command line: `ranks` processes on this machine, rendezvous on 127.0.0.1:`port`."""
    torchrun = ["--nproc-per-node", str(ranks), "--master-addr", "127.0.0.1", "--master-port", str(port)]
    script = ["--ds-config", *map(str, paths), "--steps", str(steps), "--report", str(folder)]
    script += ["--checkpoints", str(folder / "checkpoints")]
    head = [sys.executable, "-m", "zero_lessons.run.loopback"]  # torchrun, its store on loopback
    return [*head, *torchrun, "-m", "zero_lessons.run.train", *script]


def _stat(stat: Path) -> list[str]:
    """The fields of a /proc/<pid>/stat file after the process's name: state, parent, ... ([] if it ended)."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):  # it ended while we looked
        return []


def _children(pid: int) -> list[int]:
    """The processes that `pid` started, read from /proc (Linux)."""
    return [
        int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat") if _stat(stat)[1:2] == [str(pid)]
    ]


def _running(pid: int) -> bool:
    """Whether process `pid` still runs: it exists and has not yet ended (a zombie has)."""
    return _stat(Path(f"/proc/{pid}/stat"))[:1] not in ([], ["Z"])


def _outlived(pids: list[int], seconds: float) -> list[int]:
    """The processes of `pids` still running after up to `seconds` of waiting for them to end."""
    deadline = time.monotonic() + seconds
    while (left := [pid for pid in pids if _running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _stop(process: subprocess.Popen, started: float) -> None:
    """Stop torchrun and every rank it started (at `started`, a time.time()), and the build locks they leave.

    SIGTERM first: torchrun passes it on to each rank (which it starts in a session of its own) and
    waits up to 30 s for them to end. Whatever still runs after that is killed, ranks included; torchrun
    can end a moment before a rank it signalled, so the ranks are waited for too. A rank stopped while it
    loads DeepSpeed's ops leaves their build lock, which `clear_batons` removes.
    """
    ranks = _children(process.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=40)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    for rank in _outlived(ranks, 10):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(rank, signal.SIGKILL)
    _outlived(ranks, 10)
    clear_batons(extensions_dir(), started)


def _cause(log: Path) -> str:
    """The log line that says why the run failed: the last exception a rank raised, else the last line."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"(\[rank\d+\]: )?\w+(Error|Exception|Exit)\b", line)]
    return (raised or lines or ["(it printed nothing)"])[-1]


def _run(argv: list[str], folder: Path, timeout: float) -> None:
    """Run `argv` with its output in folder/torchrun.log; raise RunError if it fails or outlives `timeout`."""
    # gloo binds its sockets to the interface named here (else to the address the hostname resolves to)
    env = os.environ | {
        "GLOO_SOCKET_IFNAME": "lo",
        "TORCH_EXTENSIONS_DIR": extensions_dir(),
        "OMP_NUM_THREADS": "1",
    }
    log, started = folder / "torchrun.log", time.time()
    with open(log, "w") as out:
        # A session of its own: a Ctrl-C at the terminal reaches only us, and _stop ends torchrun in order.
        process = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=folder, start_new_session=True
        )
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(process, started)
            stopped = f"the run did not finish within {timeout:g} s, and was stopped"
            raise RunError(f"{stopped} (its last words: {_cause(log)[:200]})") from None
        except BaseException:  # Ctrl-C: no rank outlives the call
            _stop(process, started)
            raise
    if code != 0:
        raise RunError(f"the run failed (torchrun exited with {code}): {_cause(log)}")


def _reports(folder: Path, configs: dict[Path, dict], ranks: int) -> list[RankReport]:
    """Every rank's report from folder/rank<N>.jsonl, with the stage and offload its config asked for."""
    files = [folder / f"rank{rank}.jsonl" for rank in range(ranks)]
    lines = [json.loads(line) for file in files if file.exists() for line in file.read_text().splitlines()]
    if len(lines) != ranks * len(configs):
        raise RunError(f"expected {ranks * len(configs)} rank reports, got {len(lines)}")
    by_name = {path.name: config for path, config in configs.items()}
    reports = []
    for line in lines:
        config = by_name[line["config"]]
        asked = {"stage": config.get("zero_optimization", {}).get("stage", 0), "offload": offload_of(config)}
        files = None if line["files"] is None else tuple(line["files"])
        reports.append(RankReport(**line | asked | {"losses": tuple(line["losses"]), "files": files}))
    order = list(by_name)
    return sorted(reports, key=lambda r: (order.index(r.config), r.rank))


def launch(
    ds_config: str | Path | Sequence[str | Path], ranks: int = 2, steps: int = 3, timeout: float = 300
) -> RunReport:
    """Train under each config on `ranks` CPU ranks with torchrun; return every rank's report.

    `timeout` bounds the whole launch; the first offload run also compiles DeepSpeed's CPU Adam (minutes).
    """
    configs = read_configs(ds_config)
    ranks = checks.whole("ranks", ranks, high=MAX_RANKS)
    steps = checks.whole("steps", steps, high=MAX_STEPS)
    timeout = float(checks.amount("timeout", timeout, positive=True))
    if timeout > MAX_TIMEOUT:
        raise ValueError(f"timeout must be a number of seconds > 0 and ≤ {MAX_TIMEOUT}, got {timeout:g}")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="zero-run-") as tmp:
        folder = Path(tmp)
        _run(command(list(configs), ranks, steps, free_port(), folder), folder, timeout)
        reports = _reports(folder, configs, ranks)
    return RunReport(tuple(reports), time.monotonic() - start)
