"""Lesson 06's picture of DeepSpeed's estimator beside the optimizer step: for ZeRO-2 and ZeRO-3, the ZeRO
paper's count (which it holds all step), the estimator's, and what a GPU holds at its step, by item.

The paper's and the estimator's bytes per kind come from `counts.PLACES`, the table the lesson shows first;
the step's two copies from `step_check` (DeepSpeed's step flattens the gradient shard in 16 bits, then casts
it to fp32; stage 3 one sub-group at a time); stage 3's gradient bucket from `step_check.BUCKET_BYTES`; the
estimator's largest-layer buffer from `ds_estimator.zero3`. The tests set each bar's total against
`memory.per_gpu`, `ds_estimator` and `step_check.at_step`, which count the same bytes their own way.
"""

from __future__ import annotations

from fractions import Fraction

from .. import checks, tables, units
from ..planning import counts, ds_estimator, pick_checks, step_check
from ..planning.headroom import HEADROOM, budget, percent
from ..stages import Stage, StageLike, as_stage
from .figures import KIND_COLOURS, STATE_COLOURS, Chart, headroom_share

#: The items a GPU holds, in stacking order, with their colours (those of the step figures of lessons 12-17).
ITEMS = {
    "16-bit weights": STATE_COLOURS["weights"],
    "16-bit gradients": STATE_COLOURS["gradients"],
    "optimizer state": STATE_COLOURS["optimizer"],
    "flattened 16-bit gradient copy": KIND_COLOURS["optimizer temporaries"],
    "fp32 gradient copy": KIND_COLOURS["fp32 gradients"],
    "gradient buckets": KIND_COLOURS["gradient buckets"],
    "largest layer's buffer": KIND_COLOURS["gathered parameters"],
}
#: counts.KINDS (by index) -> the item it is drawn as: the fp32 master weights and Adam moments are one item.
_ITEM_OF = ("16-bit weights", "16-bit gradients", "fp32 gradient copy", "optimizer state", "optimizer state")
#: The three counts per stage, in order. The paper's holds all step (DeepSpeed's stage 3 keeps a gradient
#: bucket besides; its stage 2 frees its gradient partition between steps).
MOMENTS = ("paper", "estimator", "at the step")
#: The two counts, as `bars` names them; the other bars are moments of the step.
_COUNTS = tuple(f", {moment}" for moment in MOMENTS[:2])
#: The bar stage 2 adds between its estimator and its step: what the paper counts, and the backward pass's
#: two gradient buckets (with overlap_comm, as `advise` writes it). Stage 3's needs a step model (lesson 14).
BACKWARD = "backward pass"
#: counts.PLACES' rows for the paper and the estimator without offload, by stage.
_ROWS = {Stage.ZERO2: counts.NO_OFFLOAD[:2], Stage.ZERO3: counts.NO_OFFLOAD[2:]}
#: What the step adds per shard element: its flattened 16-bit copy, then that copy's fp32 cast.
_STEP_COPIES = {
    "flattened 16-bit gradient copy": step_check.FLAT_COPY,
    "fp32 gradient copy": step_check.FP32_COPY,
}


def _kinds(row: str) -> tuple[dict[str, int], dict[str, int]]:
    """One PLACES row as (bytes per shard element by item, bytes per parameter kept whole on every GPU)."""
    cells = dict((name, cells) for name, cells, _ in counts.PLACES)[row]
    split, whole = dict.fromkeys(ITEMS, 0), dict.fromkeys(ITEMS, 0)
    for kind, (size, where) in cells.items():
        (split if "÷ N" in where else whole)[_ITEM_OF[kind]] += size
    return split, whole


def per_element(stage: StageLike) -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    """ZeRO-2's or ZeRO-3's MOMENTS, each as (bytes per shard element by item, bytes per parameter whole)."""
    stage = as_stage(stage)
    if stage not in _ROWS:
        raise ValueError(f"stage must be ZeRO-2 or ZeRO-3, the stages DeepSpeed estimates, got {stage.label}")
    (paper, whole), (estimator, est_whole) = (_kinds(row) for row in _ROWS[stage])
    at_step = {item: paper[item] + _STEP_COPIES.get(item, 0) for item in ITEMS}
    return dict(zip(MOMENTS, ((paper, whole), (estimator, est_whole), (at_step, whole)), strict=True))


def table() -> str:
    """`per_element` for both stages as a Markdown table: a row per item, a column per stage and moment, with
    what each GPU holds besides its shard in the last row."""
    columns = [(stage, moment) for stage in _ROWS for moment in MOMENTS]
    data = {stage: per_element(stage) for stage in _ROWS}
    header = ["bytes per shard element", *(f"{stage.label}: {moment}" for stage, moment in columns)]
    rows = [header]
    for item in ITEMS:
        cells = [_cell(*data[stage][moment], item) for stage, moment in columns]
        if any(cell != "—" for cell in cells):
            rows.append([item, *cells])
    totals = [f"**{sum(data[stage][moment][0].values())}**" for stage, moment in columns]
    rows += [["**in all, split**", *totals], ["also counted", *(_besides(stage, m) for stage, m in columns)]]
    return tables.markdown(rows, ["---", *["--:"] * len(columns)])


def _cell(split: dict[str, int], whole: dict[str, int], item: str) -> str:
    """One item's bytes per shard element, "whole" when every GPU keeps it whole, "—" when not held."""
    return str(split[item]) if split[item] else "whole" if whole[item] else "—"


def _besides(stage: Stage, moment: str) -> str:
    """What a count holds beyond its items' rows: nothing at stage 2 (its whole weights have their row); at
    stage 3, the estimator's buffer or, at the step, the gradient bucket (the paper's count leaves it out)."""
    if stage is Stage.ZERO2:
        return "—"
    return {
        MOMENTS[1]: "4 B per parameter of the largest layer",
        MOMENTS[2]: f"a {units.format_bytes(step_check.BUCKET_BYTES)} gradient bucket, all step",
    }.get(moment, "—")


def bars(params: int, gpus: int, largest: int) -> dict[str, dict[str, Fraction]]:
    """Bytes per GPU on one node of `gpus`, by item, per stage and count: {"ZeRO-2, at the step": ...}, with
    stage 2's backward pass (`BACKWARD`) before its step."""
    params, gpus = checks.params(params), checks.gpus_per_node(gpus, "gpus")
    layer = checks.whole("largest", largest, low=0, high=params)
    line = {"cpu_offload": False, "cpu_offload_params": False}  # the estimator's line without offload
    # its largest-layer buffer: the line with the largest layer less the line with none
    buffer = ds_estimator.zero3(params, layer, gpus, **line).gpu_bytes
    buffer -= ds_estimator.zero3(params, 0, gpus, **line).gpu_bytes
    out = {}
    for stage in _ROWS:
        for moment, (split, whole) in per_element(stage).items():
            held = {item: Fraction(split[item] * params, gpus) + whole[item] * params for item in ITEMS}
            if stage is Stage.ZERO2 and moment == MOMENTS[2]:  # first the backward pass, with its buckets
                kept = out[f"{stage.label}, {MOMENTS[0]}"]
                out[f"{stage.label}, {BACKWARD}"] = kept | {"gradient buckets": pick_checks.BACKWARD_BUCKETS}
            if moment == MOMENTS[2]:  # the copies of as many elements as step_check holds at once
                copied = step_check.copied(params, gpus, stage)
                held |= {item: size * copied for item, size in _STEP_COPIES.items()}
            if stage is Stage.ZERO3:
                held["largest layer's buffer"] += buffer if moment == MOMENTS[1] else 0
                held["gradient buckets"] += step_check.BUCKET_BYTES if moment == MOMENTS[2] else 0
            out[f"{stage.label}, {moment}"] = held
    return out


def chart(params: int, gpus: int, largest: int, card=None, headroom=HEADROOM, unit: str = "GB") -> Chart:
    """`bars` as stacked bars, one per stage and count, under `card` (if given), it less `headroom` (the
    counts' limit) and it less the CUDA context's room (`pick_checks.CONTEXT`, the moments' limit)."""
    held = bars(params, gpus, largest)
    unit = units.unit_name(unit)
    limit = None if card is None else units.as_bytes("card", card)
    share = headroom_share(headroom)
    shown = [item for item in ITEMS if any(parts[item] for parts in held.values())]
    return Chart(
        "bars",
        tuple(name.replace(", ", "\n") for name in held),
        {item: tuple(float(units.in_unit(parts[item], unit)) for parts in held.values()) for item in shown},
        {item: ITEMS[item] for item in shown},
        ylabel=unit,
        labels=tuple(units.format_number(units.in_unit(sum(p.values()), unit)) for p in held.values()),
        line=None if limit is None else float(units.in_unit(limit, unit)),
        line_label="the card",
        band=None if limit is None or not share else float(units.in_unit(budget(limit, share), unit)),
        band_label=f"counts keep {percent(share)}% free" if share else "",
        margin=None if limit is None else float(units.in_unit(limit - pick_checks.CONTEXT, unit)),
        margin_label=f"moments leave {units.format_bytes(pick_checks.CONTEXT)}",
        band_bars=tuple(i for i, name in enumerate(held) if name.endswith(_COUNTS)),
        margin_bars=tuple(i for i, name in enumerate(held) if not name.endswith(_COUNTS)),
    )
