"""A rank's PyTorch side: wrap the model as a mode says, and train it one step at a time. Imports torch.

PyTorch modes are counted after the optimizer step, while the gradients are still in place.
"""

from __future__ import annotations

from functools import partial

import torch

from .counting import CommCounter, held
from .model import MODEL
from .modes import Mode
from .results import Held


def wrap(mode: Mode, model: torch.nn.Module):
    """Wrap `model` as `mode.wrapping` says and return (model, optimizer): Adam at the lab model's rate."""
    wrapping = mode.wrapping
    if wrapping.wrapper in ("ddp", "zero_redundancy_optimizer"):
        cap = {} if wrapping.bucket_cap_mb is None else {"bucket_cap_mb": wrapping.bucket_cap_mb}
        model = torch.nn.parallel.DistributedDataParallel(model, **cap)
        model.register_comm_hook(None, CommCounter.ddp_hook)
        if wrapping.wrapper == "ddp":
            return model, torch.optim.Adam(model.parameters(), lr=MODEL.lr)
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return model, ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=torch.optim.Adam, lr=MODEL.lr
        )
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dtype = getattr(torch, wrapping.param_dtype) if wrapping.param_dtype else None
    options = {
        "reshard_after_forward": wrapping.reshard_after_forward,
        "mp_policy": MixedPrecisionPolicy(param_dtype=dtype),
    }
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, **options)
    fully_shard(model, **options)
    return model, torch.optim.Adam(model.parameters(), lr=MODEL.lr)


def step(model, optimizer, x: torch.Tensor, snapshot: bool = False) -> tuple[Held, None] | None:
    """One training step on batch `x`; with `snapshot`, count what is held after the optimizer step (and
    None, as DeepSpeed's trainer gives its stage 1's bytes before the gradient reduction there)."""
    optimizer.zero_grad(set_to_none=True)
    model(x).float().pow(2).mean().backward()
    optimizer.step()
    return (held(model, optimizer), None) if snapshot else None


def trainer(mode: Mode, model: torch.nn.Module, x: torch.Tensor):
    """(train, close) for a PyTorch mode: `train(snapshot)` runs one step; `close()` has nothing to free."""
    return partial(step, *wrap(mode, model), x), lambda: None
