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


#: The three parts of a training step, in order.
PHASES = ("forward", "backward", "step")


@dataclass(frozen=True)
class Collective:
    """One collective a stage runs every step, over all Ψ elements of one state."""

    op: str  #: "all-reduce", "reduce-scatter" or "all-gather"
    state: str  #: what it moves: "gradients" or "weights"
    when: str  #: where in the step it runs
    phase: str  #: the part of the step it belongs to: one of PHASES
    per_micro_batch: bool = False  #: True when it repeats for every micro-batch of gradient accumulation

    def __post_init__(self):
        checks.choice("collective", self.op, MULTIPLE)
        checks.choice("phase", self.phase, PHASES)

    @property
    def multiple(self) -> int:
        """Elements sent per GPU, in units of Ψ (before the ring factor)."""
        return multiple(self.op)


_PLANS: dict[Stage, tuple[Collective, ...]] = {
    Stage.DP: (Collective("all-reduce", "gradients", "end of backward", "backward"),),
    Stage.ZERO1: (
        Collective("reduce-scatter", "gradients", "end of backward", "backward"),
        Collective("all-gather", "weights", "after the optimizer step", "step"),
    ),
    # A rank that keeps only a gradient shard must hand the rest on after every micro-batch.
    Stage.ZERO2: (
        Collective("reduce-scatter", "gradients", "during backward, bucket by bucket", "backward", True),
        Collective("all-gather", "weights", "after the optimizer step", "step"),
    ),
    Stage.ZERO3: (
        Collective("all-gather", "weights", "forward, layer by layer", "forward", True),
        Collective("all-gather", "weights", "backward, layer by layer", "backward", True),
        Collective("reduce-scatter", "gradients", "backward, layer by layer", "backward", True),
    ),
}
# DeepSpeed 0.19.8's defaults in a steady-state step, by the rules lab/predict_deepspeed.py states and the
# DeepSpeed lab measures. Stages 1 and 2 all-reduce the gradient buckets (use_multi_rank_bucket_allreduce);
# stage 3 gathers each weight once when its prefetch and reuse keep it from forward to backward, as they do
# for the lab's small model. Under gradient accumulation stage 2 reduces every micro-batch, stage 1 only at
# the step's last (stage_1_and_2.py, reduce_ready_partitions_and_remove_grads).
_BUCKETS = "during backward, bucket by bucket"
_DEEPSPEED: dict[Stage, tuple[Collective, ...]] = {
    Stage.DP: (Collective("all-reduce", "gradients", _BUCKETS, "backward"),),
    Stage.ZERO1: (
        Collective("all-reduce", "gradients", _BUCKETS, "backward"),
        Collective("all-gather", "weights", "after the optimizer step", "step"),
    ),
    Stage.ZERO2: (
        Collective("all-reduce", "gradients", _BUCKETS, "backward", True),
        Collective("all-gather", "weights", "after the optimizer step", "step"),
    ),
    Stage.ZERO3: (
        Collective("all-gather", "weights", "forward, prefetched, kept for backward", "forward", True),
        Collective("reduce-scatter", "gradients", "backward, layer by layer", "backward", True),
    ),
}


def collectives(stage: StageLike) -> tuple[Collective, ...]:
    """The collectives `stage` runs in one training step, in order, by the ZeRO paper's accounting."""
    return _PLANS[as_stage(stage)]


def deepspeed_collectives(stage: StageLike) -> tuple[Collective, ...]:
    """The collectives DeepSpeed runs by default in a steady-state step of `stage`, as its lab measures them.

    Stages 1-2 send 3Ψ (an all-reduce, not the paper's reduce-scatter); stage 3 sends 2Ψ when each
    weight is gathered once per step, which prefetch and reuse give the lab's small model.
    """
    return _DEEPSPEED[as_stage(stage)]


def multiple_of_psi(plan: tuple[Collective, ...]) -> int:
    """Elements one GPU sends per step in units of Ψ, for a plan (paper's count, one micro-batch)."""
    checks.instance("plan", plan, tuple, "a tuple of Collective, such as collectives(2)")
    for c in plan:
        checks.instance("plan", c, Collective, "a tuple of Collective, such as collectives(2)")
    return sum(c.multiple for c in plan)


#: Most ranks `ring_steps` lays out (a figure shows a few; the schedule is N × N chunks per step).
MAX_RING_RANKS = 64


@dataclass(frozen=True)
class RingStep:
    """One step of a ring all-reduce: every rank passes one chunk of Ψ/N elements to its right neighbour."""

    phase: str  #: "reduce-scatter" (the receiver adds the chunk in) or "all-gather" (it copies the chunk)
    sends: tuple[int, ...]  #: sends[r]: the chunk rank r passes to rank (r + 1) % N


def ring_steps(gpus: int) -> tuple[RingStep, ...]:
    """The 2(N−1) steps of a ring all-reduce of N chunks over N ranks: N−1 reduce-scatter, N−1 all-gather.

    In reduce-scatter step s, rank r sends chunk (r − s) mod N; after N−1 steps it owns the full sum of
    chunk (r + 1) mod N, and the all-gather passes those finished chunks on round the ring.
    """
    n = checks.whole("gpus", gpus, high=MAX_RING_RANKS)
    scatter = [RingStep("reduce-scatter", tuple((r - s) % n for r in range(n))) for s in range(n - 1)]
    gather = [RingStep("all-gather", tuple((r + 1 - s) % n for r in range(n))) for s in range(n - 1)]
    return (*scatter, *gather)


def ring_holdings(gpus: int) -> tuple[tuple[tuple[frozenset[int], ...], ...], ...]:
    """At the start and after each ring step: per rank, per chunk, the ranks whose gradients it has summed."""
    n, steps = checks.whole("gpus", gpus, high=MAX_RING_RANKS), ring_steps(gpus)
    held = tuple(tuple(frozenset({r}) for _ in range(n)) for r in range(n))
    out = [held]
    for step in steps:
        rows = [list(row) for row in held]
        for r, chunk in enumerate(step.sends):
            mine = held[(r + 1) % n][chunk]
            rows[(r + 1) % n][chunk] = (
                held[r][chunk] | mine if step.phase == "reduce-scatter" else held[r][chunk]
            )
        held = tuple(tuple(row) for row in rows)
        out.append(held)
    return tuple(out)


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
