"""DeepSpeed's pinned staging buffers for optimizer state on NVMe, by its code's rule: `buffer_count` fp32
buffers as large as the largest sub-group of one rank's partitions."""

import pathlib

import pytest

from conftest import need_module
from zero_lessons import memory
from zero_lessons.planning import ds_scale, nvme_buffers


def test_a_shard_under_the_sub_group_size_is_one_sub_group():
    """7.5e9 parameters on 8 GPUs: a 0.9375e9-element shard, under the default 1e9, so the four buffers hold
    16 B per shard element, 15 GB per GPU and 120 GB per node: more than the 12 B of the optimizer state."""
    shard = memory.shard_elements(7_500_000_000, 8)
    assert nvme_buffers.largest_sub_group([shard]) == shard == 937_500_000
    assert nvme_buffers.staging_bytes([shard]) == 16 * shard == 15 * 10**9
    assert nvme_buffers.staging_bytes([shard], buffer_count=1) == 4 * shard


def test_sub_groups_close_once_they_reach_the_size_in_model_order():
    assert nvme_buffers.largest_sub_group([60, 50, 10, 30, 5], 100) == 110  # [60, 50] closes at 110
    assert nvme_buffers.largest_sub_group([10, 20, 30], 100) == 60  # all under: one group
    assert nvme_buffers.largest_sub_group([10, 200, 5], 100) == 210
    assert nvme_buffers.largest_sub_group([5, 5], 5) == 5


def test_a_smaller_sub_group_size_shrinks_the_buffers():
    """The course's 7.5 B GPT, each tensor's partition on 8 ranks: 10^8 elements per sub-group shrinks the
    buffers about ninefold, to 1.7 GB per GPU."""
    partitions = [-(-n // 8) for m in ds_scale.gpt_modules() for n in m]
    default = nvme_buffers.staging_bytes(partitions)
    small = nvme_buffers.staging_bytes(partitions, sub_group_size=10**8)
    assert default == 16 * sum(partitions) and 10**8 <= small // 16 < 10**8 + max(partitions)
    assert round(small / 10**9, 2) == 1.71 and default > 8 * small


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: nvme_buffers.largest_sub_group([]), "partitions must be a non-empty list"),
        (lambda: nvme_buffers.largest_sub_group([0]), "each partition must be a whole number from 1"),
        (lambda: nvme_buffers.largest_sub_group([5], 0), "sub_group_size must be a whole number from 1"),
        (
            lambda: nvme_buffers.staging_bytes([5], buffer_count=0),
            "buffer_count must be a whole number from 1",
        ),
        (lambda: nvme_buffers.largest_sub_group(5), "partitions must be a non-empty list"),
    ],
)
def test_bad_input_names_the_field(call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call()


def test_the_rule_is_in_the_installed_deepspeeds_code():
    """The default count and sub-group size, the buffers' size and allocation, in this DeepSpeed's code."""
    zero = pathlib.Path(need_module("deepspeed.runtime.zero.stage3").__file__).parent
    assert (
        f"buffer_count: int = Field({nvme_buffers.BUFFER_COUNT}, ge=0)"
        in (zero / "offload_config.py").read_text()
    )
    assert nvme_buffers.SUB_GROUP_SIZE == 10**9
    assert "sub_group_size: int = Field(pp_int(1e9), ge=0)" in (zero / "config.py").read_text()
    assert "largest_numel=max(self.fp16_partitioned_groups_flat_numel)" in (zero / "stage3.py").read_text()
    swapper = (zero.parent / "swap_tensor" / "optimizer_utils.py").read_text()
    assert (
        "SwapBufferManager(num_elems=self.largest_numel" in swapper
        and "count=swap_config.buffer_count" in swapper
    )
