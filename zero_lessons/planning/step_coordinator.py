"""DeepSpeed 0.19.8's ZeRO-3 parameter coordinator, replayed: which weights are gathered at each step.

The coordinator (`partitioned_param_coordinator.py`) records the order in which modules run in
forward and backward, then, from the second step on, walks that trace:
- before a module runs, it all-gathers that module's tensors that are not gathered yet;
- then it prefetches the next tensors in the trace, up to `prefetch_bucket_size` elements, and no
  more than `max_live_parameters` minus what is already gathered. Tensors it passes that are already
  gathered cost nothing, but it marks their later use as seen;
- after the module runs, it releases the module's tensors, except those whose later use the
  prefetcher has already passed, and those the modules within the next `max_reuse_distance`
  elements of the trace use again.
Each all-gather lands in one flat buffer (`partition_parameters.py`, `_all_gather_dtype`); the first
module to wait on any of its tensors copies every one of them out (`torch.cat` of its pieces), and
the buffer lives until each of its tensors has been waited on. The root module runs first in both
passes: it holds no tensors, but the coordinator prefetches from it.
Tensors of at most `param_persistence_threshold` elements are never partitioned, so never gathered.
`replay` says what is gathered at each step; `walk` says what the coordinator did there, and why.

Here each layer is one module. Real models nest modules (a block's attention and MLP are fetched
apart), which makes prefetching finer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .step_knobs import DeepSpeed
from .step_model import Model

_NEVER = -(10**18)  #: "last use seen at" for a tensor the coordinator has not met


@dataclass(frozen=True)
class Gathered:
    """What ZeRO-3 holds gathered while one step of the trace runs, in elements, by why it is there."""

    layer: int  #: index of the layer this step runs (-1: after the last step)
    own: int  #: elements of the layer's own tensors, gathered for this use
    prefetched: int  #: elements gathered ahead of their use
    kept: int  #: elements kept gathered from an earlier use
    in_flight: int = 0  #: of those gathered, elements not yet copied out of their all-gather buffer
    flat: int = 0  #: elements of the all-gather buffers alive at the step's highest point
    #: (layer, elements) of each tensor prefetched and already copied out of its all-gather buffer
    ready: tuple[tuple[int, int], ...] = ()
    #: (layer, elements) of each tensor prefetched and still only in its all-gather buffer
    waiting: tuple[tuple[int, int], ...] = ()
    kept_tensors: tuple[tuple[int, int], ...] = ()  #: (layer, elements) of each tensor kept


@dataclass(frozen=True)
class Visit:
    """One step of the trace as the coordinator takes it, in (layer, elements) pairs for tensors."""

    layer: int  #: index of the layer that runs (len(layers): the root module, which holds no tensors)
    step: int  #: its position in the trace (`trace_order`)
    fetched: tuple[tuple[int, int], ...]  #: its own tensors not gathered yet, all-gathered now, at use
    prefetched: tuple[tuple[int, int], ...]  #: what the prefetch walk adds, in trace order, in one all-gather
    #: elements the walk may add: prefetch_bucket_size, less if max_live_parameters is nearer (≤ 0: no walk)
    budget: int
    #: (layer, elements, trace step of that use) of each use the walk passed, already gathered (so free)
    passed: tuple[tuple[int, int, int], ...]
    released: tuple[tuple[int, int], ...]  #: tensors freed after the layer ran
    live: int  #: elements gathered once the prefetch walk is done, before the release


@dataclass
class _Fetches:
    """The all-gathers in flight: each one flat buffer, alive until every tensor it brought has been used."""

    pending: list[set] = field(default_factory=list)  #: per all-gather, the tensors it brought not yet used
    size: list[int] = field(default_factory=list)  #: elements of each buffer
    source: dict = field(default_factory=dict)  #: tensor -> the all-gather that last brought it
    copied: set = field(default_factory=set)  #: tensors copied out of their buffer (param.data is their own)

    def gather(self, tensors, sizes) -> None:
        """One all-gather of `tensors` into a new flat buffer."""
        if tensors:
            self.source.update((t, len(self.size)) for t in tensors)
            self.pending.append(set(tensors))
            self.size.append(sum(sizes[t] for t in tensors))

    def alive(self) -> int:
        """Elements of the buffers still alive."""
        return sum(n for n, left in zip(self.size, self.pending, strict=True) if left)

    def use(self, tensors, sizes) -> int:
        """The module waits on its tensors, each one's whole all-gather copied out tensor by tensor.

        Returns the most buffer elements alive beyond the copies made by then: before the wait, every
        buffer (the new copies do not exist yet); during it, a buffer copied out earlier is freed first
        when used up, and those being copied are alive.
        """
        before, waited, new = self.alive(), set(), 0
        for t in tensors:
            g = self.source.get(t)
            if g is None or t not in self.pending[g]:
                continue
            if t not in self.copied:
                waited.add(g)
                brought = {m for m, h in self.source.items() if h == g} - self.copied
                new += sum(sizes[m] for m in brought)
                self.copied |= brought
            self.pending[g].discard(t)
        during = self.alive() + sum(self.size[g] for g in waited if not self.pending[g])
        return max(during, before - new)


def trace_order(model: Model) -> list[int]:
    """Layer indices in the order the trace runs them: the root module (index len(layers), no tensors of its
    own), the forward pass, then the root again and the backward pass in reverse."""
    n = len(model.layers)
    return [n, *range(n), n, *reversed(range(n))]


def replay(model: Model, fw: DeepSpeed) -> tuple[tuple[Gathered, ...], Gathered]:
    """What is gathered during each step of the trace, and what is still gathered when backward ends.

    The root module's steps gather nothing of their own but prefetch; they are not reported, as what
    they gather is still there in the next step. Tensors kept whole never enter the trace here: the
    coordinator passes them at no cost and never gathers or releases them, so leaving them out
    changes nothing but the run time.
    """
    steps, leftover, _ = _run(model, fw)
    return steps, leftover


def walk(model: Model, fw: DeepSpeed) -> tuple[Visit, ...]:
    """Every step of the trace, root module included, as the coordinator takes it: what it gathers at
    use, what its prefetch walk adds and passes, and what it releases."""
    return _run(model, fw)[2]


def _run(model: Model, fw: DeepSpeed) -> tuple[tuple[Gathered, ...], Gathered, tuple[Visit, ...]]:
    """The trace replayed: `replay`'s snapshots, then one `Visit` per step."""
    sizes, owner, ids = _traced(model, fw)
    totals = [layer.params for layer in model.layers] + [0]  # the reuse walk counts every tensor
    order = trace_order(model)
    queue = deque((t, s) for s, i in enumerate(order) for t in ids[i])
    gathered, prefetched, seen, fetches = set(), set(), [_NEVER] * len(sizes), _Fetches()
    live, steps, visits = 0, [], []
    for s, i in enumerate(order):
        mine = ids[i]
        fetch = [t for t in mine if t not in gathered]
        fetches.gather(fetch, sizes)
        gathered.update(fetch)
        live += sum(sizes[t] for t in fetch)
        waiting = fetches.use(mine, sizes)
        prefetched.difference_update(mine)
        for _ in range(sum(1 for t in mine if seen[t] < s)):  # the coordinator pops this step's own entries
            if queue:
                t, step = queue.popleft()
                seen[t] = step
        budget = min(fw.max_live_parameters - live, fw.prefetch_bucket_size)
        ahead, passed = _prefetch(queue, fw, budget, sizes, gathered, prefetched, seen)
        fetches.gather(ahead, sizes)
        live += sum(sizes[t] for t in ahead)
        if i < len(model.layers):
            steps.append(_snapshot(i, mine, gathered, prefetched, sizes, owner, fetches, waiting))
        released = _release(s, order, mine, fw, totals, ids, seen, gathered)
        fetches.copied -= released
        named = [tuple((owner[t], sizes[t]) for t in group) for group in (fetch, ahead, sorted(released))]
        passed = tuple((owner[t], sizes[t], step) for t, step in passed)
        visits.append(Visit(i, s, named[0], named[1], budget, passed, named[2], live))
        live -= sum(sizes[t] for t in released)
    return tuple(steps), _snapshot(-1, (), gathered, prefetched, sizes, owner, fetches, 0), tuple(visits)


def _traced(model: Model, fw: DeepSpeed) -> tuple[list[int], list[int], list[range]]:
    """The tensors the trace gathers: their sizes, the layer owning each, and each layer's ids (root last)."""
    sizes, owner, ids = [], [], []
    for i, layer in enumerate(model.layers):
        mine = [n for n in layer.tensors if n > fw.param_persistence_threshold]
        ids.append(range(len(sizes), len(sizes) + len(mine)))
        sizes += mine
        owner += [i] * len(mine)
    ids.append(range(0))  # the root
    return sizes, owner, ids


def _prefetch(queue, fw, budget, sizes, gathered, prefetched, seen) -> tuple[list, list]:
    """Gather the next tensors of the trace until `budget` elements are added; return the tensors it added,
    and the (tensor, step) uses it walked past already gathered."""
    if fw.prefetch_bucket_size == 0:
        return [], []
    added, ahead, passed = 0, [], []
    while queue and added < budget:
        t, step = queue.popleft()
        seen[t] = max(seen[t], step)
        if t not in gathered:
            gathered.add(t)
            prefetched.add(t)
            ahead.append(t)
            added += sizes[t]
        else:
            passed.append((t, step))
    return ahead, passed


def _release(s, order, mine, fw, totals, ids, seen, gathered) -> set:
    """Release the layer's tensors after step `s` unless reuse keeps them; return the tensors released."""
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
    return release


def _snapshot(layer, mine, gathered, prefetched, sizes, owner, fetches, waiting) -> Gathered:
    """Sort what is gathered into the layer's own tensors, tensors fetched ahead, and tensors kept.

    The step's highest point holds every copied tensor and either the buffers alive while it waited
    (`waiting`) or those alive after it prefetched, whichever is more.
    """
    own = [t for t in mine if t in gathered]
    ahead = prefetched & gathered
    kept = gathered - ahead - set(own)

    def tensors(ids) -> tuple[tuple[int, int], ...]:
        return tuple(sorted((owner[t], sizes[t]) for t in ids))

    return Gathered(
        layer,
        sum(sizes[t] for t in own),
        sum(sizes[t] for t in ahead),
        sum(sizes[t] for t in kept),
        sum(sizes[t] for t in gathered - fetches.copied),
        max(waiting, fetches.alive()),
        tensors(ahead & fetches.copied),
        tensors(ahead - fetches.copied),
        tensors(kept),
    )
