"""Memory over one step as tables for a lesson: what a rank holds at a phase, each setup's peak, stage 3's
prefetch walk and what it holds gathered, and the step model beside the lab's measurement. Exact bytes are
rounded only here, in the unit asked for; tables render as Markdown and HTML."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from html import escape

from .. import checks, units
from ..planning.step_coordinator import Visit, replay, walk
from ..planning.step_effects import EffectTable
from ..planning.step_knobs import DeepSpeed
from ..planning.step_model import Model
from ..planning.step_parts import KINDS, Phase, Timeline


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


def peak_table(timelines, unit: str = "GB") -> Table:
    """Per timeline: model state before the optimizer step, then the peak's phase and bytes, split into the
    model state held at the peak and the bytes beyond it (what the paper's table leaves out).

    The split is taken at the peak: the model state changes over a step (DeepSpeed's stages 1 and 2 allocate
    their gradient partition at the first reduction). The last column is the peak minus the model state as
    both are shown, so a row adds up as printed (within one last digit of the exact difference)."""
    if not isinstance(timelines, (tuple, list)) or not timelines:
        raise TypeError(f"timelines must be a non-empty list of Timeline, got {checks.shown(timelines)}")
    unit = units.unit_name(unit)

    body = []
    for t in timelines:
        checks.instance("each timeline", t, Timeline, "a planning Timeline")
        state = t.phase("before optimizer step").model_state
        peak = t.peak
        body.append(
            (
                t.framework.label,
                str(t.gpus),
                "on" if t.checkpointing else "off",
                _shown(state, unit),
                peak.name,
                _shown(peak.total, unit),
                _shown(peak.model_state, unit),
                _shown(_as_shown(peak.total, unit) - _as_shown(peak.model_state, unit), unit),
            )
        )
    head = (
        "setup",
        "N",
        "activation checkpointing",
        f"model state before optimizer step {unit}",
        "peak at",
        f"peak {unit}",
        f"model state at the peak {unit}",
        f"beyond model state at the peak {unit}",
    )
    return Table(head, tuple(body), (False, True, False, True, False, True, True, True))


#: What turning each knob of `planning.step_effects.CHANGES` trades, as the knob table of lesson 09 says it.
TRADES = {
    "reduce_bucket_size": "the peak, and how many reductions carry the same gradients",
    "allgather_bucket_size": "nothing with gloo or NCCL: DeepSpeed ignores it (all_gather_into_tensor)",
    "overlap_comm": "the peak, and when gradients are sent: a second bucket, sent while backward runs",
    **dict.fromkeys(
        ("prefetch_bucket_size", "max_live_parameters"),
        "the peak against overlap: weights gathered ahead of use hide the all-gathers behind compute",
    ),
    **dict.fromkeys(
        ("max_reuse_distance", "reshard_after_forward"),
        "the peak against the all-gathers' volume: weights kept, or gathered again",
    ),
    "bucket_cap_mb": "traffic only: DDP keeps a bucket for every gradient; a larger cap makes fewer",
    "activation checkpointing": "the peak only, most of all; it costs compute, not traffic",
}


def knob_table(effects: EffectTable) -> Table:
    """Each change and how far it moves the peak (`EffectTable`'s columns), then what it trades (`TRADES`;
    a knob not listed there keeps its traffic line)."""
    checks.instance("effects", effects, EffectTable, "planning.step_effects.effects(model, gpus)")
    head, *body = effects.cells()
    rows = tuple((*r[:5], TRADES.get(r[1], r[5])) for r in body)
    return Table((*head[:5], "what it trades"), rows, (False, False, False, True, True, False))


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


def measured_table(rows, unit: str = "kB", digits: int = 1) -> Table:
    """Per (setup, phase, step model bytes, measured bytes, tolerance bytes) row: the step model beside the
    measurement, in `unit` to `digits` decimals, and the tolerance in exact bytes. Measured bytes can differ
    between runs by a few bytes of scalars, so they are shown rounded; the difference is that of the values
    as shown, so a row adds up."""
    unit = units.unit_name(unit)
    if not isinstance(rows, (tuple, list)) or not rows or any(len(r) != 5 for r in rows):
        raise TypeError(f"rows must be (setup, phase, model, measured, tolerance), got {checks.shown(rows)}")
    body = []
    for row in rows:
        setup, phase, model, measured, tolerance = row
        shown = [_as_shown(b, unit, digits) for b in (model, measured)]
        cells = (_shown(v, unit, digits) for v in (model, measured, shown[1] - shown[0]))
        body.append((str(setup), str(phase), *cells, _shown(tolerance, "B")))
    head = ("setup", "phase", f"step model {unit}", f"measured {unit}", f"measured − step model {unit}")
    return Table((*head, "tolerance B"), tuple(body), (False, False, True, True, True, True))


def walk_table(model: Model, fw: DeepSpeed, steps: int | None = None) -> Table:
    """Stage 3's first `steps` steps of the trace (all by default), in elements: what each module needs, the
    room its prefetch walk has, what the walk adds (one all-gather) and passes already gathered, what is then
    gathered against max_live_parameters, and whether the module's tensors are freed or kept after it runs."""
    checks.instance("model", model, Model, "a planning Model, e.g. transformer_model(...)")
    checks.instance("fw", fw, DeepSpeed, "DeepSpeed(stage=3, ...)")
    visits = walk(model, fw)
    count = len(visits) if steps is None else checks.whole("steps", steps, high=len(visits))
    n, body, passed = len(model.layers), [], set()
    for v in visits[:count]:
        passed |= {(layer, step) for layer, _, step in v.passed}
        name = "root module" if v.layer == n else model.layers[v.layer].name
        uses = dict.fromkeys(f"{_pass(step, n)} {model.layers[i].name}" for i, _, step in v.passed)
        body.append(
            (
                f"{_pass(v.step, n)} {name}",
                _needs(model, v),
                _room(fw, v),
                _tensors(model, v.prefetched),
                ", ".join(uses) or "—",
                f"{v.live:,}",
                _after(model, v, (v.layer, 2 * n + 1 - v.layer) in passed),
            )
        )
    limit = f"gathered (max_live_parameters = {fw.max_live_parameters:,})"
    head = (
        "step",
        "its own tensors",
        "walk's room",
        "walk gathers (one all-gather)",
        "walk passes",
        limit,
        "after",
    )
    return Table(head, tuple(body), (False, False, False, False, False, True, False))


def _pass(step: int, layers: int) -> str:
    """Which pass a trace step belongs to: "fwd" for the root module and the layers, then "bwd"."""
    return "fwd" if step <= layers else "bwd"


def _tensors(model: Model, tensors) -> str:
    """(layer, elements) pairs as "linear 4 (32), linear 1 (1,024) = 1,056", each layer once, in order."""
    sizes: dict[int, list[int]] = {}
    for layer, elements in tensors:
        sizes.setdefault(layer, []).append(elements)
    shown = [f"{model.layers[i].name} ({' + '.join(f'{e:,}' for e in ns)})" for i, ns in sizes.items()]
    return ", ".join(shown) + (f" = {sum(e for _, e in tensors):,}" if len(tensors) > 1 else "") or "—"


def _needs(model: Model, v: Visit) -> str:
    """The module's own tensors, and whether they had to be all-gathered now."""
    own = model.layers[v.layer].tensors if v.layer < len(model.layers) else ()
    if not own:
        return "none"
    return f"{_tensors(model, v.fetched)}, gathered now" if v.fetched else "already gathered"


def _room(fw: DeepSpeed, v: Visit) -> str:
    """The walk's budget: prefetch_bucket_size, or what max_live_parameters leaves if that is less."""
    before = v.live - sum(e for _, e in v.prefetched)
    if fw.prefetch_bucket_size == 0:
        return "none: prefetch_bucket_size is 0"
    if v.budget == fw.prefetch_bucket_size:
        return f"{v.budget:,} (prefetch_bucket_size)"
    if v.budget <= 0:
        return f"none: {before:,} ≥ {fw.max_live_parameters:,}"
    return f"{fw.max_live_parameters:,} − {before:,} = {v.budget:,}"


def _after(model: Model, v: Visit, passed: bool) -> str:
    """Whether the module's tensors are freed after it runs, or kept, and why."""
    own = model.layers[v.layer].tensors if v.layer < len(model.layers) else ()
    if not own:
        return "—"
    if v.released:
        return "freed"
    forward = _pass(v.step, len(model.layers)) == "fwd"
    return "kept: the walk passed its backward use" if passed and forward else "kept: reused soon"


def held_table(model: Model, fw: DeepSpeed, at: str) -> Table:
    """What stage 3 holds gathered while layer `at` runs forward, tensor by tensor, in elements: its own copy
    (and why it has one), the all-gather buffer it is still in (named by the step that gathered it), and the
    elements that makes. A tensor with both is held twice: its copy, and its place in a buffer that is freed
    only once every tensor it brought has been used."""
    checks.instance("model", model, Model, "a planning Model, e.g. transformer_model(...)")
    checks.instance("fw", fw, DeepSpeed, "DeepSpeed(stage=3, ...)")
    names = [layer.name for layer in model.layers]
    if at not in names:
        raise ValueError(f"at must name one of the model's layers ({', '.join(names)}), got {at!r}")
    index = names.index(at)
    snap = replay(model, fw)[0][index]  # the forward steps come first, one per layer
    own = [(index, n) for n in model.layers[index].tensors if n > fw.param_persistence_threshold]
    roles = (("its own, in use", own), ("prefetched, copied out", snap.ready))
    roles += (("kept for reuse", snap.kept_tensors),)
    rows = [[t, why, "—"] for why, tensors in roles for t in tensors]
    for source, tensors in _buffers(model, walk(model, fw)[: index + 2]):
        for t in tensors:
            row = next((r for r in rows if r[0] == t and r[2] == "—"), None)
            if row is None:
                rows.append(row := [t, "—", "—"])
            row[2] = source
    rows.sort(key=lambda r: (r[0][0], model.layers[r[0][0]].tensors.index(r[0][1])))
    held = [n * ((why != "—") + (buffer != "—")) for (_, n), why, buffer in rows]
    body = [
        (names[layer], f"{n:,}", why, buffer, f"{h:,}")
        for ((layer, n), why, buffer), h in zip(rows, held, strict=True)
    ]
    total = ("total", f"{sum(r[0][1] for r in rows):,}", "", "", f"{sum(held):,}")
    head = ("layer", "tensor elements", "its own copy", "still in the all-gather buffer of", "elements held")
    return Table(head, (*body, total), (False, True, False, False, True))


def _buffers(model: Model, visits) -> list[tuple[str, tuple[tuple[int, int], ...]]]:
    """The all-gather buffers alive once the last of `visits` has run its prefetch walk: the step whose
    all-gather filled each ("linear 1's walk"), and every tensor it brought (it stays whole until freed)."""
    alive: list[tuple[str, tuple, list]] = []
    for v in visits:
        name = "the root module" if v.layer == len(model.layers) else model.layers[v.layer].name
        if v.fetched:
            alive.append((f"{name}'s own all-gather", v.fetched, list(v.fetched)))
        for _, _, pending in alive:  # the layer uses its tensors: each buffer lives until all are used
            pending[:] = [t for t in pending if t[0] != v.layer]
        if v.prefetched:
            alive.append((f"{name}'s walk", v.prefetched, list(v.prefetched)))
        alive = [b for b in alive if b[2]]
    return [(source, tensors) for source, tensors, _ in alive]
