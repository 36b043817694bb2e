"""Lesson 04's optimizer-step check: a pick's model state plus what its framework holds at the optimizer step
(the activations are gone by then), which must leave `CONTEXT`, 1 GB, of the card for the CUDA context: pass
`fewest_gpus` the card less `CONTEXT`.

Under DeepSpeed (stages 1 to 3) the step copies the GPU's 16-bit gradient shard into one flat tensor and casts
that to fp32, 2 + 4 bytes per parameter of the shard, held at once. Stage 3 makes the two copies one sub-group
at a time, `sub_group_size` elements (10⁹ by default), so for a larger shard it holds one sub-group's copies;
it closes a sub-group at the tensor that fills it, so a sub-group can hold a little more (the step model,
which knows the tensors, counts that). At stage 3 a gradient bucket of `reduce_bucket_size` elements in 16
bits, 1 GB by default, is held from start-up. Under PyTorch's DDP with its default (foreach) Adam, stage 0
here, the gradient buckets hold a second copy of every gradient (2 bytes per parameter) and Adam builds √v for
every parameter at once (4). The paper's mixed-precision Adam is assumed: 16-bit weights and gradients, fp32
master weights and moments.
"""

from __future__ import annotations

from fractions import Fraction

from .. import checks, memory, units
from ..stages import Stage, StageLike, as_stage
from ..units import Size
from .step_knobs import DeepSpeed

#: Bytes DeepSpeed's optimizer step adds per element of the gradient shard it copies: a flat 16-bit copy,
#: then its fp32 cast.
FLAT_COPY, FP32_COPY = 2, 4
#: Bytes the step adds per copied element: DeepSpeed's two copies; under DDP, per parameter, its buckets (2)
#: and √v (4), the same 6.
STEP_EXTRA = FLAT_COPY + FP32_COPY
#: One DeepSpeed gradient bucket in bytes: its default `reduce_bucket_size` in 16 bits (1 GB). Stage 3 holds
#: one from start-up; stages 1 and 2 hold theirs in the backward pass only.
BUCKET_BYTES = 2 * DeepSpeed().reduce_bucket_size
#: DeepSpeed's stage 3 makes the step's copies one sub-group of this many elements at a time (its default).
SUB_GROUP = DeepSpeed().sub_group_size
#: What the check leaves of the card for the CUDA context (several hundred MB to over 1 GB, lesson 12); less
#: is "thin". Lesson 06's pick checks hold the busiest moment to the same line.
CONTEXT = 10**9


def copied(params: int, gpus: int, stage: StageLike) -> Fraction:
    """Elements whose step copies a GPU holds at once: every parameter under DDP (stage 0), the GPU's shard
    under DeepSpeed's stages 1 and 2, and at stage 3 at most one sub-group of it (SUB_GROUP elements)."""
    params, gpus, stage = checks.params(params), checks.gpus(gpus), as_stage(stage)
    shard = Fraction(params, gpus)
    return {Stage.DP: Fraction(params), Stage.ZERO3: min(shard, SUB_GROUP)}.get(stage, shard)


def extra(params: int, gpus: int, stage: StageLike) -> Fraction:
    """What a GPU holds at its optimizer step beyond the paper's model state, in bytes: 6Ψ under DDP
    (stage 0), 6Ψ/N under DeepSpeed (at stage 3 one sub-group's at most), and stage 3's gradient bucket."""
    bucket = BUCKET_BYTES if as_stage(stage) is Stage.ZERO3 else 0
    return STEP_EXTRA * copied(params, gpus, stage) + bucket


def at_step(params: int, gpus: int, stage: StageLike) -> Fraction:
    """Bytes a GPU holds at its optimizer step: the paper's model state and `extra`."""
    return memory.per_gpu(params, gpus, stage).total + extra(params, gpus, stage)


def fewest_gpus(params: int, card: Size, stage: StageLike) -> int | None:
    """Fewest GPUs (up to checks.MAX_GPUS) on which `at_step` is within `card` bytes; None
    when no count suffices. `at_step` falls as GPUs are added, so a bisection finds it."""
    params, card, stage = checks.params(params), units.as_bytes("card", card), as_stage(stage)
    if at_step(params, checks.MAX_GPUS, stage) > card:
        return None
    low, high = 1, checks.MAX_GPUS  # at_step(high) fits; find the least count that does
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if at_step(params, middle, stage) <= card else (middle + 1, high)
    return high
