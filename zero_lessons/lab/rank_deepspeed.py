"""A rank's DeepSpeed side: a real `deepspeed.initialize` in bf16 on the CPU accelerator. Imports torch, and
deepspeed inside its functions.

The torch process group (gloo, 127.0.0.1) is already up when this runs; DeepSpeed's communication
layer wraps it. The snapshot is taken after the backward pass and before `engine.step()`, because
that call frees the gradients of stages 1 and 2. Stage 1 gets a second one as it starts reducing its
gradients, at the end of `engine.backward()`, when it still holds every gradient whole: its peak.
"""

from __future__ import annotations

import logging
from functools import partial

import torch

from .counting import adam_state, by_field
from .modes import Mode, deepspeed_config
from .results import Held

#: Names of the tensors DeepSpeed's ZeRO optimizers keep, by what they hold. Every other tensor
#: attribute of the optimizer wrapper is counted as "other", so nothing is left out.
GRADIENT_ATTRS = (
    "averaged_gradients",
    "grad_partitions_flat_buffer",
    "_DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition",
)
MASTER_ATTRS = ("fp32_groups", "single_partition_of_fp32_groups", "fp32_partitioned_groups_flat")


def start() -> None:
    """Attach DeepSpeed to the running process group, once per rank, and quiet its logging."""
    import deepspeed
    from deepspeed.utils import logger

    logger.setLevel(logging.ERROR)
    deepspeed.init_distributed(dist_backend="gloo")


def build(mode: Mode, model: torch.nn.Module, config: dict | None = None):
    """The DeepSpeed engine for `mode`, or for `config` when given, around `model` (fp32; cast to bf16)."""
    import deepspeed

    engine, *_ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config or deepspeed_config(mode)
    )
    return engine


def _tensors(value, depth: int = 3):
    """Tensors inside `value`, looking into lists, tuples and dicts up to `depth` levels."""
    if torch.is_tensor(value):
        yield value
    elif depth and isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, depth - 1)
    elif depth and isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, depth - 1)


def groups(engine) -> dict[str, list]:
    """The tensors behind each field of `held`."""
    wrapper = engine.optimizer
    moments, steps = adam_state(wrapper.optimizer)  # torch.optim.Adam over DeepSpeed's fp32 master weights
    params = list(engine.module.parameters())
    attrs = {name: list(_tensors(value)) for name, value in vars(wrapper).items()}
    return {
        "weights": params + [getattr(p, "ds_tensor", None) for p in params],
        "gradients": [p.grad for p in params] + [t for a in GRADIENT_ATTRS for t in attrs.get(a, [])],
        "optimizer": moments + [t for a in MASTER_ATTRS for t in attrs.get(a, [])],
        "step_counters": steps,
        "other": [t for tensors in attrs.values() for t in tensors],
    }


def held(engine) -> Held:
    """Bytes this rank holds, by field, counting each storage once."""
    return Held(**by_field(groups(engine)))


def watch_reduction(engine) -> list[Held]:
    """What stage 1 holds each time it starts reducing its gradients (`reduce_gradients`), in a list that
    fills as it trains."""
    seen: list[Held] = []
    reduce = engine.optimizer.reduce_gradients

    def counted(*args, **kwargs):
        seen.append(held(engine))
        return reduce(*args, **kwargs)

    engine.optimizer.reduce_gradients = counted
    return seen


def step(
    engine, x: torch.Tensor, seen: list[Held], snapshot: bool = False
) -> tuple[Held, Held | None] | None:
    """One training step on batch `x`; with `snapshot`, count what is held before `engine.step()`, and
    what stage 1 held as this step's reduction started (None at other stages)."""
    engine.backward(engine(x).float().pow(2).mean())
    found = (held(engine), seen[-1] if seen else None) if snapshot else None
    engine.step()
    return found


def trainer(mode: Mode, model: torch.nn.Module, x: torch.Tensor):
    """(train, close) for a DeepSpeed mode: `train(snapshot)` runs a bf16 step; `close()` frees the engine."""
    engine = build(mode, model)
    seen = watch_reduction(engine) if mode.stage == 1 else []
    return partial(step, engine, x.to(torch.bfloat16), seen), engine.destroy
