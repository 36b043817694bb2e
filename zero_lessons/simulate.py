"""Brute force: really split a small model's arrays across simulated ranks and count the bytes.

This is the check on the closed form. Nothing here uses `memory.per_gpu`; each rank gets
real numpy arrays, sliced from one flat buffer per state padded at its end until N divides it
(the paper's even split; the labs show how DeepSpeed and FSDP2 really cut), and we add up their `.nbytes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import checks, memory
from .recipes import MIXED_ADAM, RecipeLike, get
from .stages import StageLike, as_stage

#: numpy dtype for each byte width a part may have.
_DTYPES = {1: np.int8, 2: np.float16, 4: np.float32, 8: np.float64}

#: A tiny two-layer MLP with biases: (784·64 + 64) + (64·10 + 10) = 50,890 parameters.
TINY_MLP: tuple[tuple[int, ...], ...] = ((784, 64), (64,), (64, 10), (10,))
#: Most simulated ranks, and most elements all of them may hold together: real arrays live in this process.
MAX_RANKS, MAX_ELEMENTS = 64, 10**7


@dataclass(frozen=True)
class Rank:
    """What one simulated rank holds: one numpy array per part of the recipe."""

    rank: int  #: the rank's index, 0 to N−1
    arrays: dict[str, np.ndarray]  #: part label -> the array this rank keeps for it
    states: dict[str, str]  #: part label -> "weights", "gradients" or "optimizer"

    def nbytes(self, state: str | None = None) -> int:
        """Bytes this rank holds, for one state or for all of them."""
        return sum(a.nbytes for label, a in self.arrays.items() if state in (None, self.states[label]))


def count_params(shapes: tuple[tuple[int, ...], ...]) -> int:
    """Number of parameters in a model given by its tensor shapes (at most 10,000,000: they become arrays)."""
    if not isinstance(shapes, (tuple, list)) or not shapes:
        raise TypeError(
            f"shapes must be a non-empty tuple of tensor shapes such as ((784, 64), (64,)), "
            f"got {checks.kind(shapes)}"
        )
    total = 0
    for shape in shapes:
        checks.instance("each shape", shape, (tuple, list), "a tuple of whole numbers such as (784, 64)")
        sizes = [checks.whole("each dimension", size, high=MAX_ELEMENTS) for size in shape]
        total += math.prod(sizes)  # exact: numpy's prod would wrap around past 2**63
        if total > MAX_ELEMENTS:
            raise ValueError(f"shapes must hold at most {MAX_ELEMENTS:,} parameters in all, got more")
    return total


def shard(flat: np.ndarray, gpus: int, rank: int) -> np.ndarray:
    """Rank `rank`'s slice of `flat`, padded with zeros to a multiple of `gpus` first."""
    checks.instance("flat", flat, np.ndarray, "a numpy array")
    gpus = checks.whole("gpus", gpus, high=MAX_RANKS)
    rank = checks.whole("rank", rank, low=0, high=gpus - 1)
    if flat.ndim != 1 or flat.size > MAX_ELEMENTS:
        raise ValueError(
            f"flat must be a 1-D array of at most {MAX_ELEMENTS:,} elements, got shape {flat.shape}"
        )
    size = memory.ceil_div(flat.size, gpus)
    padded = np.zeros(size * gpus, dtype=flat.dtype)
    padded[: flat.size] = flat
    return padded[rank * size : (rank + 1) * size].copy()


def split_model(
    shapes: tuple[tuple[int, ...], ...],
    gpus: int,
    stage: StageLike,
    recipe: RecipeLike = MIXED_ADAM,
    seed: int = 0,
) -> list[Rank]:
    """Build every rank's arrays: a full copy of replicated parts, a flat shard of partitioned ones."""
    gpus, stage, recipe = checks.whole("gpus", gpus, high=MAX_RANKS), as_stage(stage), get(recipe)
    params = count_params(shapes)
    if params * gpus > MAX_ELEMENTS:
        raise ValueError(
            f"gpus × parameters must be at most {MAX_ELEMENTS:,} simulated elements, got {gpus} × {params:,}"
        )
    for part in recipe.parts:
        _dtype(part.nbytes)  # refuse an odd width before any array is made
    rng = np.random.default_rng(checks.whole("seed", seed, low=0))
    full = {p.label: rng.standard_normal(params).astype(_dtype(p.nbytes)) for p in recipe.parts}
    ranks = []
    for r in range(gpus):
        arrays = {
            p.label: shard(full[p.label], gpus, r) if stage.partitions(p.state) else full[p.label].copy()
            for p in recipe.parts
        }
        ranks.append(Rank(r, arrays, {p.label: p.state for p in recipe.parts}))
    return ranks


def _dtype(nbytes) -> type:
    """The numpy dtype that stores `nbytes` per element."""
    if nbytes not in _DTYPES:
        raise ValueError(
            f"recipe must have whole-byte parts of 1, 2, 4 or 8 bytes for the simulation, got {nbytes}"
        )
    return _DTYPES[nbytes]


def ring_all_reduce(buffers: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Sum `buffers` across ranks with a ring: a reduce-scatter, then an all-gather.

    Returns every rank's result and the elements each rank sent. Each phase takes N−1 steps,
    and in each step every rank passes one chunk of Ψ/N elements to its right-hand neighbour.
    """
    if not isinstance(buffers, (list, tuple)) or not 1 <= len(buffers) <= MAX_RANKS:
        raise ValueError(
            f"buffers must be a list of 1 to {MAX_RANKS} numpy arrays, one per rank, "
            f"got {checks.kind(buffers)}"
        )
    for buffer in buffers:
        checks.instance("each buffer", buffer, np.ndarray, "a numpy array")
        if buffer.shape != buffers[0].shape or buffer.ndim != 1 or buffer.size > MAX_ELEMENTS:
            raise ValueError(
                f"buffers must be 1-D arrays of one size (at most {MAX_ELEMENTS:,}), "
                f"got shapes {buffers[0].shape} and {buffer.shape}"
            )
        if not np.issubdtype(buffer.dtype, np.number):
            raise TypeError(f"buffers must hold numbers, got dtype {buffer.dtype}")
    n = len(buffers)
    chunks = [np.array_split(b.astype(np.float64), n) for b in buffers]
    sent = 0
    for step in range(n - 1):  # reduce-scatter: after it, rank r owns the full sum of chunk (r + 1) % n
        moving = [chunks[r][(r - step) % n].copy() for r in range(n)]
        for r in range(n):
            chunks[(r + 1) % n][(r - step) % n] += moving[r]
        sent += moving[0].size
    for step in range(n - 1):  # all-gather: pass the finished chunks round the ring
        moving = [chunks[r][(r + 1 - step) % n].copy() for r in range(n)]
        for r in range(n):
            chunks[(r + 1) % n][(r + 1 - step) % n] = moving[r]
        sent += moving[0].size
    return [np.concatenate(c) for c in chunks], sent
