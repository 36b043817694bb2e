"""Lesson 04's optimizer-step check: a pick's model state plus what its framework holds at the optimizer step,
against the whole card (the activations are gone by then).

Under DeepSpeed (stages 1 to 3) the step copies the GPU's 16-bit gradient shard into one flat tensor and casts
that to fp32, 2 + 4 bytes per parameter of the shard, held at once; at stage 3 a gradient bucket of
`reduce_bucket_size` elements in 16 bits, 1 GB by default, is held from start-up. Under PyTorch's DDP with its
default (foreach) Adam, stage 0 here, the gradient buckets hold a second copy of every gradient (2 bytes per
parameter) and Adam builds √v for every parameter at once (4). The paper's mixed-precision Adam is assumed:
16-bit weights and gradients, fp32 master weights and moments.
"""

from __future__ import annotations

from fractions import Fraction

from .. import checks, memory, units
from ..stages import Stage, StageLike, as_stage
from ..units import Size

#: Bytes per parameter of a GPU's gradient shard that DeepSpeed's optimizer step adds: a flat 16-bit copy and
#: its fp32 cast.
DEEPSPEED_COPIES = 2 + 4
#: DeepSpeed's stage-3 gradient bucket in bytes: `reduce_bucket_size`'s default, 5 × 10⁸ elements, in 16 bits.
STAGE3_BUCKET = 2 * 5 * 10**8
#: Bytes per parameter that DDP with PyTorch's default Adam adds at the step: its buckets (2) and √v (4).
DDP_EXTRA = 2 + 4


def extra(params: int, gpus: int, stage: StageLike) -> Fraction:
    """What a GPU holds at its optimizer step beyond the paper's model state, in bytes: 6Ψ under DDP
    (stage 0), 6Ψ/N under DeepSpeed, and at stage 3 its gradient bucket too."""
    params, gpus, stage = checks.params(params), checks.gpus(gpus), as_stage(stage)
    if stage is Stage.DP:
        return Fraction(DDP_EXTRA * params)
    return Fraction(DEEPSPEED_COPIES * params, gpus) + (STAGE3_BUCKET if stage is Stage.ZERO3 else 0)


def at_step(params: int, gpus: int, stage: StageLike) -> Fraction:
    """Bytes a GPU holds at its optimizer step: the paper's model state under `stage` plus `extra`."""
    return memory.per_gpu(params, gpus, stage).total + extra(params, gpus, stage)


def fewest_gpus(params: int, card: Size, stage: StageLike) -> int | None:
    """Fewest GPUs on which `at_step` is within `card` bytes, the whole card; None when no count suffices."""
    params, card, stage = checks.params(params), units.as_bytes("card", card), as_stage(stage)
    kept, split = memory.kept_and_split(stage)
    whole = kept * params + (STAGE3_BUCKET if stage is Stage.ZERO3 else 0)  # what no GPU count divides
    if stage is Stage.DP:
        return 1 if whole + DDP_EXTRA * params <= card else None
    if whole >= card:
        return None
    return max(1, memory.ceil_div((split + DEEPSPEED_COPIES) * params, card - whole))
