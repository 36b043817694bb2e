"""Memory over one step as tables for a lesson: what a rank holds at a phase, its kinds at several phases side
by side, stage 3's gathered weights by who holds them, each setup's peak, what a loss would add to it, the
step model beside the lab's measurement, what DeepSpeed's knobs trade, and lesson 4's picks beside their steps
(`planning.step_picks`). Exact bytes are rounded only here, in the unit asked for; tables render as Markdown
and HTML."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from html import escape

from .. import checks, units
from ..planning.step_effects import EffectTable
from ..planning.step_parts import KINDS, Phase, Timeline
from ..planning.step_picks import Pick
from ..planning.step_zero3 import held_by


@dataclass(frozen=True, repr=False)
class Table:
    """A header and rows of text, shown as a Markdown or HTML table; numbers right-aligned."""

    head: tuple[str, ...]  #: the column names
    body: tuple[tuple[str, ...], ...]  #: one tuple per row, as wide as `head`
    numeric: tuple[bool, ...]  #: which columns hold numbers

    def _repr_markdown_(self) -> str:
        rule = tuple("--:" if n else "---" for n in self.numeric)
        return "\n".join("| " + " | ".join(r) + " |" for r in (self.head, rule, *self.body))

    def _repr_html_(self) -> str:
        def row(cells, tag):
            return "<tr>" + "".join(f"<{tag}>{escape(c)}</{tag}>" for c in cells) + "</tr>"

        return "<table>" + row(self.head, "th") + "".join(row(r, "td") for r in self.body) + "</table>"

    def __repr__(self) -> str:
        return "\n".join(" | ".join(r) for r in (self.head, *self.body))


def _shown(nbytes, unit: str, digits: int = 3) -> str:
    """Bytes in `unit` with thousands separators: whole bytes exact ("25,344"), any other unit to exactly
    `digits` decimals ("2.123", "1.000"), so a column's numbers line up."""
    value = units.in_unit(nbytes, unit)
    text = units.format_number(value, digits)
    whole, _, part = text.lstrip("-").partition(".")
    if unit != "B" or part:
        part = part.ljust(digits, "0")
    return ("-" if text.startswith("-") else "") + f"{int(whole):,}" + (f".{part}" if part else "")


def _as_shown(nbytes, unit: str, digits: int = 3) -> Fraction:
    """The bytes `_shown` shows for `nbytes`: `digits` decimals of `unit`, rounded half away from 0."""
    return Fraction(units.format_number(units.in_unit(nbytes, unit), digits)) * units.unit_size(unit)


def parts_table(phase: Phase, unit: str = "GB") -> Table:
    """Every part a rank holds at `phase`, grouped by kind (the kind named once, largest kind first, its parts
    largest first): its bytes and why it is there."""
    checks.instance("phase", phase, Phase, "a planning Phase, e.g. timeline(...).peak")
    unit = units.unit_name(unit)
    kinds = sorted({p.kind for p in phase.parts}, key=lambda k: (-phase.bytes_of(k), KINDS.index(k)))
    body = []
    for kind in kinds:
        parts = sorted((p for p in phase.parts if p.kind == kind), key=lambda p: -p.nbytes)
        body += [("" if i else kind, _shown(p.nbytes, unit), p.reason) for i, p in enumerate(parts)]
    total = ("total", _shown(phase.total, unit), f"at {phase.name}")
    return Table(("kind", unit, "why it is there"), (*body, total), (False, True, False))


def _labelled(field: str, value, kind: type, example: str) -> None:
    """Check that `value` is a non-empty dict of text labels to `kind`, naming `field` in the error."""
    if not isinstance(value, dict) or not value or not all(isinstance(k, str) for k in value):
        raise TypeError(
            f"{field} must be a non-empty dict of label -> {kind.__name__}, got {checks.shown(value)}"
        )
    for label, item in value.items():
        checks.instance(f"{field}[{label!r}]", item, kind, example)


def kinds_table(phases: dict, unit: str = "GB") -> Table:
    """Bytes of each kind of part at several phases side by side (`phases`: column label -> Phase), every kind
    any of them holds, in KINDS order, then the total; with two phases, a last column of the second minus the
    first, taken from the values as shown, so each row adds up as printed."""
    _labelled("phases", phases, Phase, "a planning Phase, e.g. timeline(...).peak")
    unit, labels, columns = units.unit_name(unit), list(phases), list(phases.values())
    rows = [(k, [p.bytes_of(k) for p in columns]) for k in KINDS if any(p.bytes_of(k) for p in columns)]
    body = []
    for name, values in [*rows, ("total", [p.total for p in columns])]:
        change = [_as_shown(values[1], unit) - _as_shown(values[0], unit)] if len(values) == 2 else []
        shown = [_shown(v, unit) for v in values] + [("+" if c > 0 else "") + _shown(c, unit) for c in change]
        body.append((name, *shown))  # a rise shows its sign, as a fall does
    head = ("kind", *(f"{label} {unit}" for label in labels))
    head += (f"{labels[1]} − {labels[0]} {unit}",) if len(labels) == 2 else ()
    return Table(head, tuple(body), (False, *[True] * (len(head) - 1)))


def peak_table(timelines, unit: str = "GB", *, loss=None) -> Table:
    """Per timeline: model state before the optimizer step, then the peak's phase and bytes, split into the
    model state held at the peak and the bytes beyond it (what the paper's table leaves out). With `loss`,
    the peak counts a loss of that many bytes after the forward pass (`Timeline.peak_with_loss`): where it
    tops the step model's own peak, the peak is at "the loss", holding the last forward phase's parts.

    The split is taken at the peak: the model state changes over a step (DeepSpeed's stages 1 and 2 allocate
    their gradient partition at the first reduction). The beyond column is the peak minus the model state as
    both are shown, so a row adds up as printed (within one last digit of the exact difference)."""
    if not isinstance(timelines, (tuple, list)) or not timelines:
        raise TypeError(f"timelines must be a non-empty list of Timeline, got {checks.shown(timelines)}")
    unit = units.unit_name(unit)
    loss = None if loss is None else checks.byte_count("loss", loss)
    body = []
    for t in timelines:
        checks.instance("each timeline", t, Timeline, "a planning Timeline")
        name, total, state = _peak(t, loss)
        row = [t.framework.label, str(t.gpus), "on" if t.checkpointing else "off"]
        row += [_shown(t.phase("before optimizer step").model_state, unit), name, _shown(total, unit)]
        row += [_shown(state, unit), _shown(_as_shown(total, unit) - _as_shown(state, unit), unit)]
        body.append(tuple(row))
    head = (
        "setup",
        "N",
        "activation checkpointing",
        f"model state before optimizer step {unit}",
        "peak at",
        f"peak {unit}" if loss is None else f"peak (loss counted) {unit}",
        f"model state at the peak {unit}",
        f"beyond model state at the peak {unit}",
    )
    return Table(head, tuple(body), (False, True, False, True, False, True, True, True))


def _peak(t: Timeline, loss) -> tuple[str, int | Fraction, int | Fraction]:
    """The peak's phase, bytes and model state; with a loss that tops the step model's peak, the loss's."""
    if loss is None:
        return t.peak.name, t.peak.total, t.peak.model_state
    phase, on_top = t.phase_with_loss(loss)
    return t.peak_name_with_loss(loss), phase.total + on_top, phase.model_state


def loss_table(timelines, loss, unit: str = "GB") -> Table:
    """Per timeline: how far a loss holding `loss` bytes would lift its peak. The loss runs after the last
    forward phase, and everything that phase holds is taken as still held then (the backward pass has freed
    nothing yet); the step then holds that phase's bytes plus `loss`, and the lift is what this adds above the
    peak, 0 when the peak stays higher. Values are taken as shown, so each row adds up as printed."""
    if not isinstance(timelines, (tuple, list)) or not timelines:
        raise TypeError(f"timelines must be a non-empty list of Timeline, got {checks.shown(timelines)}")
    loss = checks.byte_count("loss", loss)
    unit, body = units.unit_name(unit), []
    for t in timelines:
        checks.instance("each timeline", t, Timeline, "a planning Timeline")
        after_forward = t.as_loss_runs
        peak, held = (_as_shown(b, unit) for b in (t.peak.total, after_forward.total + loss))
        top = max(peak, held)
        shown = (_shown(b, unit) for b in (peak, after_forward.total, top))
        lift = top - peak
        body.append((t.framework.label, "on" if t.checkpointing else "off", *shown, _shown(lift, unit)))
    head = (
        "setup",
        "activation checkpointing",
        f"step model peak {unit}",
        f"after the forward pass {unit}",
        f"peak (loss counted) {unit}",
        f"lift {unit}",
    )
    return Table(head, tuple(body), (False, False, True, True, True, True))


#: What turning each knob of `planning.step_effects.CHANGES` trades, as the knob table of lesson 15 says it.
TRADES = {
    "reduce_bucket_size": "a smaller bucket against more, smaller reductions; stage 2's gradient partition "
    "then arrives sooner, which can raise the peak",
    "allgather_bucket_size": "nothing: DeepSpeed ignores it where PyTorch has all_gather_into_tensor",
    "overlap_comm": "the peak, for reductions that overlap compute: a second bucket fills while one is "
    "reduced",
    **dict.fromkeys(
        ("prefetch_bucket_size", "max_live_parameters"),
        "the peak against overlap: weights gathered ahead of use hide the all-gathers behind compute",
    ),
    **dict.fromkeys(
        ("max_reuse_distance", "reshard_after_forward"),
        "the peak against the all-gathers' volume: weights kept, or gathered again",
    ),
    "bucket_cap_mb": "timing only: DDP keeps a bucket for every gradient; a larger cap sends the same bytes "
    "in fewer all-reduces",
    "activation checkpointing": "the peak, by more than any other knob; it costs recompute, not traffic",
}


def knob_table(effects: EffectTable) -> Table:
    """Each change and how far it moves the peak (`EffectTable`'s columns), then what it trades (`TRADES`;
    a knob not listed there keeps its traffic line)."""
    checks.instance("effects", effects, EffectTable, "planning.step_effects.effects(model, gpus)")
    head, *body = effects.cells()
    rows = tuple((*r[:5], TRADES.get(r[1], r[5])) for r in body)
    return Table((*head[:5], "what it trades"), rows, (False, False, False, True, True, False))


def gathered_table(phases: dict, unit: str = "B") -> Table:
    """Stage 3's gathered weights at each phase (`phases`: row label -> Phase), by who holds them: the module
    running (gathered for its own use), a prefetch they were copied out of, an earlier use they were kept
    from, and the all-gather buffers (whose tensors, once copied out, are held twice); then the sum. Where a
    module's wait frees one buffer as it copies out another, the step model counts the phase's highest point
    as the larger of the two moments, so the split there is bookkeeping, not one moment (only the sum is)."""
    _labelled("phases", phases, Phase, "a planning Phase, e.g. timeline(model, DeepSpeed(stage=3), 2).peak")
    unit, body = units.unit_name(unit), []
    for label, phase in phases.items():
        split = held_by(phase).values()
        body.append((label, *(_shown(v, unit) for v in split), _shown(sum(split), unit)))
    head = ("", "the module's own", "copied out of a prefetch", "kept from an earlier use")
    head += ("in all-gather buffers", f"in all, {unit}")
    return Table(head, tuple(body), (False, *[True] * 5))


def text_table(head, rows) -> Table:
    """A few rows of values as a table: text as it is, numbers with thousands separators ("16,896", "0.41");
    a column whose every value is a number is right-aligned."""
    if not (isinstance(head, (tuple, list)) and head and isinstance(rows, (tuple, list)) and rows):
        raise TypeError(f"head and rows must be non-empty lists, got {checks.shown((head, rows))}")
    for row in (head, *rows):
        bad = [v for v in row if isinstance(v, bool) or not isinstance(v, (str, int, float))]
        if bad or len(row) != len(head):
            raise TypeError(f"each row must be {len(head)} texts or numbers, got {checks.shown(row)}")
    body = tuple(tuple(v if isinstance(v, str) else f"{v:,}" for v in row) for row in rows)
    numeric = tuple(all(not isinstance(r[i], str) for r in rows) for i in range(len(head)))
    return Table(tuple(head), body, numeric)


def picks_table(picks, losses: dict | None = None) -> Table:
    """Per `step_picks.Pick`: lesson 4's pick, its sum and its step's peak in GB (two decimals), and what
    the step adds to the sum, in whole percent of the card; with `losses` (bytes per card, as the picks name
    their cards), the peak counts that loss after the forward pass (`Timeline.peak_with_loss`)."""
    if not isinstance(picks, (tuple, list)) or not picks:
        raise TypeError(f"picks must be a non-empty list of Pick, got {checks.shown(picks)}")
    if losses is not None and not isinstance(losses, dict):
        raise TypeError(f"losses must be a dict of loss bytes per card, or None, got {checks.shown(losses)}")
    rows = []
    for p in picks:
        checks.instance("each pick", p, Pick, "planning.step_picks.lesson4_picks(...)")
        if losses is not None and p.card not in losses:
            raise ValueError(f"losses must give a loss for every card, got none for {p.card!r}")
        name, peak, _ = _peak(p.step, None if losses is None else losses[p.card])
        sums = [round(float(v / units.GB), 2) for v in (p.needs, peak)]
        rows.append(
            (
                f"{p.step.model.params / 10**9:.1f} B on {p.card}, headroom {p.headroom}",
                p.advice.stage.label,
                *sums,
                round(100 * float(p.adds_at(peak))),
                name,
            )
        )
    step = "step peak, GB" if losses is None else "step peak (loss counted), GB"
    head = ("GPT on card, headroom", "pick", "lesson 4's sum, GB", step, "step adds, % of card", "peak at")
    return text_table(head, rows)


def measured_table(rows, unit: str = "kB", digits: int = 1, gap_step: int | None = None) -> Table:
    """Per (setup, phase, step model bytes, measured bytes, tolerance bytes) row: the step model beside the
    measurement and the tolerance, all in `unit` to `digits` decimals. Measured bytes can differ between runs
    by a few bytes of scalars, so they are shown rounded; the difference is that of the values as shown, so a
    row adds up. With `gap_step` (bytes), the difference and the tolerance are shown in bytes instead, the
    difference to the nearest multiple of `gap_step`, so that a gap and its tolerance compare at a glance."""
    unit = units.unit_name(unit)
    if not isinstance(rows, (tuple, list)) or not rows or any(len(r) != 5 for r in rows):
        raise TypeError(f"rows must be (setup, phase, model, measured, tolerance), got {checks.shown(rows)}")
    if gap_step is not None:
        checks.whole("gap_step", gap_step)
    body = []
    for row in rows:
        setup, phase, model, measured, tolerance = row
        shown = [_as_shown(b, unit, digits) for b in (model, measured)]
        cells = [_shown(v, unit, digits) for v in (model, measured, shown[1] - shown[0], tolerance)]
        if gap_step is not None:
            cells[2:] = [f"{round((measured - model) / gap_step) * gap_step:,}", f"{tolerance:,}"]
        body.append((str(setup), str(phase), *cells))
    gaps = unit if gap_step is None else f"B, to the nearest {gap_step}"
    head = (
        "setup",
        "phase",
        f"step model {unit}",
        f"measured at that phase, {unit}",
        f"measured − step model {gaps}",
        f"tolerance {unit if gap_step is None else 'B'}",
    )
    return Table(head, tuple(body), (False, False, True, True, True, True))
