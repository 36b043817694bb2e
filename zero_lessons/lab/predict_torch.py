"""What the package predicts each PyTorch rank holds and sends, padding included. No torch.

Three ways of splitting show up in PyTorch, and each needs its own count:
- DDP's: none. Every rank holds everything, as in the paper's data parallelism (`memory.per_gpu`);
- ZeroRedundancyOptimizer's: whole parameters, largest first, each to the rank with the least so far;
- FSDP2's: every parameter cut along its first dimension into chunks of ceil(rows/N) rows. The
  parameter and gradient shards sit in buffers padded to that size on every rank; the optimizer
  state is created like the unpadded local shard, so the last ranks can hold less of it.
"""

from __future__ import annotations

from math import prod

from .. import memory
from .model import MODEL, LabModel, Shape
from .modes import Mode
from .results import Held, Predicted, Traffic

FP32 = 4  #: bytes of an fp32 element: weights, gradients, each Adam moment and Adam's step counter


def chunk_rows(rows: int, gpus: int, rank: int) -> int:
    """Rows `rank` gets when torch.chunk cuts `rows` into `gpus` pieces of ceil(rows/gpus)."""
    size = memory.ceil_div(rows, gpus)
    return max(0, min(size, rows - rank * size))


def fsdp_padded(shape: Shape, gpus: int) -> int:
    """Elements of one rank's padded FSDP2 shard of a parameter: ceil(rows/N) rows."""
    return memory.ceil_div(shape[0], gpus) * prod(shape[1:])


def zero_redundancy_owner(sizes: list[int], gpus: int) -> list[int]:
    """The rank that owns each parameter's optimizer state, by ZeroRedundancyOptimizer's greedy rule."""
    load, owner = [0] * gpus, [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True):
        rank = load.index(min(load))
        owner[index] = rank
        load[rank] += sizes[index]
    return owner


def held(mode: Mode, gpus: int, rank: int, model: LabModel = MODEL) -> Held:
    """Bytes this rank holds after the optimizer step, in fp32 with Adam (4 + 4 + 8 bytes per parameter)."""
    psi, tensors = model.param_count, len(model.shapes)
    if mode.wrapping.wrapper == "ddp":
        state = memory.per_gpu(psi, gpus, mode.stage, mode.recipe)
        return Held(int(state.weights), int(state.gradients), int(state.optimizer), FP32 * tensors, 0)
    if mode.wrapping.wrapper == "zero_redundancy_optimizer":
        mine = [
            n
            for n, owner in zip(model.sizes, zero_redundancy_owner(model.sizes, gpus), strict=True)
            if owner == rank
        ]
        return Held(FP32 * psi, FP32 * psi, 2 * FP32 * sum(mine), FP32 * len(mine), 0)
    padded = sum(fsdp_padded(shape, gpus) for shape in model.shapes)
    local = sum(chunk_rows(shape[0], gpus, rank) * prod(shape[1:]) for shape in model.shapes)
    return Held(FP32 * padded, FP32 * padded, 2 * FP32 * local, FP32 * tensors, 0)


def traffic(mode: Mode, gpus: int, model: LabModel = MODEL) -> Traffic:
    """Elements per collective in one step (full-tensor sizes, before the paper's ×2 for all-reduce)."""
    psi = model.param_count
    if mode.wrapping.wrapper == "ddp":
        return Traffic({"all_reduce": psi})
    if mode.wrapping.wrapper == "zero_redundancy_optimizer":
        return Traffic({"all_reduce": psi, "broadcast": psi})  # DDP's all-reduce, then each owner broadcasts
    if gpus == 1:
        return Traffic({})  # FSDP2 skips collectives on a single rank
    padded = gpus * sum(fsdp_padded(shape, gpus) for shape in model.shapes)
    gathers = (
        2 if mode.wrapping.reshard_after_forward else 1
    )  # resharded after forward: gathered again for backward
    return Traffic({"all_gather": gathers * padded, "reduce_scatter": padded})


def predict(mode: Mode, gpus: int, rank: int, model: LabModel = MODEL) -> Predicted:
    """What one rank of a PyTorch mode holds and sends."""
    return Predicted(held(mode, gpus, rank, model), traffic(mode, gpus, model))
