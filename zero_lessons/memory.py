"""Exact per-GPU model-state memory for each ZeRO stage (the paper's Figure 1 accounting)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from . import checks, units
from .recipes import MIXED_ADAM, STATES, Recipe, get
from .stages import Stage, as_stage


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
        return {key: units.in_unit(getattr(self, key), unit) for key in ("weights", "gradients", "optimizer", "total")}


def ceil_div(a: int | Fraction, b: int | Fraction) -> int:
    """ceil(a / b) for exact numbers: how many pieces of size `b` cover `a` (real code's padding rule)."""
    a, b = checks.exact("a", a, digits=None), checks.exact("b", b, digits=None)
    if b <= 0:
        raise ValueError(f"b must be a number > 0, got {checks.shown(b)}")
    return int(-(-a // b))


def shard_elements(params: int, gpus: int, padded: bool = False) -> Fraction:
    """Elements of one state each rank keeps: Ψ/N, or ceil(Ψ/N) when padded as real code does."""
    params, gpus = checks.whole("params", params), checks.gpus(gpus)  # any size: a property test goes past Ψ's
    return Fraction(ceil_div(params, gpus)) if padded else Fraction(params, gpus)


def per_gpu(params: int, gpus: int, stage: Stage | int | str, recipe: Recipe | str = MIXED_ADAM,
            *, padded: bool = False) -> Breakdown:
    """Per-GPU model-state bytes under `stage`, with partitioned states split across `gpus`."""
    params, gpus, stage, recipe = checks.params(params), checks.gpus(gpus), as_stage(stage), get(recipe)
    shard = shard_elements(params, gpus, checks.flag("padded", padded))
    held = {s: (shard if stage.partitions(s) else params) * Fraction(recipe.bytes_for(s)) for s in STATES}
    return Breakdown(weights=held["weights"], gradients=held["gradients"], optimizer=held["optimizer"])


def cluster_total(params: int, gpus: int, stage: Stage | int | str, recipe: Recipe | str = MIXED_ADAM,
                  *, padded: bool = False) -> Fraction:
    """Model-state bytes summed over all `gpus`: the replication that ZeRO removes."""
    return per_gpu(params, gpus, stage, recipe, padded=padded).total * checks.gpus(gpus)


def saving(params: int, gpus: int, stage: Stage | int | str, recipe: Recipe | str = MIXED_ADAM) -> Fraction:
    """Fraction of data parallel's per-GPU memory that `stage` saves (0 for a recipe of zero bytes)."""
    baseline = per_gpu(params, gpus, Stage.DP, recipe).total
    if baseline == 0:
        return Fraction(0)
    return 1 - per_gpu(params, gpus, stage, recipe).total / baseline


def kept_and_split(stage: Stage | int | str, recipe: Recipe | str = MIXED_ADAM) -> tuple[Fraction, Fraction]:
    """Bytes per parameter that `stage` keeps whole on every GPU, and bytes it splits across them."""
    stage, recipe = as_stage(stage), get(recipe)
    kept = sum((Fraction(recipe.bytes_for(s)) for s in STATES if not stage.partitions(s)), Fraction(0))
    return kept, Fraction(recipe.total_bytes) - kept


def cost_per_param(gpus: int, stage: Stage | int | str, recipe: Recipe | str = MIXED_ADAM) -> Fraction:
    """Bytes one GPU holds per model parameter: replicated states in full, partitioned ones over N."""
    kept, split = kept_and_split(stage, recipe)
    return kept + split / checks.gpus(gpus)


def max_params(memory, gpus: int, stage: Stage | int | str, recipe: Recipe | str = MIXED_ADAM) -> int | None:
    """Largest Ψ whose model state fits in `memory` bytes per GPU; None when the recipe costs nothing."""
    budget = units.as_bytes("memory", memory)
    cost = cost_per_param(gpus, stage, recipe)
    return None if cost == 0 else int(budget // cost)


def min_gpus(params: int, memory, stage: Stage | int | str, recipe: Recipe | str = MIXED_ADAM) -> int | None:
    """Fewest GPUs at which the model state fits in `memory` bytes each; None when no count suffices."""
    params, budget = checks.params(params), units.as_bytes("memory", memory)
    kept, split = kept_and_split(stage, recipe)
    replicated, split = kept * params, split * params
    if split == 0:
        return 1 if replicated <= budget else None
    if replicated >= budget:  # the copied states alone fill the card, however many GPUs share the rest
        return None
    return max(1, ceil_div(split, budget - replicated))
