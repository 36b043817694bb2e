"""By-hand working for the predict-then-measure questions: every number from the lab model's six tensors.

The lab predicts a whole rank at once (`lab.predict_torch`, `lab.predict_deepspeed`). Here the same rules
are worked tensor by tensor, as an attendee works them on paper: a table of the tensors, one formula per
part, and the reasons in words. tests/test_workshop.py sets every case's totals against the lab's
prediction, and the lab's ranks measure both.
"""

from __future__ import annotations

from fractions import Fraction
from math import prod

from .. import checks, memory
from ..units import format_number
from .lab_link import lab_mode, lab_model, owners, zero_setting
from .worked import ByHand, shape_text, tensors, worked

#: Why a collective its question asks about does not run, by framework rule: each shows as "0 (why)".
IDLE = {
    "fsdp": {
        "all_reduce": "FSDP2 reduce-scatters the gradients instead",
        "broadcast": "each rank updates its own chunk, and the next step's all-gather shares it",
    },
    "zero_redundancy": {
        "reduce_scatter": "DDP all-reduces the gradients instead",
        "all_gather": "each owner broadcasts its updated parameters instead",
    },
    "all_reduce": {
        "reduce": "the bucket all-reduce carries every owner's slice",
        "reduce_scatter": "the slices are packed into the bucket all-reduces instead",
    },
    "reduce": {
        "all_reduce": "each bucket is reduced to the owners of its slices instead",
        "reduce_scatter": "each bucket is reduced to the owners of its slices instead",
    },
    "stage3": {"all_reduce": "stage 3 reduce-scatters the gradients instead"},
}


def idle(rule: str) -> dict[str, tuple[int, str]]:
    """The collectives that do not run under `rule`, each with 0 elements and the reason."""
    return {op: (0, f"0 ({why})") for op, why in IDLE[rule].items()}


#: How often FSDP2 all-gathers, by the number of gathers reshard_after_forward gives.
RESHARD = {
    2: "reshard_after_forward=True frees the gathered weights after the forward pass, so they are gathered "
    "again for the backward pass: {gathered}{sent:,}.",
    1: "reshard_after_forward=False keeps the gathered weights for the backward pass: one all-gather of "
    "{sent:,}.",
}


def fsdp(mode: str, gpus: int, rank: int) -> ByHand:
    """FSDP2: each tensor cut into ⌈rows/N⌉-row chunks, padded; Adam's state follows the rank's own rows."""
    chunks, own, rows = [], [], []
    for name, shape in tensors():
        size, cols = memory.ceil_div(shape[0], gpus), prod(shape[1:])
        mine = max(0, min(size, shape[0] - rank * size)) * cols
        chunks.append(size * cols)
        own.append(mine)
        rows.append(
            (name, shape_text(shape), f"{prod(shape):,}", f"{size} × {cols} = {size * cols:,}", f"{mine:,}")
        )
    padded, mine = sum(chunks), sum(own)
    rows.append(("total", "", f"{lab_model()[1]:,}", f"{padded:,}", f"{mine:,}"))
    gathers = 2 if lab_mode(mode).wrapping.reshard_after_forward else 1
    gathered = f"{gathers} × {gpus * padded:,} = " if gathers > 1 else ""
    steps = (
        f"FSDP2 cuts each tensor along its rows into N = {gpus} chunks of ⌈rows/N⌉ rows and pads every "
        f"rank's chunk to that size: {' + '.join(map(str, chunks))} = {padded:,} elements per rank.",
        f"Weights and gradients sit in those padded chunks, 4 B per element: 4 B × {padded:,} = "
        f"{4 * padded:,} B of each.",
        f"Adam's two fp32 moments (8 B per element) are created like rank {rank}'s own rows, without the "
        f"padding: {' + '.join(map(str, own))} = {mine:,} elements, 8 B × {mine:,} = {8 * mine:,} B"
        + (f", not 8 × {padded:,}: the padding has no Adam state." if mine < padded else "."),
        f"The reduce-scatter takes every rank's padded chunk: N × {padded:,} = {gpus * padded:,} elements. "
        + RESHARD[gathers].format(gathered=gathered, sent=gathers * gpus * padded),
    )
    head = ("tensor", "shape", "elements", "padded chunk, ⌈rows/N⌉ × columns", f"rank {rank}'s own elements")
    return worked(
        head,
        rows,
        {"weights": (4, padded), "gradients": (4, padded), "optimizer": (8, mine)},
        {
            "reduce_scatter": (gpus * padded, f"{gpus} × {padded:,} = {gpus * padded:,}"),
            "all_gather": (gathers * gpus * padded, f"{gathered}{gathers * gpus * padded:,}"),
        }
        | idle("fsdp"),
        steps,
    )


def zero_redundancy(mode: str, gpus: int, rank: int) -> ByHand:
    """ZeroRedundancyOptimizer: DDP's whole weights and gradients; whole parameters' Adam state to owners."""
    named = tensors()
    sizes = [prod(shape) for _, shape in named]
    owner, psi = owners(sizes, gpus), sum(sizes)
    mine = sum(n for n, o in zip(sizes, owner, strict=True) if o == rank)
    order = sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True)
    handed = ", ".join(f"{named[i][0]} ({sizes[i]:,}) → rank {owner[i]}" for i in order)
    rows = [
        (name, shape_text(s), f"{n:,}", f"rank {o}")
        for (name, s), n, o in zip(named, sizes, owner, strict=True)
    ]
    steps = (
        f"ZeroRedundancyOptimizer wraps DDP: every rank keeps all weights and gradients, 4 B × Ψ = "
        f"{4 * psi:,} B of each.",
        "It gives each whole parameter's Adam state to one rank, largest first, each to the rank holding "
        f"the fewest elements so far: {handed}. Rank {rank} owns {mine:,} elements: 8 B × {mine:,} = "
        f"{8 * mine:,} B of moments.",
        f"It sends DDP's all-reduce of the gradients, Ψ = {psi:,} elements, and after the step each owner "
        f"broadcasts its updated parameters: {psi:,} elements in all.",
    )
    return worked(
        ("tensor", "shape", "elements", "Adam state on"),
        [*rows, ("total", "", f"{psi:,}", f"rank {rank}: {mine:,}")],
        {"weights": (4, psi), "gradients": (4, psi), "optimizer": (8, mine)},
        {"all_reduce": (psi, f"Ψ = {psi:,}"), "broadcast": (psi, f"Ψ = {psi:,}")} | idle("zero_redundancy"),
        steps,
    )


def _flat_rows(gpus: int, rank: int) -> tuple[list, dict[str, int], int, int]:
    """The flat buffer's table, the tensors touching `rank`'s slice (by their place), its padding, and F."""
    named = tensors()
    psi = sum(prod(s) for _, s in named)
    flat = memory.ceil_div(psi, 2 * gpus) * 2 * gpus
    low, high = rank * flat // gpus, (rank + 1) * flat // gpus
    rows, touched, start = [], {}, 0
    for name, shape in named:
        end = start + prod(shape)
        hit = start < high and end > low
        rows.append(
            (name, shape_text(shape), f"{prod(shape):,}", f"[{start:,}, {end:,})", "yes" if hit else "no")
        )
        touched |= {f"{name} [{start:,}, {end:,})": prod(shape)} if hit else {}
        start = end
    pad = max(0, high - max(low, psi))
    if flat > psi:
        rows.append(("padding", "", f"{flat - psi:,}", f"[{psi:,}, {flat:,})", "yes" if pad else "no"))
    return rows, touched, pad, flat


#: How stages 1 and 2 reduce the gradients, by the collective DeepSpeed's settings leave running.
REDUCED = {
    "all_reduce": 'In DeepSpeed 0.19.8, "reduce_scatter": true (the default) routes each slice of a gradient '
    'bucket to its owner, but "use_multi_rank_bucket_allreduce": true (also the default) packs those slices '
    "into one all-reduce per bucket, so no reduce-scatter runs: the all-reduces add up to",
    "reduce": 'With "use_multi_rank_bucket_allreduce": false each gradient bucket is reduced once to each '
    "owner whose slice it touches (the padding is not sent): the reduces add up to",
}


def flat_buffer(mode: str, gpus: int, rank: int) -> ByHand:
    """DeepSpeed stages 1 and 2: one flat bf16 buffer, padded to 2N; each rank owns one slice of it."""
    rows, touched, pad, flat = _flat_rows(gpus, rank)
    psi, part = lab_model()[1], flat // gpus
    kept, where = sum(touched.values()) + pad, f"[{rank * part:,}, {(rank + 1) * part:,})"
    op = "all_reduce" if zero_setting(mode, "use_multi_rank_bucket_allreduce") else "reduce"
    even = format_number(Fraction(2 * psi, gpus), grouped=True)
    steps = (
        f"Stages 1 and 2 lay the tensors end to end in one bf16 flat buffer of Ψ = {psi:,} elements, "
        f"padded to a multiple of 2N = {2 * gpus}: F = {flat:,}. Every rank keeps it whole: "
        f"2 B × {flat:,} = {2 * flat:,} B of weights.",
        f"Rank {rank} owns the slice {where} of F/N = {part:,} elements; its fp32 master weights and two "
        f"Adam moments, 12 B per element, cover the slice: 12 B × {part:,} = {12 * part:,} B.",
        "After the backward pass it keeps, whole, the bf16 gradient of every tensor that touches its "
        f"slice: {', '.join(touched)}"
        + (f", plus the slice's {pad:,} elements of padding" if pad else "")
        + f": {kept:,} elements, 2 B × {kept:,} = {2 * kept:,} B, where the paper's even split counts "
        f"2Ψ/N = {even} B. A tensor that straddles two slices is kept whole by both owners.",
        f"{REDUCED[op]} Ψ = {psi:,} elements. After the step the updated buffer is all-gathered: "
        f"F = {flat:,}.",
    )
    return worked(
        ("tensor", "shape", "elements", "place in the flat buffer", f"touches rank {rank}'s slice"),
        [*rows, ("total", "", f"F = {flat:,}", f"slice {where}", f"{kept:,}")],
        {"weights": (2, flat), "gradients": (2, kept), "optimizer": (12, part)},
        {op: (psi, f"Ψ = {psi:,}"), "all_gather": (flat, f"F = {flat:,}")} | idle(op),
        steps,
    )


#: Why stage 3 gathers as often as it does, by (reuse, prefetch): "all" reuses every gathered weight.
GATHERS = {
    "all": "stage3_max_reuse_distance is {reuse:,} elements, and every weight's backward use comes "
    "fewer than 2Ψ elements after its forward use (in between, only the later layers' weights are used, "
    "each twice: forward, then backward), so every piece gathered in the forward pass stays gathered for "
    "the backward pass (as in question 4): one all-gather of N × {mine:,} = {whole:,} elements.",
    "none": "With no reuse and no prefetch each layer is released after its forward use and gathered again "
    "for the backward pass: 2 × {whole:,} = {gathered:,} elements.",
    "prefetch": "With stage3_max_reuse_distance = 0 each layer is released after its forward use and "
    "gathered again for the backward pass, except the last: its backward follows its forward at once, and "
    "the prefetcher has already claimed it. 2 × {whole:,} − {last:,} (the last layer's pieces) = "
    "{gathered:,} elements.",
}


def _gathers(mode: str, whole: int, last: int) -> tuple[str, int, str]:
    """Stage 3's rule ("all", "none" or "prefetch"), the elements it gathers, and their arithmetic."""
    reuse = zero_setting(mode, "stage3_max_reuse_distance")
    if reuse >= 2 * lab_model()[1]:
        return "all", whole, f"{whole:,}"
    if reuse == 0 and zero_setting(mode, "stage3_prefetch_bucket_size") == 0:
        return "none", 2 * whole, f"2 × {whole:,} = {2 * whole:,}"
    if reuse == 0:
        return "prefetch", 2 * whole - last, f"2 × {whole:,} − {last:,} = {2 * whole - last:,}"
    raise ValueError(f"mode must reuse everything, nothing, or nothing with prefetch, got {mode!r}")


def stage3(mode: str, gpus: int, rank: int) -> ByHand:
    """DeepSpeed stage 3: every tensor cut on its own into N padded pieces; gathers set by reuse."""
    named, psi = tensors(), lab_model()[1]
    pieces = [memory.ceil_div(prod(s), gpus) for _, s in named]
    mine, whole = sum(pieces), gpus * sum(pieces)
    last = gpus * sum(pieces[-2:])  # the last layer's weight and bias
    rule, gathered, arithmetic = _gathers(mode, whole, last)
    reuse = zero_setting(mode, "stage3_max_reuse_distance")
    ratio = float(Fraction(whole + gathered, psi))
    steps = (
        f"Stage 3 cuts every tensor on its own into N = {gpus} flat pieces of ⌈n/N⌉ elements, short pieces "
        f"padded: {' + '.join(map(str, pieces))} = {mine:,} elements on every rank.",
        f"Rank {rank} holds its bf16 pieces of the weights and gradients, 2 B × {mine:,} = {2 * mine:,} B "
        f"of each, and fp32 master weights and two moments for them, 12 B × {mine:,} = {12 * mine:,} B.",
        "The gradients are reduce-scattered bucket by bucket, every tensor padded to N pieces: "
        f"N × {mine:,} = {whole:,} elements.",
        GATHERS[rule].format(reuse=reuse, mine=mine, whole=whole, last=last, gathered=gathered),
        f"In all the step sends {whole:,} + {gathered:,} = {whole + gathered:,} elements, {ratio:.3f}Ψ, "
        "where the paper's stage 3 counts 3Ψ (a reduce-scatter and two all-gathers).",
    )
    rows = [
        (name, shape_text(s), f"{prod(s):,}", f"⌈{prod(s):,}/{gpus}⌉ = {p:,}", f"{gpus * p:,}")
        for (name, s), p in zip(named, pieces, strict=True)
    ]
    return worked(
        ("tensor", "shape", "elements", "piece per rank", "padded, N pieces"),
        [*rows, ("total", "", f"{psi:,}", f"{mine:,}", f"{whole:,}")],
        {"weights": (2, mine), "gradients": (2, mine), "optimizer": (12, mine)},
        {"reduce_scatter": (whole, f"{gpus} × {mine:,} = {whole:,}"), "all_gather": (gathered, arithmetic)}
        | idle("stage3"),
        steps,
    )


def by_hand(mode: str, gpus: int, rank: int) -> ByHand:
    """The by-hand working for one rank of a predict-then-measure setting on the lab's model."""
    gpus = checks.whole("gpus", gpus, low=2, high=1024)  # on one rank nothing is sent
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < gpus:
        raise ValueError(f"rank must be a whole number from 0 to {gpus - 1}, got {rank!r}")
    setting = lab_mode(mode)
    wrapper = setting.wrapping.wrapper if setting.wrapping else None
    if wrapper == "zero_redundancy_optimizer":
        return zero_redundancy(mode, gpus, rank)
    if wrapper == "fully_shard" and setting.wrapping.param_dtype is None:
        return fsdp(mode, gpus, rank)
    if wrapper is None and setting.stage in (1, 2):
        return flat_buffer(mode, gpus, rank)
    sharded = wrapper is None and zero_setting(mode, "stage3_param_persistence_threshold") == 0
    if sharded and setting.stage == 3:
        return stage3(mode, gpus, rank)
    raise ValueError(f"mode must be a setting of a predict-then-measure question, got {mode!r}")
