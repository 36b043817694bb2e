"""Why stage 3 holds each weight matrix where it does, around the turn from the forward to the backward pass.

`ds_traffic.stage3_walk` gives what DeepSpeed's coordinator gathers and frees, module by module. After a
matrix's forward use, DeepSpeed keeps it gathered for the backward pass in two cases: its backward use lies
within `max_reuse_distance` elements of uses ahead (the *reuse horizon*), or the prefetcher's walk
has already passed that use (the *reach*). Otherwise the matrix is freed, and gathered again for the
backward pass: sometimes early enough that it is back before the loss runs. `lookahead` gives each matrix's
uses, its held stretches, its reach and horizon at the decision, and so the reason; `present.lookahead_figure`
draws it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import accumulate

from .. import checks
from . import ds_scale, ds_traffic

#: Why a matrix is held as the loss runs (or that it is not), in the order the figure's legend lists them.
WHY = ("reuse distance", "walk", "fetched back", "not held")
DEFAULTS = ds_scale.Knobs()  #: DeepSpeed's default knobs


@dataclass(frozen=True)
class Matrix:
    """One gathered tensor (a weight matrix, at DeepSpeed's default persistence threshold), around the turn.
    Places are positions in `ds_traffic.trace`."""

    tensor: int  #: flat index among the sharded tensors, in forward order
    module: int  #: its module's index in the modules given, in forward order
    size: int  #: elements
    forward: int  #: its forward use
    backward: int  #: its backward use
    reach: int  #: the farthest use the prefetcher's walk had reached when its forward use ended
    horizon: int  #: the farthest use within `max_reuse_distance` elements of uses after its forward use
    held: tuple[tuple[int, int], ...]  #: (gathered at, released after) for each stretch it is whole
    why: str  #: one of `WHY`: why it is gathered as the loss runs


@dataclass(frozen=True)
class Lookahead:
    """A step's gathered weights around the turn, by DeepSpeed's rules."""

    matrices: tuple[Matrix, ...]  #: the chosen modules' sharded tensors, in forward order
    totals: tuple[int, ...]  #: elements gathered (all modules) while each entry of `trace` runs
    starts: tuple[int, ...]  #: elements gathered as each entry's walk starts: own gathers in, no prefetch
    loss: int  #: the loss's place in `trace`
    cap: int  #: `max_live_parameters`
    names: Mapping[int, str] = field(default_factory=dict)  #: a module's short name, by its index

    def name(self, module: int) -> str:
        """`module`'s short name: from `names`, else "module k"."""
        return self.names.get(module, f"module {module}")

    def at_loss(self, why: str | None = None) -> int:
        """Elements of the chosen modules gathered as the loss runs; with `why`, only those held for it."""
        if why is not None:
            checks.choice("why", why, WHY[:3])
        return sum(m.size for m in self.matrices if m.why != "not held" and why in (None, m.why))


def _why(keeps: tuple[bool, bool], at_loss: bool) -> str:
    """Why a matrix is gathered as the loss runs, from whether the reuse horizon and the reach kept it."""
    by_distance, by_reach = keeps
    if by_distance or by_reach:
        return WHY[0] if by_distance else WHY[1]
    return WHY[2] if at_loss else WHY[3]


def lookahead(
    modules=None,
    knobs: ds_scale.Knobs = DEFAULTS,
    *,
    threshold: int = 100_000,
    first: int = 0,
    names: Mapping[int, str] | None = None,
    smallest: int = 0,
) -> Lookahead:
    """Every matrix of `modules[first:]` (default: the 7.5 B model; pass `first` to keep the last blocks),
    its uses and held stretches, and why it is gathered as the loss runs, under `knobs` and DeepSpeed's
    persistence `threshold` (tensors of up to that many elements are never gathered); `names` gives modules
    short names for the figure; with `smallest`, only tensors over that many elements are kept (the
    totals still count every tensor)."""
    big, held = ds_scale.sharded_held(modules, knobs, threshold)
    checks.whole("first", first, low=0, high=len(big) - 1)
    checks.whole("smallest", smallest, low=0, high=10**15)
    walk = ds_traffic.stage3_walk(
        big, knobs.prefetch_bucket_size, knobs.max_live_parameters, knobs.max_reuse_distance
    )
    loss = ds_traffic.loss_entry(len(big))
    matrices = _matrices(big, walk, knobs.max_reuse_distance, held[loss])
    return Lookahead(
        tuple(m for m in matrices if m.module >= first and m.size > smallest),
        _totals(big, held),
        tuple(v.gathered for v in walk),
        loss,
        knobs.max_live_parameters,
        dict(names or {}),
    )


def totals(modules=None, knobs: ds_scale.Knobs = DEFAULTS, *, threshold: int = 100_000) -> tuple[int, ...]:
    """Weight elements stage 3 holds gathered (all modules) while each entry of `ds_traffic.trace` runs, under
    `knobs` and the persistence `threshold` (default: the 7.5 B model at DeepSpeed's defaults); the same as
    `lookahead(...).totals`, without working out each matrix's reasons."""
    return _totals(*ds_scale.sharded_held(modules, knobs, threshold))


def _totals(big, held) -> tuple[int, ...]:
    """Elements gathered at each entry: the sizes of the tensors `held` there (flat indices into `big`)."""
    sizes = [n for m in big for n in m]
    return tuple(sum(sizes[i] for i in h) for h in held)


def _matrices(big, walk, reuse: int, at_loss: frozenset[int]) -> list[Matrix]:
    """Every sharded tensor of `big` with its uses, stretches, horizon and reach, and why it is gathered as
    the loss runs (`at_loss`: the tensors gathered then)."""
    order, sizes = ds_traffic.trace(big), [n for m in big for n in m]
    reach = list(accumulate((max((s for _, s in v.looked), default=-1) for v in walk), max))
    spans: dict[int, list[tuple[int, int]]] = {}
    for tensor, gathered, released, _ in ds_traffic.stage3_stretches(walk):
        spans.setdefault(tensor, []).append((gathered, released))
    owners = [(module, size) for module, tensors in enumerate(big) for size in tensors]
    out = []
    for index, (module, size) in enumerate(owners):
        forward, backward = ds_traffic.forward_entry(module), ds_traffic.backward_entry(len(big), module)
        horizon = ds_traffic.reuse_horizon(order, forward + 1, sizes, reuse)
        why = _why((backward <= horizon, backward <= reach[forward]), index in at_loss)
        out.append(
            Matrix(index, module, size, forward, backward, reach[forward], horizon, tuple(spans[index]), why)
        )
    return out


#: The modules of one `ds_scale.gpt_modules` block, in order.
BLOCK_PARTS = ("norm 1", "qkv", "proj", "norm 2", "fc1", "fc2")


def gpt_names(blocks: int, start: int = 1) -> dict[int, str]:
    """A short name for each module of a `blocks`-block GPT as `ds_scale.gpt_modules` lists it, and for an
    output layer after it ("28 fc1" is block 28's first MLP matrix, counting blocks from `start`)."""
    checks.whole("blocks", blocks, low=1, high=10_000)
    checks.whole("start", start, low=0, high=1)
    parts = {
        1 + 6 * b + k: f"{b + start} {part}" for b in range(blocks) for k, part in enumerate(BLOCK_PARTS)
    }
    return {0: "embedding", **parts, 1 + 6 * blocks: "output layer"}
