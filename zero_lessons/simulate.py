"""Brute force: really split a small model's arrays across simulated ranks and count the bytes.

This is the check on the closed form. Nothing here uses `memory.per_gpu`; each rank gets
real numpy arrays, sliced from one flat buffer per state the way DeepSpeed and FSDP do,
and we add up their `.nbytes`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import checks
from .recipes import MIXED_ADAM, Recipe, get
from .stages import Stage, as_stage

#: numpy dtype for each byte width a part may have.
_DTYPES = {1: np.int8, 2: np.float16, 4: np.float32, 8: np.float64}

#: A tiny two-layer MLP with biases: (784·64 + 64) + (64·10 + 10) = 50,890 parameters.
TINY_MLP: tuple[tuple[int, ...], ...] = ((784, 64), (64,), (64, 10), (10,))


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
    """Number of parameters in a model given by its tensor shapes."""
    return sum(int(np.prod(shape)) for shape in shapes)


def shard(flat: np.ndarray, gpus: int, rank: int) -> np.ndarray:
    """Rank `rank`'s slice of `flat`, padded with zeros to a multiple of `gpus` first."""
    size = -(-flat.size // gpus)
    padded = np.zeros(size * gpus, dtype=flat.dtype)
    padded[: flat.size] = flat
    return padded[rank * size: (rank + 1) * size].copy()


def split_model(shapes: tuple[tuple[int, ...], ...], gpus: int, stage: Stage | int | str,
                recipe: Recipe | str = MIXED_ADAM, seed: int = 0) -> list[Rank]:
    """Build every rank's arrays: a full copy of replicated parts, a flat shard of partitioned ones."""
    gpus, stage, recipe = checks.gpus(gpus), as_stage(stage), get(recipe)
    rng = np.random.default_rng(seed)
    full = {p.label: rng.standard_normal(count_params(shapes)).astype(_dtype(p.nbytes)) for p in recipe.parts}
    ranks = []
    for r in range(gpus):
        arrays = {p.label: shard(full[p.label], gpus, r) if stage.partitions(p.state) else full[p.label].copy()
                  for p in recipe.parts}
        ranks.append(Rank(r, arrays, {p.label: p.state for p in recipe.parts}))
    return ranks


def _dtype(nbytes) -> type:
    """The numpy dtype that stores `nbytes` per element."""
    if nbytes not in _DTYPES:
        raise ValueError(f"the simulation needs whole-byte parts of 1, 2, 4 or 8 bytes, got {nbytes}")
    return _DTYPES[nbytes]


def ring_all_reduce(buffers: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Sum `buffers` across ranks with a ring: a reduce-scatter, then an all-gather.

    Returns every rank's result and the elements each rank sent. Each phase takes N−1 steps,
    and in each step every rank passes one chunk of Ψ/N elements to its right-hand neighbour.
    """
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
