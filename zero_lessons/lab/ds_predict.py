"""What DeepSpeed 0.19.8 holds and sends per rank, in bf16 with Adam, by the rules its code follows. No torch.

This is the paper's 2 + 2 + 12 world: bf16 weights and gradients, fp32 master weights and two fp32
Adam moments. Three layouts show up, and each needs its own count:

- stage 0 keeps one bf16 and one fp32 tensor per parameter, like the paper's plain data parallel;
- stages 1 and 2 flatten every parameter into one bf16 buffer, padded to a multiple of 2N elements
  (4-byte alignment for each of the N partitions), and give rank r the r-th equal slice. After the
  backward pass a rank keeps the gradients of every parameter that *touches* its slice, whole;
- stage 3 cuts every parameter on its own into N flat pieces of ⌈n/N⌉ elements, padded.
"""

from __future__ import annotations

from collections import Counter

from ..recipes import MIXED_ADAM, Recipe
from ..stages import Stage
from .predict import numel, shapes

#: The package recipe DeepSpeed's bf16 + Adam runs follow: 2 + 2 + 12 bytes per parameter.
RECIPE: Recipe = MIXED_ADAM
#: Bytes per element: bf16 weights, bf16 gradients, and the fp32 master copy with Adam's two fp32 moments.
BF16, GRAD, MASTER_AND_MOMENTS = (int(RECIPE.bytes_for(state)) for state in ("weights", "gradients", "optimizer"))
FP32 = 4  #: Adam's step counter and DeepSpeed's fp32 scalars

#: Lab mode -> the "zero_optimization" section of its DeepSpeed config.
ZERO_CONFIG = {
    "ds_zero0": {"stage": 0},
    "ds_zero1": {"stage": 1},
    "ds_zero2": {"stage": 2},
    "ds_zero2_reduce": {"stage": 2, "use_multi_rank_bucket_allreduce": False},
    "ds_zero3": {"stage": 3, "stage3_param_persistence_threshold": 0},
    "ds_zero3_reuse0": {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0},
    "ds_zero3_no_reuse": {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0,
                          "stage3_prefetch_bucket_size": 0},
    "ds_zero3_persistent": {"stage": 3},  # DeepSpeed's default threshold: parameters under 100,000 elements stay whole
}


def padded_flat(psi: int, gpus: int) -> int:
    """Elements in the stage 1/2 flat buffer: Ψ rounded up to a multiple of 2N."""
    return -(-psi // (2 * gpus)) * 2 * gpus


def slice_len(psi: int, gpus: int) -> int:
    """Elements in each rank's slice of the stage 1/2 flat buffer, padding included."""
    return padded_flat(psi, gpus) // gpus


def shard(n: int, gpus: int) -> int:
    """Elements of one rank's stage 3 piece of an n-element parameter: ⌈n/N⌉, padded."""
    return -(-n // gpus)


def _sizes(widths: tuple[int, ...]) -> list[int]:
    return [numel(s) for s in shapes(widths)]


def touched_gradients(sizes: list[int], gpus: int, rank: int) -> int:
    """Gradient elements a stage 1/2 rank keeps: every parameter overlapping its slice, whole, plus its padding."""
    psi, part = sum(sizes), slice_len(sum(sizes), gpus)
    low, high = rank * part, (rank + 1) * part
    kept, start = 0, 0
    for n in sizes:
        if start < high and start + n > low:
            kept += n
        start += n
    return kept + max(0, high - max(low, psi))


def held(mode: str, widths: tuple[int, ...], gpus: int, rank: int) -> dict[str, int]:
    """Predicted bytes this rank holds after the backward pass of a step (before `engine.step()`)."""
    sizes, stage = _sizes(widths), ZERO_CONFIG[mode]["stage"]
    psi = sum(sizes)
    if stage == 0:
        return {"weights": BF16 * psi, "gradients": GRAD * psi, "optimizer": MASTER_AND_MOMENTS * psi,
                "step_counters": FP32 * len(sizes), "other": 0}
    if stage in (1, 2):
        return {"weights": BF16 * padded_flat(psi, gpus), "gradients": GRAD * touched_gradients(sizes, gpus, rank),
                "optimizer": MASTER_AND_MOMENTS * slice_len(psi, gpus), "step_counters": FP32,
                "other": FP32}  # the global gradient norm, one fp32 scalar
    mine = sum(shard(n, gpus) for n in sizes)
    # Persistent parameters stay whole, padded to N pieces, beside the piece. On one rank DeepSpeed does
    # not gather at all: each parameter is a view of its own piece, so the two are one storage.
    whole = sum(gpus * shard(n, gpus) for n in sizes) if mode == "ds_zero3_persistent" and gpus > 1 else 0
    return {"weights": BF16 * (mine + whole), "gradients": GRAD * mine, "optimizer": MASTER_AND_MOMENTS * mine,
            "step_counters": FP32, "other": 8 + 1}  # the gradient norm (fp64) and an inf/NaN flag (bool)


def layer_sizes(widths: tuple[int, ...]) -> list[list[int]]:
    """Parameter sizes grouped by layer: [weight, bias] for each Linear."""
    sizes = _sizes(widths)
    return [sizes[i:i + 2] for i in range(0, len(sizes), 2)]


def messages(mode: str, widths: tuple[int, ...], gpus: int) -> list[tuple[str, int, str]]:
    """Every collective of one steady-state step as (collective, elements, dtype), in a canonical order."""
    sizes, stage = _sizes(widths), ZERO_CONFIG[mode]["stage"]
    psi = sum(sizes)
    if stage == 0:
        return [("all_reduce", psi, "bfloat16")]
    if stage in (1, 2):
        flat = padded_flat(psi, gpus)
        control = [("all_reduce", 1, "uint8"), ("all_reduce", 1, "float32")]  # overflow flag, gradient norm
        gather = [("all_gather", flat, "bfloat16")] if gpus > 1 else []
        if mode == "ds_zero2_reduce":  # one reduce per owner, of the real (unpadded) elements in its slice
            part = slice_len(psi, gpus)
            owners = [min(psi, (r + 1) * part) - min(psi, r * part) for r in range(gpus)]
            reduces = [("reduce", n, "bfloat16") for n in owners if n > 0]
            return sorted(reduces + control + gather)
        return sorted([("all_reduce", psi, "bfloat16"), *control, *gather])
    pieces = gpus * sum(shard(n, gpus) for n in sizes)
    out = [("reduce_scatter", pieces, "bfloat16"), ("all_reduce", 1, "float64")]  # gradients, gradient norm
    if gpus > 1:  # on one rank, DeepSpeed makes each parameter a view of its piece instead of gathering
        if mode in ("ds_zero3", "ds_zero3_reuse0"):
            # Prefetched in one go and kept from the forward pass to the backward pass: a parameter whose later
            # use the prefetcher has already passed is never released, whatever the reuse distance.
            out.append(("all_gather", pieces, "bfloat16"))
        elif mode == "ds_zero3_no_reuse":  # layer by layer, in the forward pass and again in the backward pass
            out += 2 * [("all_gather", gpus * sum(shard(n, gpus) for n in layer), "bfloat16")
                        for layer in layer_sizes(widths)]
        else:  # persistent parameters: each rebuilt whole after the optimizer step
            out += [("all_gather", gpus * shard(n, gpus), "bfloat16") for n in sizes]
    return sorted(out)


def traffic(mode: str, widths: tuple[int, ...], gpus: int) -> dict[str, int]:
    """Predicted elements per collective in one steady-state step."""
    totals: Counter = Counter()
    for op, n, _ in messages(mode, widths, gpus):
        totals[op] += n
    return dict(totals)


def paper_stage(mode: str) -> Stage:
    """The paper's stage for a DeepSpeed mode: the one it configures."""
    return Stage(ZERO_CONFIG[mode]["stage"])

