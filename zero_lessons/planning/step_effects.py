"""Which knobs move a step's peak and which only move its traffic: each knob changed once, the peak computed.

The peak before and after comes from `step.timeline`. The traffic column says what the change does
to the collectives, as each framework's code does it (see `step_knobs` for the sources); where the
lab measures it (lesson 11, tests/test_lab.py) the words say so. The traffic is not modelled here:
the step's timeline counts bytes held, not bytes sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks, tables, units
from .step import timeline
from .step_knobs import DDP, FSDP2, DeepSpeed, Framework
from .step_model import Model


@dataclass(frozen=True)
class Change:
    """One knob turned from one value to another, under one framework, and what that does to traffic."""

    knob: str  #: the knob's name, as the framework spells it
    before: Framework  #: the knobs before
    after: Framework  #: the same knobs with this one turned
    shown: str  #: the change in words, e.g. "5e8 → 1e8 elements"
    traffic: str  #: what it does to the collectives, in one line
    checkpointing: tuple[bool, bool] = (False, False)  #: checkpointing before and after


#: The knobs the lesson turns: DeepSpeed's defaults (config.py) and PyTorch's, each changed once.
CHANGES = (
    Change(
        "reduce_bucket_size",
        DeepSpeed(stage=2),
        DeepSpeed(stage=2, reduce_bucket_size=100_000_000),
        "5e8 → 1e8 elements",
        "same gradient elements, in 5× as many reductions",
    ),
    Change(
        "allgather_bucket_size",
        DeepSpeed(stage=2),
        DeepSpeed(stage=2, allgather_bucket_size=50_000_000),
        "5e8 → 5e7 elements",
        "none with gloo or NCCL: DeepSpeed ignores it where PyTorch has all_gather_into_tensor (lesson 11)",
    ),
    Change(
        "overlap_comm",
        DeepSpeed(stage=2),
        DeepSpeed(stage=2, overlap_comm=True),
        "False → True",
        "same elements, sent while backward runs (time, not volume)",
    ),
    Change(
        "prefetch_bucket_size",
        DeepSpeed(stage=3),
        DeepSpeed(stage=3, prefetch_bucket_size=0),
        "5e7 → 0 elements",
        "no gather ahead: weights the prefetcher used to keep are gathered again in backward",
    ),
    Change(
        "max_live_parameters",
        DeepSpeed(stage=3),
        DeepSpeed(stage=3, max_live_parameters=100_000_000),
        "1e9 → 1e8 elements",
        "stops the prefetcher sooner: fewer weights ahead, more gathered at use",
    ),
    Change(
        "max_reuse_distance",
        DeepSpeed(stage=3),
        DeepSpeed(stage=3, max_reuse_distance=0),
        "1e9 → 0 elements",
        "weights are freed after use and gathered again for backward, unless the prefetcher has "
        "already walked past that use",
    ),
    Change(
        "reshard_after_forward",
        FSDP2(),
        FSDP2(reshard_after_forward=False),
        "True → False",
        "one all-gather per layer instead of two: elements sent per step, reduce-scatter plus all-gathers, "
        "3Ψ → 2Ψ (lab, lesson 10)",
    ),
    Change(
        "bucket_cap_mb",
        DDP(),
        DDP(bucket_cap_mb=100),
        "25 → 100 MiB",
        "same all-reduced elements, in about 4× fewer calls",
    ),
    Change(
        "activation checkpointing",
        DeepSpeed(stage=3),
        DeepSpeed(stage=3),
        "off → every layer",
        "no new collective; one more forward of compute per layer",
        (False, True),
    ),
)


@dataclass(frozen=True)
class Effect:
    """One change's peak before and after, per rank."""

    change: Change  #: what was turned
    before: int | Fraction  #: the peak before, in bytes
    after: int | Fraction  #: the peak after, in bytes

    @property
    def moved(self) -> int | Fraction:
        """How much the change raised the peak (negative when it lowered it)."""
        return self.after - self.before


def effects(
    model: Model, gpus: int, changes: tuple[Change, ...] = CHANGES, *, loss: int = 0, recount=None
) -> EffectTable:
    """Each change's peak before and after, for `model` on `gpus` ranks; with `loss`, the peak counts a loss
    holding that many bytes after the forward pass (`Timeline.peak_with_loss`); with `recount`, each timeline
    is first passed through it (e.g. `run.stage3_plan.plan_count`, which counts stage 3's gathered weights as
    the loss runs by DeepSpeed's own rules)."""
    if recount is not None and not callable(recount):
        raise TypeError(f"recount must be a function of a Timeline, or None, got {checks.shown(recount)}")
    found = []
    for change in changes:
        ck_before, ck_after = change.checkpointing
        runs = (
            timeline(model, framework, gpus, checkpointing=ck)
            for framework, ck in ((change.before, ck_before), (change.after, ck_after))
        )
        before, after = ((t if recount is None else recount(t)).peak_with_loss(loss) for t in runs)
        found.append(Effect(change, before, after))
    return EffectTable(tuple(found), model.name, gpus, loss=loss)


@dataclass(frozen=True)
class EffectTable:
    """The changes as a table: framework, knob, change, peak before and after, and what it does to the traffic
    (its volume, the number of messages that carry it, or when they are sent)."""

    rows: tuple[Effect, ...]  #: one per change
    model: str  #: the model's name
    gpus: int  #: N
    unit: str = "GB"  #: the unit the peaks are shown in
    loss: int = 0  #: bytes of loss counted after the forward pass, 0 for the step model's own peak

    def effect(self, knob: str) -> Effect:
        """The row for `knob`."""
        for row in self.rows:
            if row.change.knob == knob:
                return row
        raise ValueError(f"knob must be one of {', '.join(r.change.knob for r in self.rows)}, got {knob!r}")

    def cells(self) -> list[list[str]]:
        """A header, then one row per change."""
        unit = self.unit

        def shown(nbytes) -> str:  # always two decimals, so the column lines up: "1.00", not "1"
            whole, _, part = units.format_number(units.in_unit(nbytes, unit), 2).partition(".")
            return f"{whole}.{part.ljust(2, '0')}"

        head = [
            "framework",
            "knob",
            "change",
            f"peak {unit}" + (" (loss counted)" if self.loss else ""),
            f"peak moves {unit}",
            "what it does to the traffic",
        ]
        body = [
            [
                r.change.before.label,
                r.change.knob,
                r.change.shown,
                f"{shown(r.before)} → {shown(r.after)}",
                ("+" if r.moved > 0 else "") + shown(r.moved),
                r.change.traffic,
            ]
            for r in self.rows
        ]
        return [head, *body]

    def _repr_markdown_(self) -> str:
        return tables.markdown(self.cells(), ["---", "---", "---", "--:", "--:", "---"])

    def _repr_html_(self) -> str:
        return tables.html(self.cells())

    def __repr__(self) -> str:
        return "\n".join(" | ".join(r) for r in self.cells())
