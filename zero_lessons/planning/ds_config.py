"""DeepSpeed configuration for a chosen stage and offload, and a check against DeepSpeed's own schema."""

from __future__ import annotations

from .. import checks
from ..stages import StageLike
from .offload import rule


def zero_config(
    stage: StageLike, offload: str = "none", *, micro_batch: int = 1, nvme_path: str | None = None
) -> dict:
    """A DeepSpeed config dict with `zero_optimization` for `stage`, bf16, and the requested offload."""
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
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "zero_optimization": zero,
    }


def validate(config: dict):
    """Parse `config["zero_optimization"]` with DeepSpeed's own pydantic model; raise if it is rejected."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig  # needs the lab extra; imported only here

    return DeepSpeedZeroConfig(**config["zero_optimization"])
