"""DeepSpeed 0.19.8's collectives in one steady-state step, message by message, from its own rules.

Read from `deepspeed/runtime/zero/stage_1_and_2.py`, `stage3.py` and `partitioned_param_coordinator.py`,
and pinned on real ranks by the lab (tests/test_lab.py). A model is its modules in forward order, each
a tuple of tensor sizes (weight, then bias). Sizes count elements; every function here is pure.

- Gradient buckets (all stages): tensors join a bucket in the order their gradients arrive; a tensor
  that would overflow a non-empty bucket of `reduce_bucket_size` elements sends that bucket first.
  Stage 1 reduces after backward, in forward order; stage 2 during backward, each layer's bias before
  its weight; stage 3 during backward, each layer's weight before its bias.
- Stages 1/2 all-reduce every bucket by default (`use_multi_rank_bucket_allreduce`); without it, each
  bucket is reduced once per rank whose slice of the flat buffer it touches.
- Stage 3 reduce-scatters each bucket, every tensor padded to N pieces, and gathers parameters as its
  coordinator does: a module's missing parameters on demand; then, after each module (those without
  parameters too), a prefetch of the next ones in the recorded order, up to `prefetch` elements and
  while fewer than `max_live` are gathered; after each module, its parameters are released unless
  their next use lies within `reuse` elements of modules ahead, or the prefetcher has already passed it.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from .. import checks, memory
from .step_knobs import DeepSpeed

Modules = Sequence[Sequence[int]]  #: tensor sizes of each module with parameters, in forward order


def padded_flat(psi: int, gpus: int) -> int:
    """Elements of the stage 1/2 flat buffer: Ψ rounded up to a multiple of 2N."""
    return memory.ceil_div(psi, 2 * gpus) * 2 * gpus


def touched_gradients(sizes: list[int], gpus: int, rank: int) -> int:
    """Gradient elements a stage 1/2 rank keeps: each parameter overlapping its slice, whole, and padding."""
    psi, part = sum(sizes), padded_flat(sum(sizes), gpus) // gpus
    low, high = rank * part, (rank + 1) * part
    kept, start = 0, 0
    for n in sizes:
        if start < high and start + n > low:
            kept += n
        start += n
    return kept + max(0, high - max(low, psi))


def pieces(sizes: Sequence[int], gpus: int) -> int:
    """Elements a stage 3 collective moves for these tensors: each padded to N pieces of ⌈n/N⌉."""
    return gpus * sum(memory.ceil_div(n, gpus) for n in sizes)


def buckets(order: Sequence[int], sizes: Sequence[int], bucket: int) -> list[list[int]]:
    """Tensor indices in `order`, grouped into gradient buckets of at most `bucket` elements."""
    out: list[list[int]] = [[]]
    for index in order:
        if out[-1] and sum(sizes[i] for i in out[-1]) + sizes[index] > bucket:
            out.append([])
        out[-1].append(index)
    return [group for group in out if group]


def gradient_order(modules: Modules, stage: int) -> list[int]:
    """Indices of the flat tensors (forward order) in the order their gradients reach the buckets."""
    starts = [sum(len(m) for m in modules[:i]) for i in range(len(modules))]
    if stage == 1:
        return list(range(sum(len(m) for m in modules)))
    if stage == 2:
        return [
            starts[i] + j for i in reversed(range(len(modules))) for j in reversed(range(len(modules[i])))
        ]
    return [starts[i] + j for i in reversed(range(len(modules))) for j in range(len(modules[i]))]


def owner_reduces(group: Sequence[int], sizes: Sequence[int], gpus: int) -> list[int]:
    """Elements a bucket reduces to each rank whose slice of the flat buffer it touches (padding left out)."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    part = padded_flat(sum(sizes), gpus) // gpus
    out = []
    for rank in range(gpus):
        low, high = rank * part, (rank + 1) * part
        out.append(sum(max(0, min(high, starts[i] + sizes[i]) - max(low, starts[i])) for i in group))
    return [n for n in out if n > 0]


def stage12_reduces(modules: Modules, stage: int, gpus: int, bucket: int, all_reduce: bool) -> list[tuple]:
    """Stage 1/2 gradient messages, (collective, elements): an all-reduce per bucket, or owners' reduces."""
    sizes = [n for m in modules for n in m]
    groups = buckets(gradient_order(modules, stage), sizes, bucket)
    if all_reduce:
        return [("all_reduce", sum(sizes[i] for i in g)) for g in groups]
    return [("reduce", n) for g in groups for n in owner_reduces(g, sizes, gpus)]


def stage3_reduce_scatters(modules: Modules, gpus: int, bucket: int) -> list[int]:
    """Elements of each stage 3 reduce-scatter: one per gradient bucket, every tensor padded to N pieces."""
    sizes = [n for m in modules for n in m]
    return [pieces([sizes[i] for i in g], gpus) for g in buckets(gradient_order(modules, 3), sizes, bucket)]


def trace(modules: Modules) -> list[tuple[int, ...]]:
    """Flat tensor indices each module uses, in the order a step runs them: the model's own (parameter-free)
    module, then each module and a parameter-free activation after each but the last; backward in reverse."""
    flat, start = [], 0
    for m in modules:
        flat.append(tuple(range(start, start + len(m))))
        start += len(m)
    forward: list[tuple[int, ...]] = [()]
    for i, used in enumerate(flat):
        forward += [used] + ([()] if i < len(flat) - 1 else [])
    return forward + [()] + forward[:0:-1]


def loss_entry(count: int) -> int:
    """`trace`'s position of the parameter-free entry between the passes (where the loss runs), for a model of
    `count` modules with parameters."""
    return 2 * count


def forward_entry(module: int) -> int:
    """`trace`'s position of module `module`'s forward use (0 is the first module in forward order)."""
    return 1 + 2 * module


def backward_entry(count: int, module: int) -> int:
    """`trace`'s position of module `module`'s backward use (0 is the first module in forward order)."""
    return loss_entry(count) + 1 + 2 * (count - 1 - module)


def _prefetch(queue: deque, live: set, sizes, seen: dict, room: int) -> tuple[list[int], list[tuple]]:
    """Pop the uses ahead until `room` elements not yet gathered are found; mark how far it looked.
    Returns the tensors to gather and the (tensor, step) uses it walked past."""
    chosen, numel, looked = [], 0, []
    while queue and numel < room:
        index, step = queue.popleft()
        looked.append((index, step))
        if index not in live and index not in chosen:
            chosen.append(index)
            numel += sizes[index]
        seen[index] = max(seen[index], step)
    return chosen, looked


@dataclass(frozen=True)
class Visit:
    """What stage 3 does around one module of a steady-state step (`trace`'s entry at `step`)."""

    step: int  #: the module's place in `trace`
    used: tuple[int, ...]  #: tensor indices the module uses (none for a parameter-free module)
    on_demand: tuple[int, ...]  #: gathered as it runs, because they were not gathered yet
    prefetched: tuple[int, ...]  #: gathered after it runs, for uses ahead
    room: int  #: elements it may prefetch: the prefetch bucket, or less to stay under `max_live`
    looked: tuple[tuple[int, int], ...]  #: (tensor, step) of every use ahead the prefetcher walked past
    passed: tuple[int, ...]  #: used tensors kept as the prefetcher already walked past their next use
    released: tuple[int, ...]  #: used tensors freed after it runs
    gathered: int = 0  #: elements gathered as its walk starts, its own on-demand gathers included
    prefetch_done: int = 0  #: elements gathered once its prefetch has run, before its releases


def stage3_walk(modules: Modules, prefetch: int, max_live: int, reuse: int) -> list[Visit]:
    """Stage 3's gathers and releases in a steady-state step, module by module, in `trace` order."""
    sizes, order = [n for m in modules for n in m], trace(modules)
    queue = deque((index, step) for step, used in enumerate(order) for index in used)
    seen: dict[int, int] = defaultdict(lambda: -(10**18))  # the latest use the prefetcher looked at
    live: set[int] = set()
    out: list[Visit] = []
    for step, used in enumerate(order):
        missing = tuple(i for i in used if i not in live)
        for _ in [i for i in used if seen[i] < step]:  # this module's uses leave the queue
            index, at = queue.popleft()
            seen[index] = at
        live.update(missing)
        gathered = sum(sizes[i] for i in live)
        room = min(max_live - gathered, prefetch) if prefetch > 0 else 0
        chosen, looked = _prefetch(queue, live, sizes, seen, room) if room > 0 else ([], [])
        live.update(chosen)
        done = gathered + sum(sizes[i] for i in chosen)
        released = _released(order, used, step + 1, seen, sizes, reuse)
        live -= released
        passed = tuple(i for i in used if seen[i] > step)
        out.append(
            Visit(
                step,
                used,
                missing,
                tuple(chosen),
                max(room, 0),
                tuple(looked),
                passed,
                tuple(sorted(released)),
                gathered,
                done,
            )
        )
    return out


def stage3_gathers(modules: Modules, prefetch: int, max_live: int, reuse: int) -> list[list[int]]:
    """The tensor indices each stage 3 all-gather of a steady-state step brings in, in order."""
    walk = stage3_walk(modules, prefetch, max_live, reuse)
    return [list(g) for v in walk for g in (v.on_demand, v.prefetched) if g]


def stage3_held(modules: Modules, prefetch: int, max_live: int, reuse: int) -> list[frozenset[int]]:
    """The tensors (indices into `modules`' tensors, flattened) stage 3 holds gathered while each entry of
    `trace` runs: gathered for it or prefetched around it, and not yet released."""
    live: set[int] = set()
    out = []
    for visit in stage3_walk(modules, prefetch, max_live, reuse):
        live |= {*visit.on_demand, *visit.prefetched}
        out.append(frozenset(live))
        live -= set(visit.released)
    return out


def stage3_stretches(walk: Sequence[Visit]) -> list[tuple[int, int, int, bool]]:
    """Every stretch in which a tensor is whole in a steady-state `walk` (`stage3_walk`), in the walk's order:
    (tensor, the module at which it was gathered, the module after which it was freed, whether the prefetcher
    gathered it ahead of its use)."""
    start: dict[int, tuple[int, bool]] = {}
    out = []
    for v in walk:
        start |= {i: (v.step, False) for i in v.on_demand} | {i: (v.step, True) for i in v.prefetched}
        for i in v.released:
            gathered, ahead = start.pop(i)
            out.append((i, gathered, v.step, ahead))
    if start:
        raise ValueError(f"tensors {sorted(start)} are still gathered at the end of the step")
    return out


def _released(order, used, step: int, seen: dict, sizes, reuse: int) -> set[int]:
    """A module's tensors freed after it runs: none used within `reuse` elements ahead or prefetched."""
    near = {i for ahead in order[step : reuse_horizon(order, step, sizes, reuse) + 1] for i in ahead}
    return {i for i in used if seen[i] <= step} - near


def reuse_horizon(order, start: int, sizes, reuse: int) -> int:
    """The last place of `order` (from `start` on) whose uses lie within `reuse` elements: the uses that a
    module finishing just before `start` counts as near enough to keep its tensors for."""
    last, traversed = start - 1, 0
    for place in range(start, len(order)):
        if traversed >= reuse:
            break
        last, traversed = place, traversed + sum(sizes[i] for i in order[place])
    return last


#: The DeepSpeed knobs `knob_collectives` reads: they decide how a step's traffic is cut into collectives.
KNOBS = (
    "reduce_bucket_size",
    "prefetch_bucket_size",
    "max_live_parameters",
    "max_reuse_distance",
    "param_persistence_threshold",
)


@dataclass(frozen=True)
class Collective:
    """One collective of a steady-state step: the tensors it carries and the elements in its whole buffer."""

    kind: str  #: "all_reduce" (stage 1/2 gradients) or "all_gather" (stage 3 weights)
    tensors: tuple[int, ...]  #: sizes of the tensors it carries, in elements
    elements: int  #: elements in its whole buffer (stage 3 pads each tensor to N pieces)


def knob_collectives(modules: Modules, gpus: int, fw: DeepSpeed) -> tuple[Collective, ...]:
    """The collectives that `fw`'s bucket and gather knobs cut in one step on `gpus` ranks: stage 1/2's
    gradient all-reduces, one per bucket, or stage 3's weight all-gathers (tensors above the threshold)."""
    if not isinstance(fw, DeepSpeed):
        raise TypeError(f"fw must be a planning DeepSpeed, e.g. DeepSpeed(stage=3), got {type(fw).__name__}")
    checks.whole("gpus", gpus, low=1, high=1_000_000)
    sizes = [n for m in modules for n in m]
    if fw.stage in (1, 2):
        groups = buckets(gradient_order(modules, int(fw.stage)), sizes, fw.reduce_bucket_size)
        carried = [tuple(sizes[i] for i in g) for g in groups]
        return tuple(Collective("all_reduce", c, sum(c)) for c in carried)
    big = [[n for n in m if n > fw.param_persistence_threshold] for m in modules]  # the rest stays whole
    flat = [n for m in big for n in m]
    knobs = (fw.prefetch_bucket_size, fw.max_live_parameters, fw.max_reuse_distance)
    carried = [tuple(flat[i] for i in g) for g in stage3_gathers(big, *knobs)]
    return tuple(Collective("all_gather", c, pieces(c, gpus)) for c in carried)
