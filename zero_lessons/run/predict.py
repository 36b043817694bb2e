"""What the training script's ranks should hold, by field: the lab's DeepSpeed rules applied to the script's
model, plus the buffers DeepSpeed adds when it offloads the optimizer. No torch.

The lab's counter (`lab.rank_deepspeed.held`) files each tensor by the name DeepSpeed gives it. Offload
brings tensors the lab's own runs never have, and the counter files them under "other":

- stage 2 (`stage_1_and_2.py`): the fp32 gradients of the rank's slice (4 B each), a bf16 copy of the
  slice (2 B each), two bf16 staging buffers as large as the largest parameter, and one fp64 norm per
  parameter touching the slice; the bf16 gradients themselves are released (0 bytes);
- stage 3 (`stage3.py`): one fp64 norm per parameter and an fp32 global norm beside the bool flag.

DeepSpeed's CPU Adam, which takes offloaded steps, keeps its step count as a Python int: no tensor.
"""

from __future__ import annotations

from itertools import accumulate

from .. import checks
from ..lab import predict_deepspeed
from ..lab.model import LabModel
from ..lab.modes import Mode
from ..lab.results import Held
from ..stages import Stage

#: The script's layer widths, stated here without torch so the prediction counts the same model. The
#: 512 x 512 weight is over DeepSpeed's stage-3 persistence threshold (100,000 elements), so stage 3
#: splits it across ranks; the smaller tensors stay whole on every rank.
WIDTHS = (32, 512, 512, 8)
#: The script's model, as the lab's predictions count it (Ψ = 283,656 parameters in 6 tensors).
MODEL = LabModel(widths=WIDTHS)
FP32, FP64, BF16 = 4, 8, 2  #: bytes per element


def zero_section(config: dict) -> dict:
    """The config's "zero_optimization" object (stage 0 when it has none)."""
    return config.get("zero_optimization", {})


def stage_of(config: dict) -> int:
    """The config's ZeRO stage."""
    return zero_section(config).get("stage", 0)


def device(config: dict, part: str) -> str:
    """Where a config sends `part` ("offload_optimizer" or "offload_param"): "none", "cpu" or "nvme"."""
    return zero_section(config).get(part, {}).get("device", "none")


def unpredicted(config: dict) -> str | None:
    """Why the package has no prediction for `config`, or None when it has one."""
    optimizer, params, stage = (
        device(config, "offload_optimizer"),
        device(config, "offload_param"),
        stage_of(config),
    )
    if not config.get("bf16", {}).get("enabled", False):
        return "the predictions count bf16 runs (2 + 2 + 12 bytes per parameter); this config is not bf16"
    if "nvme" in (optimizer, params):
        return "NVMe offload was never measured here (it needs DeepSpeed's async-I/O extension)"
    if optimizer != "none" and stage < 2:
        return f"optimizer offload was measured at stages 2 and 3, not at stage {stage}"
    if params != "none" and optimizer == "none":
        return "parameter offload was measured together with optimizer offload only"
    return None


def touching(sizes: list[int], gpus: int, rank: int) -> int:
    """How many parameters overlap `rank`'s slice of the stage 1/2 flat buffer."""
    part = predict_deepspeed.slice_len(sum(sizes), gpus)
    low, high = rank * part, (rank + 1) * part
    ends = list(accumulate(sizes))
    return sum(1 for end, n in zip(ends, sizes, strict=True) if end - n < high and end > low)


def offloaded(held: Held, stage: int, gpus: int, rank: int, model: LabModel = MODEL) -> Held:
    """`held` (the same config without offload) as the counter finds it with the optimizer offloaded."""
    sizes = model.sizes
    if stage == 3:
        return Held(held.weights, held.gradients, held.optimizer, 0, FP32 + 1 + FP64 * len(sizes))
    part = predict_deepspeed.slice_len(model.param_count, gpus)
    staging = 2 * BF16 * max(sizes)  # one buffer on the host side, one on the accelerator side
    other = FP32 + (FP32 + BF16) * part + staging + FP64 * touching(sizes, gpus, rank)
    return Held(held.weights, 0, held.optimizer, 0, other)


def expected(config: dict, gpus: int, rank: int, model: LabModel = MODEL) -> Held:
    """Bytes one rank of the script holds after the last backward pass, by field, under `config`."""
    why = unpredicted(config)
    if why:
        raise ValueError(f"no prediction: {why}")
    stage = Stage(stage_of(config))
    zero = {k: v for k, v in zero_section(config).items() if k in predict_deepspeed.DEFAULTS}
    held = predict_deepspeed.held(Mode("script", "the training script", stage, zero=zero), gpus, rank, model)
    if device(config, "offload_optimizer") == "none":
        return held
    return offloaded(held, int(stage), gpus, rank, model)


def check(name: str, config: dict) -> None:
    """Refuse a config the script cannot train: it needs a zero_optimization object with a stage of 0 to 3."""
    zero = config.get("zero_optimization")
    if not isinstance(zero, dict):
        got = "none" if zero is None else checks.kind(zero)
        raise ValueError(f"--ds-config: {name} must have a zero_optimization object, got {got}")
    stage = zero.get("stage", 0)
    if type(stage) is not int or not 0 <= stage <= 3:
        raise ValueError(
            f"--ds-config: {name}: zero_optimization.stage must be 0, 1, 2 or 3, got {checks.shown(stage)}"
        )
