"""Per-step communication volume of each stage, following the ZeRO paper's section 7 analysis.

Every collective here is counted as the elements one GPU sends in a step. The paper's
simplification counts a reduce-scatter or an all-gather of Ψ elements as Ψ per GPU; a ring
really sends Ψ(N−1)/N, which `ring=True` applies. An all-reduce is a reduce-scatter followed
by an all-gather, so it costs twice as much.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from . import checks, units
from .inputs import Setup
from .stages import Stage, StageLike, as_stage

#: Elements each GPU sends per element of the tensor, by the paper's count: an all-reduce is a
#: reduce-scatter plus an all-gather, so 2; a reduce to one rank costs that rank's share of a reduce-scatter.
MULTIPLE: dict[str, int] = {
    "all-reduce": 2,
    "reduce-scatter": 1,
    "all-gather": 1,
    "broadcast": 1,
    "reduce": 1,
}


def multiple(op: str) -> int:
    """The paper's elements sent per GPU per tensor element for `op` ("all-reduce" or "all_reduce")."""
    key = op.replace("_", "-") if isinstance(op, str) else op
    return MULTIPLE[checks.choice("collective", key, MULTIPLE)]


#: Bytes per communicated element, by dtype name.
DTYPES: dict[str, int] = {"fp16": 2, "bf16": 2, "fp32": 4, "fp8": 1}


@dataclass(frozen=True)
class Collective:
    """One collective a stage runs every step, over all Ψ elements of one state."""

    op: str  #: "all-reduce", "reduce-scatter" or "all-gather"
    state: str  #: what it moves: "gradients" or "weights"
    when: str  #: where in the step it runs
    per_micro_batch: bool = False  #: True when it repeats for every micro-batch of gradient accumulation

    @property
    def multiple(self) -> int:
        """Elements sent per GPU, in units of Ψ (before the ring factor)."""
        return multiple(self.op)


_PLANS: dict[Stage, tuple[Collective, ...]] = {
    Stage.DP: (Collective("all-reduce", "gradients", "end of backward"),),
    Stage.ZERO1: (
        Collective("reduce-scatter", "gradients", "end of backward"),
        Collective("all-gather", "weights", "after the optimizer step"),
    ),
    # A rank that keeps only a gradient shard must hand the rest on after every micro-batch.
    Stage.ZERO2: (
        Collective("reduce-scatter", "gradients", "during backward, bucket by bucket", True),
        Collective("all-gather", "weights", "after the optimizer step"),
    ),
    Stage.ZERO3: (
        Collective("all-gather", "weights", "forward, layer by layer", True),
        Collective("all-gather", "weights", "backward, layer by layer", True),
        Collective("reduce-scatter", "gradients", "backward, layer by layer", True),
    ),
}


def collectives(stage: StageLike) -> tuple[Collective, ...]:
    """The collectives `stage` runs in one training step, in order."""
    return _PLANS[as_stage(stage)]


def ring_factor(gpus: int) -> Fraction:
    """Share of a tensor each GPU sends in a ring reduce-scatter or all-gather: (N−1)/N."""
    gpus = checks.gpus(gpus)
    return Fraction(gpus - 1, gpus)


def elements_sent(setup: Setup, stage: Stage, *, ring: bool = False, micro_batches: int = 1) -> Fraction:
    """Elements one GPU sends per step: 2Ψ for stages 0-2, 3Ψ for stage 3 (times (N−1)/N if `ring`).

    With gradient accumulation over `micro_batches`, collectives that must run for every
    micro-batch repeat, while data parallelism and stage 1 still communicate once per step.
    """
    checks.instance("setup", setup, Setup, "an inputs.Setup")
    factor = Fraction(setup.gpus - 1, setup.gpus) if ring else Fraction(1)
    multiple = sum(c.multiple * (micro_batches if c.per_micro_batch else 1) for c in collectives(stage))
    return multiple * setup.params * factor


def volume_elements(
    params: int, gpus: int, stage: StageLike, *, ring: bool = False, micro_batches: int = 1
) -> Fraction:
    """Elements one GPU sends per step, by the paper's count (see `elements_sent`), from plain numbers."""
    setup, stage, ring = Setup(params, gpus), as_stage(stage), checks.flag("ring", ring)
    repeats = checks.whole("micro_batches", micro_batches, high=10**6)
    return elements_sent(setup, stage, ring=ring, micro_batches=repeats)


def dtype_bytes(dtype: str | int) -> int:
    """Bytes per communicated element for a dtype name such as "bf16", or a byte count."""
    if isinstance(dtype, str):
        if dtype.lower() not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {checks.shown(dtype)}")
        return DTYPES[dtype.lower()]
    return checks.whole("dtype bytes", dtype, low=1, high=8)


def volume_bytes(
    params: int, gpus: int, stage: StageLike, dtype: str | int = "fp16", *, ring: bool = False
) -> Fraction:
    """Bytes one GPU sends per step when each element travels as `dtype`."""
    return volume_elements(params, gpus, stage, ring=ring) * dtype_bytes(dtype)


def step_time(
    params: int, gpus: int, stage: StageLike, bandwidth, dtype: str | int = "fp16", *, ring: bool = False
) -> Fraction:
    """Seconds per step spent sending at `bandwidth` bytes/s per GPU ("100 Gb/s" too), with no overlap."""
    rate = units.as_rate("bandwidth", bandwidth)
    return volume_bytes(params, gpus, stage, dtype, ring=ring) / rate


@dataclass(frozen=True)
class StepTraffic:
    """One stage's traffic per GPU and step, and the time it takes at one bandwidth with no overlap."""

    stage: Stage  #: which stage
    elements: Fraction  #: elements sent
    nbytes: Fraction  #: bytes sent, in the chosen dtype
    seconds: Fraction  #: time at the chosen bandwidth


def traffic(setup: Setup, stage: Stage, dtype: str, bandwidth: Fraction, *, ring: bool = True) -> StepTraffic:
    """Elements, bytes and seconds one GPU spends sending in a step, for a checked setup and bandwidth."""
    checks.instance("bandwidth", bandwidth, (int, Fraction), "bytes per second as an int or Fraction")
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be a number > 0, got {checks.shown(bandwidth)}")
    elements = elements_sent(setup, stage, ring=ring)
    nbytes = elements * dtype_bytes(dtype)
    return StepTraffic(stage, elements, nbytes, nbytes / bandwidth)


def relative_to_dp(stage: StageLike) -> Fraction:
    """Volume of `stage` over plain data parallel's: 1 for stages 1-2, 3/2 for stage 3."""
    return Fraction(
        sum(c.multiple for c in collectives(stage)), sum(c.multiple for c in collectives(Stage.DP))
    )
