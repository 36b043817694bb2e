"""DeepSpeed configuration for a chosen stage and offload, and a check against DeepSpeed's own schema."""

from __future__ import annotations

import copy

from .. import checks
from ..stages import StageLike
from .offload import rule

#: The optimizer a config names when the optimizer is offloaded: DeepSpeed then builds its own CPU Adam,
#: and by default it refuses a PyTorch optimizer passed in with optimizer offload
#: (`zero_force_ds_cpu_optimizer`).
#: Every hyperparameter is spelled out: DeepSpeed's "Adam" is AdamW, and the two Adams it may build (torch's,
#: and its CPU Adam) default to different weight decays. These are values to replace with your own.
ADAMW = {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}}


def zero_config(
    stage: StageLike, offload: str = "none", *, micro_batch: int = 1, nvme_path: str | None = None
) -> dict:
    """A DeepSpeed config dict with `zero_optimization` for `stage`, bf16, and the requested offload; with
    offload, also the optimizer DeepSpeed must then build itself (a fresh copy of `ADAMW`)."""
    stage, offload = rule(stage, offload)  # the offload rules, stated once in `offload`
    micro_batch = checks.whole("micro_batch", micro_batch, high=10**6)
    if nvme_path is not None:
        checks.instance("nvme_path", nvme_path, str, "a path such as '/local_nvme', or None")
    device = {"device": "nvme", "nvme_path": nvme_path} if nvme_path else {"device": "cpu"}
    zero: dict = {"stage": int(stage), "overlap_comm": True, "contiguous_gradients": True}
    if offload != "none":
        zero["offload_optimizer"] = device | {"pin_memory": True}
    if offload == "optimizer+parameters":
        zero["offload_param"] = device | {"pin_memory": True}
    config = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "zero_optimization": zero,
    }
    return config | ({"optimizer": copy.deepcopy(ADAMW)} if offload != "none" else {})


def validate(config: dict):
    """Parse `config["zero_optimization"]` with DeepSpeed's own pydantic model; raise if it is rejected."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig  # needs the lab extra; imported only here

    return DeepSpeedZeroConfig(**config["zero_optimization"])
