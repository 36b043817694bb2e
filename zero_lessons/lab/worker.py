"""What each rank runs: build a small model under one framework, train two steps, measure. Imports torch."""

from __future__ import annotations

import os
import traceback
from contextlib import nullcontext
from functools import partial

import torch
import torch.distributed as dist

from .counting import CommCounter, held
from .ds_predict import ZERO_CONFIG
from .predict import WIDTHS

#: The modes a rank can run, in the order the lab reports them: PyTorch's, then DeepSpeed's.
TORCH_MODES = ("ddp", "zero_redundancy_optimizer", "fsdp_reshard", "fsdp_no_reshard", "fsdp_bf16")
MODES = TORCH_MODES + tuple(ZERO_CONFIG)
#: Steps trained per mode. The last is measured: by then Adam's state exists and DeepSpeed's stage 3
#: has recorded the order in which modules run (it does so in the first two steps) and prefetches.
STEPS = 3


def build_model() -> torch.nn.Module:
    """The same small MLP on every rank (seeded), with biases, in fp32."""
    torch.manual_seed(0)
    layers = []
    for a, b in zip(WIDTHS, WIDTHS[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def wrap(mode: str, model: torch.nn.Module, counter: CommCounter):
    """Wrap `model` for a PyTorch `mode` and return (model, optimizer)."""
    if mode in ("ddp", "zero_redundancy_optimizer"):
        model = torch.nn.parallel.DistributedDataParallel(model)
        model.register_comm_hook(None, counter.ddp_hook)
        if mode == "ddp":
            return model, torch.optim.Adam(model.parameters(), lr=1e-3)
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16) if mode == "fsdp_bf16" else MixedPrecisionPolicy()
    reshard = mode != "fsdp_no_reshard"
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, reshard_after_forward=reshard, mp_policy=policy)
    fully_shard(model, reshard_after_forward=reshard, mp_policy=policy)
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def step(model, optimizer, rank: int, snapshot: bool = False) -> dict | None:
    """One training step on this rank's own batch; with `snapshot`, count what is held after the optimizer step,
    while the gradients are still in place."""
    optimizer.zero_grad(set_to_none=True)
    generator = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(8, WIDTHS[0], generator=generator)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    optimizer.step()
    return held(model, optimizer) if snapshot else None


def measure(mode: str, rank: int) -> dict:
    """Train STEPS steps under `mode`; count traffic in the first and the last step, and what the last one holds.

    PyTorch modes are counted after the optimizer step, where the gradients are still in place;
    DeepSpeed modes after the backward pass, because `engine.step()` frees the gradients.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    first, last = CommCounter(), CommCounter()
    if mode in ZERO_CONFIG:
        from . import ds_worker

        engine = ds_worker.build(mode, build_model())
        train = partial(ds_worker.step, engine, rank)
    else:
        train = partial(step, *wrap(mode, build_model(), first), rank)
    for number in range(1, STEPS + 1):
        counting = first.counting() if number == 1 else last.counting() if number == STEPS else nullcontext()
        with counting:
            found = train(snapshot=number == STEPS)
    if mode in ZERO_CONFIG:
        engine.destroy()
    totals = last.totals()
    return {"mode": mode, "rank": rank, "held": found, **totals, "first_step": first.totals()}


def run(rank: int, world: int, port: int, modes: tuple[str, ...], results, extensions: str) -> None:
    """Entry point of one rank: join the group on 127.0.0.1, measure every mode, report, and leave cleanly.

    `extensions` is where DeepSpeed builds and keeps its small C++ extension (TORCH_EXTENSIONS_DIR).
    """
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world), TORCH_EXTENSIONS_DIR=extensions)
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        if any(mode in ZERO_CONFIG for mode in modes):
            from . import ds_worker

            ds_worker.start()
        for mode in modes:
            results.put(("ok", measure(mode, rank)))
            dist.barrier()
        dist.barrier()  # gloo can abort at teardown unless every rank gets here first
        dist.destroy_process_group()
    except BaseException:
        results.put(("error", {"rank": rank, "traceback": traceback.format_exc()}))
        raise
