"""What the package predicts each rank holds and sends, framework by framework, padding included. No torch.

Three ways of splitting show up in real code, and each needs its own count:
- the paper's even split, Ψ/N per rank (`memory.per_gpu`);
- ZeroRedundancyOptimizer's: whole parameters, largest first, each to the rank with the least so far;
- FSDP2's: every parameter cut along its first dimension into chunks of ceil(rows/N) rows. The
  parameter and gradient shards sit in buffers padded to that size on every rank; the optimizer
  state is created like the unpadded local shard, so the last ranks can hold less of it.
"""

from __future__ import annotations

from math import prod

from .. import memory
from ..recipes import FP32_ADAM
from ..stages import Stage

FP32, BF16 = 4, 2
#: Collectives as the paper counts them: an all-reduce of n elements sends 2n, the others n. A reduce
#: to one rank costs what that rank's share of a reduce-scatter costs: n.
PAPER_MULTIPLE = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1, "broadcast": 1, "reduce": 1}
#: The lab's model: layer widths chosen so that 2 and 4 ranks do not divide every tensor evenly.
WIDTHS = (13, 30, 30, 5)


def shapes(widths: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Parameter shapes of an MLP with these layer widths: a (out, in) weight and an (out,) bias per layer."""
    out = []
    for a, b in zip(widths, widths[1:]):
        out += [(b, a), (b,)]
    return out


def numel(shape: tuple[int, ...]) -> int:
    """Elements in a tensor of this shape."""
    return prod(shape)


def param_count(widths: tuple[int, ...] = WIDTHS) -> int:
    """Ψ for an MLP with these widths (1,505 for the lab's model)."""
    return sum(numel(s) for s in shapes(widths))


def chunk_rows(rows: int, gpus: int, rank: int) -> int:
    """Rows `rank` gets when torch.chunk cuts `rows` into `gpus` pieces of ceil(rows/gpus)."""
    size = -(-rows // gpus)
    return max(0, min(size, rows - rank * size))


def fsdp_padded(shape: tuple[int, ...], gpus: int) -> int:
    """Elements of one rank's padded FSDP2 shard of a parameter: ceil(rows/N) rows."""
    return -(-shape[0] // gpus) * numel(shape[1:])


def zero_redundancy_owner(param_shapes: list[tuple[int, ...]], gpus: int) -> list[int]:
    """The rank that owns each parameter's optimizer state, by ZeroRedundancyOptimizer's greedy rule."""
    sizes, owner = [0] * gpus, [0] * len(param_shapes)
    for index in sorted(range(len(param_shapes)), key=lambda i: numel(param_shapes[i]), reverse=True):
        rank = sizes.index(min(sizes))
        owner[index] = rank
        sizes[rank] += numel(param_shapes[index])
    return owner


def held(mode: str, widths: tuple[int, ...], gpus: int, rank: int) -> dict[str, int]:
    """Predicted bytes this rank holds after the optimizer step, for fp32 Adam (4 + 4 + 8 bytes)."""
    ps, psi = shapes(widths), param_count(widths)
    if mode == "ddp":
        state = memory.per_gpu(psi, gpus, Stage.DP, FP32_ADAM)
        return {"weights": int(state.weights), "gradients": int(state.gradients), "optimizer": int(state.optimizer),
                "step_counters": FP32 * len(ps), "other": 0}
    if mode == "zero_redundancy_optimizer":
        mine = [s for s, r in zip(ps, zero_redundancy_owner(ps, gpus)) if r == rank]
        return {"weights": FP32 * psi, "gradients": FP32 * psi, "optimizer": 2 * FP32 * sum(numel(s) for s in mine),
                "step_counters": FP32 * len(mine), "other": 0}
    padded = sum(fsdp_padded(s, gpus) for s in ps)
    local = sum(chunk_rows(s[0], gpus, rank) * numel(s[1:]) for s in ps)
    return {"weights": FP32 * padded, "gradients": FP32 * padded, "optimizer": 2 * FP32 * local,
            "step_counters": FP32 * len(ps), "other": 0}


def traffic(mode: str, widths: tuple[int, ...], gpus: int) -> dict[str, int]:
    """Predicted elements per collective in one step (full-tensor sizes, before the paper's ×2 for all-reduce)."""
    ps, psi = shapes(widths), param_count(widths)
    if mode == "ddp":
        return {"all_reduce": psi}
    if mode == "zero_redundancy_optimizer":
        return {"all_reduce": psi, "broadcast": psi}  # DDP's all-reduce, then each owner broadcasts its parameters
    if gpus == 1:
        return {}  # FSDP2 skips collectives on a single rank
    padded = gpus * sum(fsdp_padded(s, gpus) for s in ps)
    gathers = 1 if mode == "fsdp_no_reshard" else 2  # resharding after forward means gathering again for backward
    return {"all_gather": gathers * padded, "reduce_scatter": padded}


def paper_stage(mode: str) -> Stage:
    """The ZeRO stage each framework mode is closest to."""
    return {"ddp": Stage.DP, "zero_redundancy_optimizer": Stage.ZERO1, "fsdp_reshard": Stage.ZERO3,
            "fsdp_no_reshard": Stage.ZERO2, "fsdp_bf16": Stage.ZERO3}[mode]


def paper_elements(traffic: dict[str, int]) -> int:
    """Elements sent per rank by the paper's count, from elements per collective."""
    return sum(PAPER_MULTIPLE[op] * n for op, n in traffic.items())
