"""What each rank process runs: join the gloo group on loopback, then build, train and measure every mode.
Imports torch; only the rank processes import this module.

Every socket stays on 127.0.0.1. MASTER_ADDR covers only where ranks connect: TCPStore's own server
listens on every interface unless it is handed a socket already bound to loopback, and gloo binds
its pair sockets to the address the hostname resolves to unless GLOO_SOCKET_IFNAME names an interface.
"""

from __future__ import annotations

import gc
import os
import socket
import traceback
from contextlib import nullcontext
from itertools import pairwise

import torch
import torch.distributed as dist

from . import modes, rank_deepspeed, rank_torch, timeline_setup
from .counting import CommCounter
from .model import MODEL, LabModel
from .modes import DEEPSPEED, PYTORCH, Mode
from .results import Measured

LOOPBACK = "127.0.0.1"
#: Each framework's trainer: (mode, model, batch) -> (train, close), where `train(snapshot)` runs one step.
TRAINERS = {PYTORCH: rank_torch.trainer, DEEPSPEED: rank_deepspeed.trainer}


def loopback_interface() -> str:
    """The loopback network interface's name: "lo" on Linux, "lo0" on macOS and the BSDs."""
    names = {name for _, name in socket.if_nameindex()}
    for name in ("lo", "lo0"):
        if name in names:
            return name
    raise RuntimeError(f"no loopback network interface (lo or lo0) among: {', '.join(sorted(names))}")


def join(rank: int, world: int, port: int, extensions: str) -> None:
    """Join the gloo group of `world` ranks, every socket on 127.0.0.1; rank 0 serves the store on `port`.

    `extensions` is where DeepSpeed builds and keeps its small C++ extension (TORCH_EXTENSIONS_DIR).
    """
    os.environ.update(
        MASTER_ADDR=LOOPBACK,
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        TORCH_EXTENSIONS_DIR=extensions,
        GLOO_SOCKET_IFNAME=loopback_interface(),
    )
    listener = socket.create_server((LOOPBACK, port)).detach() if rank == 0 else None  # the store owns it
    store = dist.TCPStore(LOOPBACK, port, world, rank == 0, master_listen_fd=listener)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)


def build_model(spec: LabModel = MODEL) -> torch.nn.Module:
    """The lab's MLP (or `spec`'s) in fp32, the same on every rank (seeded), with biases."""
    torch.manual_seed(spec.init_seed)
    layers: list[torch.nn.Module] = []
    for a, b in pairwise(spec.widths):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def batch(rank: int, spec: LabModel = MODEL) -> torch.Tensor:
    """This rank's own batch, the same in every step."""
    return torch.randn(spec.batch, spec.widths[0], generator=torch.Generator().manual_seed(spec.seed(rank)))


def measure(mode: Mode, rank: int) -> Measured:
    """Train MODEL.steps steps of `mode`; count the first and last step's traffic and what the last holds
    (for DeepSpeed's stage 1, also as its gradient reduction starts)."""
    first, last = CommCounter(), CommCounter()
    train, close = TRAINERS[mode.framework](mode, build_model(), batch(rank))
    for number in range(1, MODEL.steps + 1):
        counter = first if number == 1 else last if number == MODEL.steps else None
        with counter.counting() if counter else nullcontext():
            found = train(snapshot=number == MODEL.steps)
    close()
    return Measured(found[0], last.traffic(), first.traffic(), found[1])


def run(rank: int, world: int, port: int, keys: tuple[str, ...], results, extensions: str) -> None:
    """Entry point of one rank: join the group, measure every mode, put ("ok", (key, rank, Measured)) on
    `results` for each, and leave cleanly; on any failure put ("error", (rank, traceback)) instead.

    Keys of `timeline_setup.BY_KEY` are the step's timeline, measured after the modes in the same ranks.
    """
    torch.set_num_threads(1)
    try:
        join(rank, world, port, extensions)
        chosen = [modes.get(key) for key in keys if key not in timeline_setup.BY_KEY]
        steps = [timeline_setup.BY_KEY[key] for key in keys if key in timeline_setup.BY_KEY]
        if any(mode.framework == DEEPSPEED for mode in chosen + [s.mode for s in steps]):
            rank_deepspeed.start()
        for mode in chosen:
            results.put(("ok", (mode.key, rank, measure(mode, rank))))
            dist.barrier()
        if steps:
            from . import timeline  # it imports this module

            gc.collect()  # tear the modes' engines down now, not inside a timeline's counter
            for setup in steps:
                results.put(("ok", (setup.key, rank, timeline.measure(setup, world, rank))))
                dist.barrier()
        dist.barrier()  # gloo can abort at teardown unless every rank gets here first
        dist.destroy_process_group()
    except BaseException:
        results.put(("error", (rank, traceback.format_exc())))
        raise
