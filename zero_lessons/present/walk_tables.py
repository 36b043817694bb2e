"""Stage 3's prefetch walk as tables for a lesson: what the coordinator does at each step of the trace, and
what it holds gathered while one layer runs, tensor by tensor, in elements."""

from __future__ import annotations

from .. import checks
from ..planning.step_coordinator import Visit, replay, walk
from ..planning.step_knobs import DeepSpeed
from ..planning.step_model import Model
from .step_tables import Table


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
