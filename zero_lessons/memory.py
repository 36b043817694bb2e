"""Exact per-GPU model-state memory for each ZeRO stage (the paper's Figure 1 accounting).

The model is `breakdown(setup, stage)`, three products, on a `Setup` checked where it was made.
The other public functions take plain numbers or text, check them once, and call it.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from . import checks, recipes, units
from .inputs import Setup
from .recipes import MIXED_ADAM, Recipe, RecipeLike
from .stages import STATES, Stage, StageLike, as_stage
from .units import Size


@dataclass(frozen=True)
class Breakdown:
    """Bytes of model state that one GPU holds, split by kind of state."""

    weights: Fraction  #: bytes of weights (whole or a shard)
    gradients: Fraction  #: bytes of gradients (whole or a shard)
    optimizer: Fraction  #: bytes of optimizer state (whole or a shard)

    @property
    def total(self) -> Fraction:
        """All model-state bytes on the GPU."""
        return self.weights + self.gradients + self.optimizer

    def in_unit(self, unit: str = "GB") -> dict[str, Fraction]:
        """The four amounts in `unit`, exactly."""
        keys = ("weights", "gradients", "optimizer", "total")
        return {key: units.in_unit(getattr(self, key), unit) for key in keys}


def ceil_div(a: int | Fraction, b: int | Fraction) -> int:
    """ceil(a / b) for exact numbers: how many pieces of size `b` cover `a` (real code's padding rule)."""
    a, b = checks.exact("a", a, digits=None), checks.exact("b", b, digits=None)
    if b <= 0:
        raise ValueError(f"b must be a number > 0, got {checks.shown(b)}")
    return int(-(-a // b))


def shard_elements(params: int, gpus: int, padded: bool = False) -> Fraction:
    """Elements of one state each rank keeps: Ψ/N, or ceil(Ψ/N) when padded as real code does."""
    params, gpus = (
        checks.whole("params", params),
        checks.gpus(gpus),
    )  # any size: a property test goes past Ψ's
    return _shard(params, gpus, checks.flag("padded", padded))


def _shard(params: int, gpus: int, padded: bool = False) -> Fraction:
    """Ψ/N, or ceil(Ψ/N) when padded, for values already checked."""
    return Fraction(ceil_div(params, gpus)) if padded else Fraction(params, gpus)


def breakdown(setup: Setup, stage: Stage, *, padded: bool = False) -> Breakdown:
    """Per-GPU model-state bytes under `stage`: partitioned states split across the setup's GPUs."""
    checks.instance("setup", setup, Setup, "an inputs.Setup")
    stage, part = as_stage(stage), _shard(setup.params, setup.gpus, padded)
    held = {
        s: (part if stage.partitions(s) else setup.params) * Fraction(setup.recipe.bytes_for(s))
        for s in STATES
    }
    return Breakdown(weights=held["weights"], gradients=held["gradients"], optimizer=held["optimizer"])


def per_stage(setup: Setup, *, padded: bool = False) -> tuple[Breakdown, ...]:
    """What one GPU holds under each stage, 0 to 3: computed once, read by the table, verdict and advice."""
    return tuple(breakdown(setup, stage, padded=padded) for stage in Stage)


def check_per_stage(held: object) -> tuple[Breakdown, ...]:
    """`held` if it is one Breakdown per stage, as `per_stage` returns; else a TypeError that names it."""
    one_each = isinstance(held, tuple) and len(held) == len(Stage)
    if not (one_each and all(isinstance(b, Breakdown) for b in held)):
        raise TypeError(f"held must be per_stage(setup), one Breakdown per stage, got {checks.kind(held)}")
    return held


def fits(held: Breakdown, gpu_memory: Fraction, extra: Fraction = 0) -> bool:
    """Whether `held` plus `extra` bytes (activations, say) fits in `gpu_memory`: the one test of fitting."""
    checks.instance("held", held, Breakdown, "a Breakdown")
    checks.instance("gpu_memory", gpu_memory, (int, Fraction), "bytes as an int or Fraction")
    checks.instance("extra", extra, (int, Fraction), "bytes as an int or Fraction")
    return held.total + extra <= gpu_memory


def lowest_fitting(held: tuple[Breakdown, ...], gpu_memory: Fraction, extra: Fraction = 0) -> Stage | None:
    """The lowest stage whose model state plus `extra` bytes fits in `gpu_memory`; None when none does.

    `held` is `per_stage(setup)`, so the table, the verdict and the advice all decide alike.
    """
    held = check_per_stage(held)
    return next((Stage(i) for i, state in enumerate(held) if fits(state, gpu_memory, extra)), None)


def saved(held: Breakdown, baseline: Breakdown) -> Fraction:
    """Share of `baseline`'s bytes that `held` saves: 1 − held/baseline (0 when the baseline is empty)."""
    checks.instance("held", held, Breakdown, "a Breakdown")
    checks.instance("baseline", baseline, Breakdown, "a Breakdown")
    return Fraction(0) if baseline.total == 0 else 1 - held.total / baseline.total


def per_gpu(
    params: int, gpus: int, stage: StageLike, recipe: RecipeLike = MIXED_ADAM, *, padded: bool = False
) -> Breakdown:
    """Per-GPU model-state bytes under `stage`, with partitioned states split across `gpus`."""
    stage, padded = as_stage(stage), checks.flag("padded", padded)
    return breakdown(Setup(params, gpus, recipe), stage, padded=padded)


def cluster_total(
    params: int, gpus: int, stage: StageLike, recipe: RecipeLike = MIXED_ADAM, *, padded: bool = False
) -> Fraction:
    """Model-state bytes summed over all `gpus`: the replication that ZeRO removes."""
    return per_gpu(params, gpus, stage, recipe, padded=padded).total * checks.gpus(gpus)


def saving(params: int, gpus: int, stage: StageLike, recipe: RecipeLike = MIXED_ADAM) -> Fraction:
    """Fraction of data parallel's per-GPU memory that `stage` saves (0 for a recipe of zero bytes)."""
    setup, stage = Setup(params, gpus, recipe), as_stage(stage)
    return saved(breakdown(setup, stage), breakdown(setup, Stage.DP))


def kept_and_split(stage: StageLike, recipe: RecipeLike = MIXED_ADAM) -> tuple[Fraction, Fraction]:
    """Bytes per parameter that `stage` keeps whole on every GPU, and bytes it splits across them."""
    return _kept_and_split(as_stage(stage), recipes.get(recipe))


def kept_and_split_bytes(setup: Setup, stage: Stage) -> tuple[Fraction, Fraction]:
    """Bytes one GPU keeps whole under `stage`, and bytes it shares out: n GPUs hold kept + split/n each."""
    checks.instance("setup", setup, Setup, "an inputs.Setup")
    kept, split = _kept_and_split(as_stage(stage), setup.recipe)
    return kept * setup.params, split * setup.params


def _kept_and_split(stage: Stage, recipe: Recipe) -> tuple[Fraction, Fraction]:
    """Bytes per parameter kept whole and split, for a checked stage and recipe."""
    kept = sum((Fraction(recipe.bytes_for(s)) for s in STATES if not stage.partitions(s)), Fraction(0))
    return kept, Fraction(recipe.total_bytes) - kept


def cost_per_param(gpus: int, stage: StageLike, recipe: RecipeLike = MIXED_ADAM) -> Fraction:
    """Bytes one GPU holds per model parameter: replicated states in full, partitioned ones over N."""
    kept, split = kept_and_split(stage, recipe)
    return kept + split / checks.gpus(gpus)


def max_params(gpus: int, gpu_memory: Size, stage: StageLike, recipe: RecipeLike = MIXED_ADAM) -> int | None:
    """Largest Ψ whose model state fits in `gpu_memory` bytes per GPU; None when the recipe costs nothing."""
    gpus, gpu_memory = checks.gpus(gpus), units.as_bytes("gpu_memory", gpu_memory)
    cost = cost_per_param(gpus, stage, recipe)
    return None if cost == 0 else int(gpu_memory // cost)


def min_gpus(params: int, gpu_memory: Size, stage: StageLike, recipe: RecipeLike = MIXED_ADAM) -> int | None:
    """Fewest GPUs at which the model state fits in `gpu_memory` bytes each; None when no count suffices."""
    params, gpu_memory = checks.params(params), units.as_bytes("gpu_memory", gpu_memory)
    kept, split = kept_and_split(stage, recipe)
    replicated, split = kept * params, split * params
    if split == 0:
        return 1 if replicated <= gpu_memory else None
    if replicated >= gpu_memory:  # the copied states alone fill the card, however many GPUs share the rest
        return None
    return max(1, ceil_div(split, gpu_memory - replicated))
