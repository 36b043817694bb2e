"""How DeepSpeed 0.19.8's ZeRO-3 holds memory over a step, with its parameter coordinator replayed.

Stage 3 keeps a 1/N piece of every weight, a partition-sized gradient buffer and one bucket of
`reduce_bucket_size` elements, all allocated at start-up and kept (`deepspeed/runtime/zero/stage3.py`);
its optimizer step casts one sub-group (`sub_group_size` elements) at a time to fp32. On one rank
it gathers nothing: each parameter is a view of its own piece. Which weights are gathered when is
the coordinator's doing, replayed in `step_coordinator`. A full bucket is reduced by
`reduce_scatter_coalesced`, which first flattens its gradients into a new tensor (`torch.cat`).
"""

from __future__ import annotations

from fractions import Fraction

from .. import units
from .step_coordinator import Gathered, replay
from .step_deepspeed import buckets, hook_gradients
from .step_knobs import DeepSpeed
from .step_parts import HOLDERS, Part, Phase
from .step_rules import FP32, Moments, Parts, Setup, per, share, span

__all__ = ["HOLDERS", "Gathered", "held_by", "holder", "named", "replay", "runs", "zero3"]

#: How the reasons of the gathered weights held for others begin (their `Part.holder` says who holds them).
PREFETCHED = "prefetched (prefetch_bucket_size) and already copied out"
KEPT = "kept gathered since an earlier use"
BUFFERS = "all-gather buffers"


def zero3(setup: Setup, fw: DeepSpeed) -> Moments:
    """Stage 3: pieces of everything, a kept bucket, and weights gathered as the coordinator decides."""
    held = _pieces(setup, fw) + buckets(setup, fw, "keeps, from start-up,")
    steps, leftover = replay(setup.model, fw)
    count = len(setup.model.layers)
    threshold = fw.param_persistence_threshold
    gathered = [
        _gathered(setup, step, "backward" if s >= count else "forward", threshold)
        for s, step in enumerate(steps)
    ]
    waiting, last = hook_gradients(setup, fw)
    most, end = _flattened(setup, fw)
    forward = tuple(held + gathered[i] for i in range(count))
    backward = tuple(
        held + gathered[2 * count - 1 - i] + (waiting[i], _flat_copy(setup, most[i])) for i in range(count)
    )
    reduction = held + _gathered(setup, leftover, "backward", threshold) + last + (_flat_copy(setup, end),)
    return Moments(held, forward, backward, reduction, held, held + _cast(setup, fw), held)


def _flattened(setup: Setup, fw: DeepSpeed) -> tuple[list[int], int]:
    """Elements `reduce_scatter_coalesced` copies to flatten a full bucket: the most during each layer's
    backward, and the last bucket's, as backward ends. One tensor that N divides needs no copy."""
    layers, n = setup.model.layers, setup.gpus
    most, bucket = [0] * len(layers), []

    def copied(sizes: list[int]) -> int:
        return 0 if len(sizes) == 1 and sizes[0] % n == 0 else sum(sizes)

    for i in reversed(range(len(layers))):
        for size in reversed(layers[i].tensors):
            if bucket and sum(bucket) + size > fw.reduce_bucket_size:
                most[i], bucket = max(most[i], copied(bucket)), []
            bucket.append(size)
    return most, copied(bucket)


def _flat_copy(setup: Setup, elements: int) -> Part:
    """The flattened copy of a bucket being reduced."""
    return Part(
        "gradient buckets",
        elements * setup.g,
        f"reduce_scatter_coalesced flattens a full bucket's gradients into a new tensor: "
        f"{per(setup.g, elements)}",
    )


def _pieces(setup: Setup, fw: DeepSpeed) -> Parts:
    """What stage 3 keeps on each rank all step: pieces of every state, and the small tensors whole."""
    psi, n, w, g, k = setup.model.params, setup.gpus, setup.w, setup.g, setup.k
    whole = [
        size
        for layer in setup.model.layers
        for size in layer.tensors
        if size <= fw.param_persistence_threshold
    ]
    threshold = (
        f"param_persistence_threshold keeps {len(whole)} tensors of ≤ {fw.param_persistence_threshold:,}"
    )
    return (
        Part("weights", share(psi * w, n), f"ZeRO-3 keeps a 1/{n} piece of every weight: {per(w, psi, n)}"),
        Part(
            "weights",
            sum(whole) * w if n > 1 else 0,
            f"{threshold} elements whole as well: {per(w, sum(whole))}",
        ),
        Part(
            "gradients",
            share(psi * g, n),
            f"the gradient partition buffer, allocated at start-up: {per(g, psi, n)}",
        ),
        Part(
            "optimizer",
            share(psi * k, n),
            f"fp32 master weights and moments for the 1/{n} partition: {per(k, psi, n)}",
        ),
    )


def _gathered(setup: Setup, step: Gathered, which: str, threshold: int) -> Parts:
    """Parts for what ZeRO-3 holds gathered at one step (nothing on one rank)."""
    if setup.gpus == 1:
        return ()
    layers, w = setup.model.layers, setup.w
    own = layers[step.layer].name if step.layer >= 0 else ""
    waiting = named(layers, step.waiting, threshold)
    still = f"; still only in them, prefetched: {waiting}" if waiting else ""
    return (
        Part(
            "gathered parameters",
            step.own * w,
            f"{own}'s weights, gathered for its {which}: {per(w, step.own)}",
        ),
        Part(
            "gathered parameters",
            (step.prefetched - step.in_flight) * w,
            f"{PREFETCHED}, as the first wait on an all-gather "
            f"copies out all it brought: {named(layers, step.ready, threshold)}: "
            f"{per(w, step.prefetched - step.in_flight)}",
            "prefetched",
        ),
        Part(
            "gathered parameters",
            step.kept * w,
            f"{KEPT} (reused within max_reuse_distance, or the prefetcher is "
            f"already past their next use): {named(layers, step.kept_tensors, threshold)}: "
            f"{per(w, step.kept)}",
            "kept",
        ),
        Part(
            "gathered parameters",
            step.flat * w,
            f"{BUFFERS} ({per(w, step.flat)}), each freed only once every tensor it brought has "
            f"been used, so a tensor copied out of one is held twice until then{still}",
            "buffers",
        ),
    )


def holder(part: Part) -> str:
    """Which of HOLDERS holds `part` (a stage-3 "gathered parameters" part is set by `_gathered`)."""
    return part.holder


def held_by(phase: Phase) -> dict[str, int]:
    """The bytes of `phase`'s gathered parameters by holder, every one of HOLDERS (0 where none)."""
    held = dict.fromkeys(HOLDERS, 0)
    for part in phase.parts:
        if part.kind == "gathered parameters":
            held[holder(part)] += part.nbytes
    return held


def named(layers, tensors, threshold: int = 0) -> str:
    """The layers the `(layer, elements)` pairs in `tensors` belong to, by name: a layer whose gathered
    tensors (those over `threshold` elements) are all there joins a run, as `runs` writes it; one with only
    some is named by its tensors: "linear 4's 1,024-element tensor", or "2 of block 3's 4 tensors"."""
    count = {i: sum(1 for n in layer.tensors if n > threshold) for i, layer in enumerate(layers)}
    have: dict[int, list[int]] = {}
    for i, n in tensors:
        have.setdefault(i, []).append(n)
    some = {}
    for i, sizes in have.items():
        if len(sizes) == 1 < count[i]:
            some[i] = f"{layers[i].name}'s {sizes[0]:,}-element tensor"
        elif len(sizes) < count[i]:
            some[i] = f"{len(sizes)} of {layers[i].name}'s {count[i]} tensors"
    return runs(layers, tuple(have), some)


def runs(layers, idx, some=None) -> str:
    """The layers at indices `idx` by name, each unbroken run as one span: "linear 2 to linear 3", but
    "linear 1 and linear 4" when layers between them are left out (a layer without tensors breaks no run).
    A layer in `some` (index -> text) is written as that text, and breaks the run."""
    some = some or {}
    spans, run = [], []
    for j in range(len(layers)):
        if j in idx and j not in some:
            run.append(layers[j])
        elif (layers[j].tensors or j in some) and run:
            spans, run = [*spans, span(tuple(run))], []
        if j in some:
            spans.append(some[j])
    spans += [span(tuple(run))] if run else []
    return ", ".join(spans[:-1]) + (" and " if len(spans) > 1 else "") + (spans[-1] if spans else "")


def _cast(setup: Setup, fw: DeepSpeed) -> Parts:
    """The optimizer step's copies: one sub-group's gradients flattened, then cast to fp32."""
    n, g = setup.gpus, setup.g
    largest, current = Fraction(0), Fraction(0)
    tensors = [size for layer in setup.model.layers for size in layer.tensors]
    if fw.sub_group_size >= Fraction(setup.model.params, n):
        largest = Fraction(setup.model.params, n)
    else:
        for size in tensors:
            current += Fraction(size, n)
            if current >= fw.sub_group_size:
                largest, current = max(largest, current), Fraction(0)
        largest = max(largest, current)
    about = "" if largest.denominator == 1 else "about "
    elements = f"{about}{units.format_count(int(largest))} elements (sub_group_size = {fw.sub_group_size:,})"
    return (
        Part(
            "optimizer temporaries",
            largest * g,
            f"step() flattens one sub-group's gradients, {elements}, at {g} B each",
        ),
        Part(
            "fp32 gradients", largest * FP32, f"then casts them to fp32 for the optimizer, at {FP32} B each"
        ),
    )
