"""What each rank runs for DeepSpeed: a real `deepspeed.initialize` in bf16 on the CPU accelerator. Imports deepspeed.

The torch process group (gloo, 127.0.0.1) is already up when this runs; DeepSpeed's communication
layer wraps it. The snapshot is taken after the backward pass and before `engine.step()`, because
that call frees the gradients of stages 1 and 2.
"""

from __future__ import annotations

import logging

import torch

from .counting import by_field
from .ds_predict import ZERO_CONFIG
from .predict import WIDTHS

#: Names of the tensors DeepSpeed's ZeRO optimizers keep, by what they hold. Every other tensor
#: attribute of the optimizer wrapper is counted as "other", so nothing is left out.
GRADIENT_ATTRS = ("averaged_gradients", "grad_partitions_flat_buffer",
                  "_DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition")
MASTER_ATTRS = ("fp32_groups", "single_partition_of_fp32_groups", "fp32_partitioned_groups_flat")


def config(mode: str) -> dict:
    """The whole DeepSpeed config for a lab mode: bf16, torch's Adam, one micro-batch of 8 per rank."""
    return {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
            "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True, "adam_w_mode": False}},
            "zero_optimization": ZERO_CONFIG[mode], "steps_per_print": 10**9}


def start() -> None:
    """Attach DeepSpeed to the running process group, once per rank, and quiet its logging."""
    import deepspeed
    from deepspeed.utils import logger

    logger.setLevel(logging.ERROR)
    deepspeed.init_distributed(dist_backend="gloo")


def build(mode: str, model: torch.nn.Module):
    """The DeepSpeed engine for `mode` around `model` (fp32; DeepSpeed casts it to bf16)."""
    import deepspeed

    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config(mode))
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


def held(engine) -> dict[str, int]:
    """Bytes this rank holds, by field, counting each storage once."""
    wrapper = engine.optimizer
    inner = wrapper.optimizer  # torch.optim.Adam over DeepSpeed's fp32 master weights
    params = list(engine.module.parameters())
    attrs = {name: list(_tensors(value)) for name, value in vars(wrapper).items()}
    state = [(k, v) for s in inner.state.values() for k, v in s.items() if torch.is_tensor(v)]
    return by_field({
        "weights": params + [getattr(p, "ds_tensor", None) for p in params],
        "gradients": [p.grad for p in params] + [t for a in GRADIENT_ATTRS for t in attrs.get(a, [])],
        "optimizer": [v for k, v in state if k != "step"] + [t for a in MASTER_ATTRS for t in attrs.get(a, [])],
        "step_counters": [v for k, v in state if k == "step"],
        "other": [t for tensors in attrs.values() for t in tensors],
    })


def step(engine, rank: int, snapshot: bool = False) -> dict | None:
    """One training step on this rank's own batch; with `snapshot`, count what is held before `engine.step()`."""
    generator = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(8, WIDTHS[0], generator=generator).to(torch.bfloat16)
    engine.backward(engine(x).float().pow(2).mean())
    found = held(engine) if snapshot else None
    engine.step()
    return found
