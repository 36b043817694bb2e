"""The page-locked host buffers through which DeepSpeed's stage 3 moves optimizer state to and from an NVMe
drive.

By DeepSpeed 0.19.8's code: with `offload_optimizer` on NVMe, the optimizer swapper
(`swap_tensor/optimizer_utils.py`) allocates at start-up `buffer_count` pinned fp32 buffers (4 by default:
one sub-group's master weights, gradients and Adam's two moments), each as large as the largest sub-group's
partition (`stage3.py` passes `max(fp16_partitioned_groups_flat_numel)`), rounded up to the drive's I/O
alignment, which is left out here. Stage 3 forms the sub-groups from one rank's partitions in order, closing
one once it holds `sub_group_size` elements, so a rank whose whole partition is under `sub_group_size` (10⁹
by default) has one sub-group: the buffers then hold 16 bytes per shard element, more than the 12 of its
optimizer state.
"""

from __future__ import annotations

from .. import checks

#: DeepSpeed's defaults: `offload_optimizer.buffer_count` and `zero_optimization.sub_group_size`.
BUFFER_COUNT, SUB_GROUP_SIZE = 4, 1_000_000_000
#: Bytes per element of the buffers: fp32, as the master weights and the optimizer's states.
FP32 = 4


def largest_sub_group(partitions, sub_group_size: int = SUB_GROUP_SIZE) -> int:
    """Elements in the largest sub-group stage 3 forms from one rank's partition sizes, in model order."""
    if not isinstance(partitions, (list, tuple)) or not partitions:
        raise TypeError(
            f"partitions must be a non-empty list of whole numbers, got {checks.shown(partitions)}"
        )
    sizes = [checks.whole("each partition", n, high=10**15) for n in partitions]
    sub_group_size = checks.whole("sub_group_size", sub_group_size, high=10**15)
    groups, current = [], 0
    for n in sizes:
        current += n
        if current >= sub_group_size:
            groups.append(current)
            current = 0
    return max(groups + [current])


def staging_bytes(partitions, sub_group_size: int = SUB_GROUP_SIZE, buffer_count: int = BUFFER_COUNT) -> int:
    """Pinned host bytes per GPU for the optimizer swapper's buffers: `buffer_count` fp32 buffers of the
    largest sub-group."""
    buffer_count = checks.whole("buffer_count", buffer_count, high=1_000)
    return buffer_count * FP32 * largest_sub_group(partitions, sub_group_size)
