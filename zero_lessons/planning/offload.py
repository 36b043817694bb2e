"""CPU and NVMe offload as a first model: capacity gained on the GPU, bytes paid on the links.

Assumptions, stated once (the package's count, which is the ZeRO-Offload paper's split):
- Optimizer offload (ZeRO-Offload) moves each GPU's optimizer shard and its 16-bit gradient shard to
  host memory, and the CPU runs the optimizer step: only the 16-bit weights (whole at stages 1-2, a
  shard at stage 3) stay on the GPU. Every step, the GPU sends its gradient shard down and receives
  its updated weight shard back. Gradients exist on the GPU only while the backward pass makes and
  reduces them, a transient like the activations, which this count leaves out.
- Parameter offload (ZeRO-Infinity, stage 3 only) keeps the weight shard on the host: the CPU's
  step updates it there, and it crosses to the GPU for the forward and for the backward pass.
- NVMe (stage 3 only in DeepSpeed) puts the offloaded state, and the fp32 gradient shard DeepSpeed writes
  for the step, on a drive behind host memory, so every step also reads them from the drive and writes
  them back (`link_bytes(..., link="nvme")`, `capacity(..., target="nvme")`).
- Only model state is counted; pinned buffers and activations are left out. DeepSpeed's own
  estimator counts more on the host (`deepspeed_host`), and a plan should fit both counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks, memory, recipes, units
from ..inputs import Setup
from ..memory import Breakdown
from ..recipes import MIXED_ADAM, RecipeLike
from ..stages import Stage, StageLike, as_stage
from . import ds_estimator

#: Fastest compute rate `compute_time` accepts: a zettaflop per second (one GPU today does about 10**15).
MAX_FLOPS = 10**21
#: Most tokens in one step that `compute_time` accepts.
MAX_TOKENS = 10**15
#: What can be offloaded, from least to most.
OFFLOADS = ("none", "optimizer", "optimizer+parameters")
#: The links offload traffic crosses: each GPU's PCIe link to host memory, and host memory's link to NVMe.
LINKS = ("pcie", "nvme")
#: Bytes per element of the gradient DeepSpeed's optimizer swapper writes to NVMe and reads back: fp32.
NVME_GRAD_BYTES = 4
#: DeepSpeed's default `offload_param.max_in_cpu`: fp16 weight elements per process it keeps in host
#: memory even when the parameters are offloaded to NVMe; only the rest goes to the drive.
MAX_IN_CPU = 10**9
#: Offload choices in the order a planner tries them, least first: (stage, what is offloaded).
ORDER = ((Stage.ZERO2, "optimizer"), (Stage.ZERO3, "optimizer"), (Stage.ZERO3, "optimizer+parameters"))

#: Why DeepSpeed's host estimate exceeds the package's count, by the stage of the offload.
DEEPSPEED_HOST = {
    Stage.ZERO2: "grows with the cluster: max(4 × GPUs, 16) bytes per parameter on every node (an fp32 copy "
    "of the model for each of the job's processes), times a margin of 1.5",
    Stage.ZERO3: "counts the gradients on the host in fp32 (4 bytes per parameter, where the package "
    "counts 2) and multiplies by a margin of 1.5",
}


def rule(stage: StageLike, offload: str) -> tuple[Stage, str]:
    """`stage` and `offload`, if DeepSpeed can combine them: offload needs a partitioned optimizer,
    and parameter offload needs stage 3."""
    stage, offload = as_stage(stage), checks.choice("offload", offload, OFFLOADS)
    if offload != "none" and stage is Stage.DP:
        raise ValueError("offload needs a partitioned optimizer: stage must be 1, 2 or 3, got 0")
    if offload == "optimizer+parameters" and stage is not Stage.ZERO3:
        raise ValueError(f"parameter offload needs stage 3, got {stage.label}")
    return stage, offload


def _split(setup: Setup, stage: Stage, offload: str) -> tuple[Breakdown, Breakdown]:
    """Per-GPU bytes (left on the GPU, moved to the host) for a checked setup and an allowed combination."""
    held = memory.breakdown(setup, stage)
    weights_moved = held.weights if offload == "optimizer+parameters" else Fraction(0)
    # the reduced gradient shard goes down for the CPU's step; ZeRO-1 still holds whole gradients on the GPU
    shard = memory.breakdown(setup, Stage.ZERO2).gradients
    kept = held.gradients if stage is Stage.ZERO1 else Fraction(0)
    return (
        Breakdown(held.weights - weights_moved, kept, Fraction(0)),
        Breakdown(weights_moved, shard, held.optimizer),
    )


def offloaded(
    params: int, gpus: int, stage: StageLike, recipe: RecipeLike = MIXED_ADAM, *, parameters: bool = False
) -> tuple[Breakdown, Breakdown]:
    """Per-GPU bytes (left on the GPU, moved to CPU or NVMe) with the optimizer state offloaded."""
    what = "optimizer+parameters" if checks.flag("parameters", parameters) else "optimizer"
    stage, what = rule(stage, what)
    return _split(Setup(params, gpus, recipe), stage, what)


def link_bytes(
    params: int,
    gpus: int,
    stage: StageLike,
    recipe: RecipeLike = MIXED_ADAM,
    *,
    parameters: bool = False,
    link: str = "pcie",
) -> Fraction:
    """Bytes one GPU's share moves per step over `link`: "pcie" (GPU and host) or "nvme" (host and drive).

    PCIe, by the papers' design: the gradient shard goes down once. The weight shard comes up once after
    the CPU's step; with parameter offload the step updates it on the host, and it comes up twice instead,
    for the forward and for the backward pass.
    NVMe (stage 3), as DeepSpeed's swappers move it: the optimizer shard is read before the step and written
    back; the gradient shard is written as fp32 in the backward pass and read back for the step; with
    `parameters` (on NVMe too) the weights past MAX_IN_CPU are read twice and written once. A recipe whose
    optimizer state already counts an fp32 gradient copy (infinity-20) has that copy counted twice here.
    """
    offloaded(params, gpus, stage, recipe, parameters=parameters)  # validates the combination
    link, stage = checks.choice("link", link, LINKS), as_stage(stage)
    recipe, shard = recipes.get(recipe), memory.shard_elements(params, gpus)
    if link == "pcie":
        return shard * (recipe.grad_bytes + (2 if parameters else 1) * recipe.weight_bytes)
    _nvme_needs_stage_3("link", stage)
    # DeepSpeed keeps the first MAX_IN_CPU weight elements in host memory; only the rest live on the drive
    on_drive = max(shard - MAX_IN_CPU, 0) if parameters else 0
    return shard * 2 * (recipe.optimizer_bytes + NVME_GRAD_BYTES) + on_drive * 3 * recipe.weight_bytes


#: Bytes per shard element DeepSpeed's code (0.19.8) sends over one GPU's PCIe link per step with only the
#: optimizer offloaded, in 16-bit training: the gradient shard goes down cast to fp32 (DOWN, 4; its
#: stage_1_and_2.py casts before it copies) and the updated 16-bit weight shard comes back (BACK, 2).
#: Stage 3 first sends the 16-bit gradient shard to a host buffer and straight back (2 + 2, stage3.py).
DEEPSPEED_DOWN, DEEPSPEED_BACK = 4, 2
DEEPSPEED_PCIE = {
    Stage.ZERO1: DEEPSPEED_DOWN + DEEPSPEED_BACK,
    Stage.ZERO2: DEEPSPEED_DOWN + DEEPSPEED_BACK,
    Stage.ZERO3: 2 + 2 + DEEPSPEED_DOWN + DEEPSPEED_BACK,
}
#: Of those, what crosses during the backward pass: all but the weights' trip back after the step.
DEEPSPEED_BACKWARD = {stage: sent - DEEPSPEED_BACK for stage, sent in DEEPSPEED_PCIE.items()}


def deepspeed_pcie_bytes(params: int, gpus: int, stage: StageLike) -> Fraction:
    """Bytes one GPU's share sends over PCIe per step with the optimizer offloaded, by DeepSpeed's code."""
    stage, _ = rule(stage, "optimizer")
    return DEEPSPEED_PCIE[stage] * memory.shard_elements(params, gpus)


#: Host bytes per shard element that DeepSpeed's stage 1 and 2 code (stage_1_and_2.py) keeps once the
#: optimizer is offloaded to the CPU, by our reading: the fp32 master partition and its fp32 gradient, Adam's
#: two moments, and a 16-bit buffer of the weight partition (`param_buffer_of_bit16_for_cpu_offload_groups`).
#: Small staging buffers (one largest parameter's gradient) and the fp32 model built before partitioning are
#: not in it.
DEEPSPEED_ZERO2_HOST = {"fp32 master weights": 4, "fp32 gradients": 4, "Adam moments": 8, "16-bit weights": 2}


def deepspeed_zero2_host(params: int, gpus: int) -> Fraction:
    """Host bytes one GPU's share keeps at ZeRO-1 or 2 with the optimizer offloaded, by DeepSpeed's code."""
    return sum(DEEPSPEED_ZERO2_HOST.values()) * memory.shard_elements(params, gpus)


#: Host bytes per shard element at stage 3, optimizer offloaded, by our reading of stage3.py: stage 2's fp32
#: state (`fp32_partitioned_groups_flat`), and the 16-bit gradient buffer (`grad_partitions_flat_buffer`)
#: where stage 2 keeps a 16-bit weight buffer.
DEEPSPEED_ZERO3_HOST = {
    **{kind: size for kind, size in DEEPSPEED_ZERO2_HOST.items() if kind != "16-bit weights"},
    "16-bit gradients": 2,
}


def deepspeed_zero3_host(params: int, gpus: int, parameters: bool = False) -> Fraction:
    """Host bytes one GPU's share keeps at ZeRO-3, optimizer (and with `parameters`, parameters) offloaded."""
    weights = 2 if checks.flag("parameters", parameters) else 0  # the 16-bit weight shard
    return (sum(DEEPSPEED_ZERO3_HOST.values()) + weights) * memory.shard_elements(params, gpus)


def _nvme_needs_stage_3(field: str, stage: Stage) -> None:
    """Refuse NVMe below stage 3: DeepSpeed offers NVMe offload only with ZeRO-3."""
    if stage is not Stage.ZERO3:
        raise ValueError(
            f"{field} 'nvme' needs stage 3 (DeepSpeed offers NVMe offload only there), got {stage.label}"
        )


def link_time(
    params: int,
    gpus: int,
    stage: StageLike,
    bandwidth,
    recipe: RecipeLike = MIXED_ADAM,
    *,
    parameters: bool = False,
    link: str = "pcie",
) -> Fraction:
    """Seconds per step on `link` at `bandwidth` ("25 GB/s" is read too), with no overlap."""
    rate = units.as_rate("bandwidth", bandwidth)
    return link_bytes(params, gpus, stage, recipe, parameters=parameters, link=link) / rate


def compute_time(params: int, tokens: int, flops_per_second, *, recompute: bool = False) -> Fraction:
    """Seconds of GPU compute for one step over `tokens` tokens: about 6·Ψ FLOPs per token (forward and
    backward), 8·Ψ with full recomputation (the forward pass runs again in the backward pass)."""
    high = (MAX_FLOPS, "10**21 FLOP/s (a zettaflop per second)")
    rate = checks.amount("flops_per_second", flops_per_second, positive=True, high=high)
    per_token = (8 if checks.flag("recompute", recompute) else 6) * checks.params(params)
    return Fraction(per_token * checks.whole("tokens", tokens, high=MAX_TOKENS)) / rate


def capacity(
    params: int,
    gpus: int,
    stage: StageLike,
    recipe: RecipeLike = MIXED_ADAM,
    *,
    parameters: bool = False,
    gpus_per_node: int = 8,
    target: str = "cpu",
) -> dict[str, Fraction]:
    """Bytes needed per GPU, and per node on the host (`target="cpu"`) or on NVMe (`target="nvme"`), by the
    package's count (the ZeRO paper's bytes per state, placed as the ZeRO-Offload paper places them).

    NVMe needs stage 3, and there the count follows DeepSpeed's code, as `link_bytes(..., link="nvme")`
    does: the drive also holds the fp32 gradient shard DeepSpeed writes for the step (NVME_GRAD_BYTES per
    element), and DeepSpeed keeps up to MAX_IN_CPU offloaded weights per GPU in host memory, so those count
    on the host, with the 16-bit gradient shard (DeepSpeed's host gradient buffer). Left out: pinned
    staging buffers in host memory.
    """
    checks.choice("target", target, ("cpu", "nvme"))
    on_gpu, off_gpu = offloaded(params, gpus, stage, recipe, parameters=parameters)
    sharing = min(checks.gpus_per_node(gpus_per_node), checks.gpus(gpus))
    if target == "cpu":
        return {"gpu": on_gpu.total, "cpu_per_node": off_gpu.total * sharing, "nvme_per_node": Fraction(0)}
    _nvme_needs_stage_3("target", as_stage(stage))
    kept = min(off_gpu.weights, MAX_IN_CPU * recipes.get(recipe).weight_bytes)
    fp32_gradients = NVME_GRAD_BYTES * memory.shard_elements(params, gpus)
    return {
        "gpu": on_gpu.total,
        "cpu_per_node": (kept + off_gpu.gradients) * sharing,
        "nvme_per_node": (off_gpu.optimizer + off_gpu.weights - kept + fp32_gradients) * sharing,
    }


@dataclass(frozen=True)
class Plan:
    """An offload choice and what it costs, by the package's count."""

    stage: Stage  #: the stage it runs under
    offload: str  #: "optimizer" or "optimizer+parameters"
    gpu: Fraction  #: bytes per GPU: what stays on the GPU, plus the activations
    host: Fraction  #: bytes of host memory per node: the offloaded shards of the GPUs that share it


def plans(setup: Setup, activations: Fraction, gpus_per_node: int) -> tuple[Plan, ...]:
    """Every choice in ORDER, least first, with its GPU and host bytes (the package's count)."""
    checks.instance("setup", setup, Setup, "an inputs.Setup")
    checks.instance("activations", activations, (int, Fraction), "bytes as an int or Fraction")
    sharing = min(checks.gpus_per_node(gpus_per_node), setup.gpus)
    out = []
    for stage, what in ORDER:
        on_gpu, off_gpu = _split(setup, stage, what)
        out.append(Plan(stage, what, on_gpu.total + activations, off_gpu.total * sharing))
    return tuple(out)


def least(setup: Setup, activations: Fraction, host: Fraction, gpus_per_node: int) -> Plan | None:
    """The first plan in ORDER whose GPU part fits `setup.gpu_memory` and whose host part fits `host`."""
    checks.instance("host", host, (int, Fraction), "bytes as an int or Fraction")
    checks.instance("setup.gpu_memory", getattr(setup, "gpu_memory", None), (int, Fraction), "bytes per GPU")
    return next(
        (p for p in plans(setup, activations, gpus_per_node) if p.gpu <= setup.gpu_memory and p.host <= host),
        None,
    )


def deepspeed_host(
    setup: Setup, stage: Stage, offload: str, gpus_per_node: int, *, zero_init: bool = True
) -> int:
    """Host bytes per node DeepSpeed's own estimator gives for an offload (with its margin of 1.5).

    At stage 3 it depends on `zero_init`: whether the training script builds the model inside
    `deepspeed.zero.Init` (code, not a config key). Stages 1 and 2 have one figure either way. Under
    offload the host figure does not depend on the largest layer, so none is needed.
    """
    checks.instance("setup", setup, Setup, "an inputs.Setup")
    zero_init = checks.flag("zero_init", zero_init)
    stage, offload = rule(stage, offload)
    if offload == "none":
        raise ValueError("offload must be optimizer or optimizer+parameters for a host estimate, got 'none'")
    per_node = min(checks.gpus_per_node(gpus_per_node), setup.gpus)
    nodes = node_count(setup.gpus, per_node)
    if stage is not Stage.ZERO3:  # DeepSpeed's stage 1 and 2 share one estimator
        return ds_estimator.zero2(setup.params, per_node, nodes, cpu_offload=True).cpu_bytes
    return ds_estimator.zero3(
        setup.params,
        0,
        per_node,
        nodes,
        cpu_offload=True,
        zero_init=zero_init,
        cpu_offload_params=offload == "optimizer+parameters",
    ).cpu_bytes


def node_count(gpus: int, gpus_per_node: int) -> int:
    """Nodes that `gpus` GPUs fill, a part-filled last one included (within the estimators' million GPUs)."""
    gpus, per_node = checks.gpus(gpus), checks.gpus_per_node(gpus_per_node)
    per_node = min(per_node, gpus)
    return min(memory.ceil_div(gpus, per_node), checks.MAX_GPUS // per_node)
