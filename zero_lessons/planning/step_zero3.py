"""How DeepSpeed 0.19.8's ZeRO-3 holds memory over a step, with its parameter coordinator replayed.

Stage 3 keeps a 1/N piece of every weight, a partition-sized gradient buffer and one bucket of
`reduce_bucket_size` elements, all allocated at start-up and kept (`deepspeed/runtime/zero/stage3.py`);
its optimizer step casts one sub-group (`sub_group_size` elements) at a time to fp32. On one rank
it gathers nothing: each parameter is a view of its own piece.

Which weights are gathered: the coordinator (`partitioned_param_coordinator.py`) records the order
in which modules run in forward and backward, then, from the second step on, walks that trace:
- before a module runs, it all-gathers that module's tensors that are not gathered yet;
- then it prefetches the next tensors in the trace, up to `prefetch_bucket_size` elements, and no
  more than `max_live_parameters` minus what is already gathered. Tensors it passes that are already
  gathered cost nothing, but it marks their later use as seen;
- after the module runs, it releases the module's tensors, except those whose later use the
  prefetcher has already passed, and those the modules within the next `max_reuse_distance`
  elements of the trace use again.
Tensors of at most `param_persistence_threshold` elements are never partitioned, so never gathered.

Here each layer is one module, and the trace is the forward pass, then the backward pass in reverse.
Real models nest modules (a block's attention and MLP are fetched apart), which makes prefetching finer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from fractions import Fraction

from .. import units
from .step_deepspeed import buckets, hook_gradients
from .step_knobs import DeepSpeed
from .step_model import Model
from .step_parts import Part
from .step_rules import FP32, Moments, Parts, Setup, per, span

_NEVER = -(10**18)  #: "last use seen at" for a tensor the coordinator has not met


@dataclass(frozen=True)
class Gathered:
    """What ZeRO-3 holds gathered while one step of the trace runs, in elements, by why it is there."""

    layer: int  #: index of the layer this step runs (-1: after the last step)
    own: int  #: elements of the layer's own tensors, gathered for this use
    prefetched: int  #: elements gathered ahead of their use
    prefetched_layers: tuple[int, ...]  #: layers those tensors belong to
    kept: int  #: elements kept gathered from an earlier use
    kept_layers: tuple[int, ...]  #: layers those tensors belong to


def trace_order(model: Model) -> list[int]:
    """Layer indices in the order the trace runs them: forward, then backward in reverse."""
    n = len(model.layers)
    return list(range(n)) + list(reversed(range(n)))


def replay(model: Model, fw: DeepSpeed) -> tuple[tuple[Gathered, ...], Gathered]:
    """What is gathered during each step of the trace, and what is still gathered when backward ends.

    Tensors kept whole never enter the trace here: the coordinator passes them at no cost and never
    gathers or releases them, so leaving them out changes nothing but the run time.
    """
    sizes, owner, ids = [], [], []
    for i, layer in enumerate(model.layers):
        mine = [n for n in layer.tensors if n > fw.param_persistence_threshold]
        ids.append(range(len(sizes), len(sizes) + len(mine)))
        sizes += mine
        owner += [i] * len(mine)
    totals = [layer.params for layer in model.layers]  # the reuse walk counts every tensor, whole ones too
    order = trace_order(model)
    queue = deque((t, s) for s, i in enumerate(order) for t in ids[i])
    gathered, prefetched, seen = set(), set(), [_NEVER] * len(sizes)
    live, steps = 0, []
    for s, i in enumerate(order):
        mine = ids[i]
        fetch = [t for t in mine if t not in gathered]
        gathered.update(fetch)
        live += sum(sizes[t] for t in fetch)
        prefetched.difference_update(mine)
        for _ in range(sum(1 for t in mine if seen[t] < s)):  # the coordinator pops this step's own entries
            if queue:
                t, step = queue.popleft()
                seen[t] = step
        live += _prefetch(queue, fw, live, sizes, gathered, prefetched, seen)
        steps.append(_snapshot(i, mine, gathered, prefetched, sizes, owner))
        live -= _release(s, order, mine, fw, totals, ids, seen, gathered, sizes)
    return tuple(steps), _snapshot(-1, (), gathered, prefetched, sizes, owner)


def _prefetch(queue, fw, live, sizes, gathered, prefetched, seen) -> int:
    """Gather the next tensors of the trace within the prefetch budget; return how many elements it added."""
    if fw.prefetch_bucket_size == 0:
        return 0
    budget, added = min(fw.max_live_parameters - live, fw.prefetch_bucket_size), 0
    while queue and added < budget:
        t, step = queue.popleft()
        seen[t] = max(seen[t], step)
        if t not in gathered:
            gathered.add(t)
            prefetched.add(t)
            added += sizes[t]
    return added


def _release(s, order, mine, fw, totals, ids, seen, gathered, sizes) -> int:
    """Release the layer's tensors after step `s` unless reuse keeps them; return the elements freed."""
    step = s + 1
    release = {t for t in mine if seen[t] <= step}
    travelled = 0
    for j in order[step:]:
        if travelled >= fw.max_reuse_distance or not release:
            break
        release.difference_update(ids[j])
        travelled += totals[j]
    release &= gathered
    gathered.difference_update(release)
    return sum(sizes[t] for t in release)


def _snapshot(layer, mine, gathered, prefetched, sizes, owner) -> Gathered:
    """Sort what is gathered into the layer's own tensors, tensors fetched ahead, and tensors kept."""
    own = [t for t in mine if t in gathered]
    ahead = prefetched & gathered
    kept = gathered - ahead - set(own)
    return Gathered(
        layer,
        sum(sizes[t] for t in own),
        sum(sizes[t] for t in ahead),
        tuple(sorted({owner[t] for t in ahead})),
        sum(sizes[t] for t in kept),
        tuple(sorted({owner[t] for t in kept})),
    )


def zero3(setup: Setup, fw: DeepSpeed) -> Moments:
    """Stage 3: pieces of everything, a kept bucket, and weights gathered as the coordinator decides."""
    held = _pieces(setup, fw) + buckets(setup, fw, "keeps, from start-up,")
    steps, leftover = replay(setup.model, fw)
    count = len(setup.model.layers)
    gathered = [
        _gathered(setup, step, "backward" if s >= count else "forward") for s, step in enumerate(steps)
    ]
    waiting, last = hook_gradients(setup, fw)
    forward = tuple(held + gathered[i] for i in range(count))
    backward = tuple(held + gathered[2 * count - 1 - i] + (waiting[i],) for i in range(count))
    reduction = held + _gathered(setup, leftover, "backward") + last
    return Moments(held, forward, backward, reduction, held, held + _cast(setup, fw), held)


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
        Part("weights", psi * w / n, f"ZeRO-3 keeps a 1/{n} piece of every weight: {per(w, psi, n)}"),
        Part(
            "weights",
            sum(whole) * w if n > 1 else 0,
            f"{threshold} elements whole as well: {per(w, sum(whole))}",
        ),
        Part(
            "gradients",
            psi * g / n,
            f"the gradient partition buffer, allocated at start-up: {per(g, psi, n)}",
        ),
        Part(
            "optimizer",
            psi * k / n,
            f"fp32 master weights and moments for the 1/{n} partition: {per(k, psi, n)}",
        ),
    )


def _gathered(setup: Setup, step: Gathered, which: str) -> Parts:
    """Parts for what ZeRO-3 holds gathered at one step (nothing on one rank)."""
    if setup.gpus == 1:
        return ()
    layers, w = setup.model.layers, setup.w
    names = {
        key: span(tuple(layers[j] for j in idx)) if idx else ""
        for key, idx in (("ahead", step.prefetched_layers), ("kept", step.kept_layers))
    }
    own = layers[step.layer].name if step.layer >= 0 else ""
    return (
        Part(
            "gathered parameters",
            step.own * w,
            f"{own}'s weights, gathered for its {which}: {per(w, step.own)}",
        ),
        Part(
            "gathered parameters",
            step.prefetched * w,
            f"prefetched ahead of use (prefetch_bucket_size): "
            f"tensors of {names['ahead']}: {per(w, step.prefetched)}",
        ),
        Part(
            "gathered parameters",
            step.kept * w,
            f"kept from an earlier use (max_reuse_distance, or a use the "
            f"prefetcher passed): tensors of {names['kept']}: {per(w, step.kept)}",
        ),
    )


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
