"""What each rank runs: build a small model under one framework, train two steps, measure. Imports torch."""

from __future__ import annotations

import os
import traceback

import torch
import torch.distributed as dist

from .counting import CommCounter, held
from .predict import WIDTHS
#: The modes a rank can run, in the order the lab reports them.
MODES = ("ddp", "zero_redundancy_optimizer", "fsdp_reshard", "fsdp_no_reshard", "fsdp_bf16")


def build_model() -> torch.nn.Module:
    """The same small MLP on every rank (seeded), with biases, in fp32."""
    torch.manual_seed(0)
    layers = []
    for a, b in zip(WIDTHS, WIDTHS[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def wrap(mode: str, model: torch.nn.Module, counter: CommCounter):
    """Wrap `model` for `mode` and return (model, optimizer)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
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


def step(model, optimizer, rank: int) -> None:
    """One training step on this rank's own batch; gradients are left in place for the snapshot."""
    optimizer.zero_grad(set_to_none=True)
    generator = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(8, WIDTHS[0], generator=generator)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    optimizer.step()


def measure(mode: str, rank: int) -> dict:
    """Train two steps under `mode`; count state after the second optimizer step, and traffic in that step."""
    counter = CommCounter()
    model, optimizer = wrap(mode, build_model(), counter)
    step(model, optimizer, rank)  # the first step creates Adam's state
    with counter.counting():
        step(model, optimizer, rank)
    return {"mode": mode, "rank": rank, "held": held(model, optimizer), "elements": dict(counter.elements),
            "bytes": dict(counter.nbytes), "calls": dict(counter.calls), "paper_elements": counter.paper_elements()}


def run(rank: int, world: int, port: int, modes: tuple[str, ...], results) -> None:
    """Entry point of one rank: join the group on 127.0.0.1, measure every mode, report, and leave cleanly."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        for mode in modes:
            results.put(("ok", measure(mode, rank)))
            dist.barrier()
        dist.barrier()  # gloo can abort at teardown unless every rank gets here first
        dist.destroy_process_group()
    except BaseException:
        results.put(("error", {"rank": rank, "traceback": traceback.format_exc()}))
        raise
