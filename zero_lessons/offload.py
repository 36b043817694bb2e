"""CPU and NVMe offload as a first model: capacity gained on the GPU, bytes paid on the PCIe link.

Assumptions, stated once:
- Optimizer offload (ZeRO-Offload) moves each GPU's optimizer shard to host memory, and the
  CPU runs the optimizer step. Every step, the GPU sends its gradient shard down and receives
  its updated weight shard back.
- Parameter offload (ZeRO-Infinity, stage 3 only) also keeps the weight shard off the GPU, so
  it crosses the link again in the forward and in the backward pass.
- Only model state is counted; pinned buffers and activations are left out.
"""

from __future__ import annotations

from fractions import Fraction

from . import checks, units
from .memory import Breakdown, per_gpu, shard_elements
from .recipes import MIXED_ADAM, Recipe, get
from .stages import Stage, as_stage

#: Fastest compute rate `compute_time` accepts: a zettaflop per second (one GPU today does about 10**15).
MAX_FLOPS = 10**21
#: Most tokens in one step that `compute_time` accepts.
MAX_TOKENS = 10**15


def offloaded(params: int, gpus: int, stage: Stage | int | str, recipe: Recipe | str = MIXED_ADAM,
              *, parameters: bool = False) -> tuple[Breakdown, Breakdown]:
    """Per-GPU bytes (left on the GPU, moved to CPU or NVMe) with the optimizer state offloaded."""
    stage, parameters = as_stage(stage), checks.flag("parameters", parameters)
    if stage is Stage.DP:
        raise ValueError("offload needs a partitioned optimizer: stage must be 1, 2 or 3, got 0")
    if parameters and stage is not Stage.ZERO3:
        raise ValueError(f"parameter offload needs stage 3, got {stage.label}")
    held = per_gpu(params, gpus, stage, recipe)
    weights_moved = held.weights if parameters else Fraction(0)
    on_gpu = Breakdown(held.weights - weights_moved, held.gradients, Fraction(0))
    return on_gpu, Breakdown(weights_moved, Fraction(0), held.optimizer)


def link_bytes(params: int, gpus: int, stage: Stage | int | str, recipe: Recipe | str = MIXED_ADAM,
               *, parameters: bool = False) -> Fraction:
    """Bytes one GPU moves over its host link per step: gradient shard down, weight shard up (twice more with parameter offload)."""
    offloaded(params, gpus, stage, recipe, parameters=parameters)  # validates the combination
    recipe, shard = get(recipe), shard_elements(params, gpus)
    trips = 3 if parameters else 1
    return shard * (recipe.grad_bytes + trips * recipe.weight_bytes)


def link_time(params: int, gpus: int, stage: Stage | int | str, bandwidth, recipe: Recipe | str = MIXED_ADAM,
              *, parameters: bool = False) -> Fraction:
    """Seconds per step on the host link at `bandwidth` ("25 GB/s" is read too), with no overlap."""
    rate = units.as_rate("bandwidth", bandwidth)
    return link_bytes(params, gpus, stage, recipe, parameters=parameters) / rate


def compute_time(params: int, tokens: int, flops_per_second) -> Fraction:
    """Seconds of GPU compute for one step over `tokens` tokens: about 6·Ψ FLOPs per token (forward + backward)."""
    rate = checks.amount("flops_per_second", flops_per_second, positive=True,
                         high=(MAX_FLOPS, "10**21 FLOP/s (a zettaflop per second)"))
    return Fraction(6 * checks.params(params) * checks.whole("tokens", tokens, high=MAX_TOKENS)) / rate


def capacity(params: int, gpus: int, stage: Stage | int | str, recipe: Recipe | str = MIXED_ADAM, *,
             parameters: bool = False, gpus_per_node: int = 8, target: str = "cpu") -> dict[str, Fraction]:
    """Bytes needed per GPU, and per node on the host (`target="cpu"`) or on NVMe (`target="nvme"`).

    With NVMe as the target the offloaded state lives on the drive; the host's pinned staging
    buffers are left out, as everywhere in this model.
    """
    checks.choice("target", target, ("cpu", "nvme"))
    on_gpu, off_gpu = offloaded(params, gpus, stage, recipe, parameters=parameters)
    per_node = off_gpu.total * min(checks.gpus_per_node(gpus_per_node), checks.gpus(gpus))
    return {"gpu": on_gpu.total, "cpu_per_node": per_node if target == "cpu" else Fraction(0),
            "nvme_per_node": per_node if target == "nvme" else Fraction(0)}
