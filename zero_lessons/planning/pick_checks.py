"""Lesson 06's four checks of a DeepSpeed pick at stage 2 or 3, without offload.

Two counts, each within the card less the advisor's headroom: the ZeRO paper's (`memory.per_gpu`) and
DeepSpeed's estimator's (`ds_estimator`). Two busiest moments, each within the whole card: the optimizer step
(`step_check.at_step`) and the backward pass with its gradient buckets. At stage 2 the backward pass holds the
paper's model state and two buckets of `reduce_bucket_size` bf16 elements (overlap_comm on, as `advise` writes
it; DeepSpeed frees them before the step). At stage 3 it also holds gathered layers, which depend on the
model's shape, so `backward` is None there (lesson 14's step model counts them). What the busiest moment
leaves of the card must still hold the CUDA context and the allocator's slack: `left` gives it, and `thin`
says when it is under CONTEXT.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks, memory, tables, units
from ..stages import Stage, StageLike, as_stage
from . import ds_estimator, step_check
from .headroom import HEADROOM, budget

#: Stage 2's backward pass with overlap_comm: two gradient buckets, 1 GB each by default.
BACKWARD_BUCKETS = 2 * step_check.BUCKET_BYTES
#: Less than this left beside the busiest moment is thin: the step check's line for the CUDA context.
CONTEXT = step_check.CONTEXT
#: The column heads of `table`, after the case.
HEADS = ("the paper", "the estimator", "the optimizer step", "the backward pass")


@dataclass(frozen=True)
class Checks:
    """One pick's four figures per GPU, in bytes, and the card they are held to."""

    stage: Stage
    gpus: int  #: data-parallel GPUs
    card: Fraction  #: bytes per GPU
    paper: Fraction  #: the ZeRO paper's model state
    estimator: int  #: DeepSpeed's estimator, without offload
    at_step: Fraction  #: at the optimizer step
    backward: (
        Fraction | None
    )  #: the backward pass with its buckets; None at stage 3 (it needs a step model of the layers)

    @property
    def budget(self) -> Fraction:
        """What the two counts must fit: the card less the advisor's headroom."""
        return budget(self.card, HEADROOM)

    @property
    def verdicts(self) -> tuple[bool | None, ...]:
        """Whether each of HEADS' figures fits its line: the counts the budget, the moments the card less
        CONTEXT (a moment that leaves less is thin, and fails)."""
        counts = [self.paper <= self.budget, self.estimator <= self.budget]
        line = self.card - CONTEXT
        return (*counts, *(None if m is None else m <= line for m in (self.at_step, self.backward)))

    @property
    def left(self) -> Fraction:
        """What the busiest moment this check knows of leaves of the card (negative: it does not fit)."""
        return self.card - max(m for m in (self.at_step, self.backward) if m is not None)

    @property
    def thin(self) -> bool:
        """Whether the busiest moment fits the card but leaves it less than CONTEXT."""
        return 0 <= self.left < CONTEXT


def four_checks(params: int, gpus: int, card: units.Size, stage: StageLike, largest: int = 0) -> Checks:
    """The four checks for `params` parameters on `gpus` GPUs of `card` bytes (at most 1,024 GPUs, the most
    one DeepSpeed estimate takes), at stage 2 or 3; `largest`, the largest layer's parameters, sizes stage 3's
    estimator buffer."""
    params, gpus = checks.params(params), checks.gpus_per_node(gpus, "gpus")
    card, stage = units.as_bytes("card", card), as_stage(stage)
    layer = checks.whole("largest", largest, low=0, high=params)
    paper = memory.per_gpu(params, gpus, stage).total
    if stage is Stage.ZERO2:
        estimate, backward = ds_estimator.zero2(params, gpus, cpu_offload=False), paper + BACKWARD_BUCKETS
    elif stage is Stage.ZERO3:
        estimate = ds_estimator.zero3(params, layer, gpus, cpu_offload=False, cpu_offload_params=False)
        backward = None
    else:
        raise ValueError(f"stage must be ZeRO-2 or ZeRO-3, the stages these checks cover, got {stage.label}")
    at_step = step_check.at_step(params, gpus, stage)
    return Checks(stage, gpus, card, paper, estimate.gpu_bytes, at_step, backward)


def table(params: int, card: units.Size, cases, largest: int = 0, unit: str = "GB") -> str:
    """`four_checks` for each (stage, GPUs) of `cases` (at most 20) as a Markdown table: each figure with its
    verdict, and what the busiest moment leaves of the card."""
    if not isinstance(cases, (list, tuple)) or not 1 <= len(cases) <= 20:
        raise TypeError(f"cases must be a list of 1 to 20 (stage, GPUs) pairs, got {checks.kind(cases)}")
    unit, found = units.unit_name(unit), []
    for case in cases:
        if not isinstance(case, tuple) or len(case) != 2:
            raise TypeError(
                f"each of cases must be a (stage, GPUs) pair such as (2, 8), got {checks.kind(case)}"
            )
        found.append(four_checks(params, case[1], card, case[0], largest))
    room, card = (units.format_bytes(b, unit) for b in (found[0].budget, found[0].card))
    spare = units.format_bytes(CONTEXT, unit)
    head = [f"{h}, within {room}?" for h in HEADS[:2]] + [
        f"{h}, leaving {spare} of {card}?" for h in HEADS[2:]
    ]
    rows = [["per GPU", *head, "left of the card at the busier moment"], *(_row(f, unit) for f in found)]
    return tables.markdown(rows, ["---", *["--:"] * 5])


def _row(found: Checks, unit: str) -> list[str]:
    """One case's row: its name, each figure with its verdict, and what its busiest moment leaves."""
    figures = (found.paper, found.estimator, found.at_step, found.backward)
    shown = [_cell(f, ok, unit) for f, ok in zip(figures, found.verdicts, strict=True)]
    left = units.format_bytes(abs(found.left), unit)
    left = f"over by {left}" if found.left < 0 else f"{left}: **thin**" if found.thin else left
    if found.backward is None:  # only the step is checked: say so, so the row does not read as a full pass
        left += ", at the step"
    return [f"{found.stage.label} on {found.gpus}", *shown, left]


def _cell(nbytes: Fraction | int | None, ok: bool | None, unit: str) -> str:
    """A figure and its verdict: "28.125: yes", "31.875: **no**"; "—" where the check needs the model."""
    if nbytes is None:
        return "— (needs a step model: lesson 14)"
    return f"{units.format_number(units.in_unit(nbytes, unit))}: {'yes' if ok else '**no**'}"
