"""Offload moves bytes off the GPU without losing any, and pays for them on the host link."""

from fractions import Fraction

import pytest

from zero_lessons import GB
from zero_lessons.memory import per_gpu
from zero_lessons.planning import offload

PSI = 7_500_000_000


@pytest.mark.parametrize("stage, parameters", [(1, False), (2, False), (3, False), (3, True)])
def test_offload_conserves_bytes(stage, parameters):
    on_gpu, off_gpu = offload.offloaded(PSI, 8, stage, parameters=parameters)
    assert on_gpu.total + off_gpu.total == per_gpu(PSI, 8, stage).total
    assert on_gpu.optimizer == 0


def test_zero_offload_numbers_for_the_article_example():
    on_gpu, off_gpu = offload.offloaded(PSI, 8, 2)
    assert on_gpu.total == 15 * GB + Fraction("1.875") * GB  # full fp16 weights + gradient shard
    assert off_gpu.total == Fraction("11.25") * GB
    # gradient shard down and weight shard up: 2 + 2 bytes on Ψ/8 elements = 3.75 GB, 0.15 s at 25 GB/s.
    assert offload.link_bytes(PSI, 8, 2) == Fraction("3.75") * GB
    assert offload.link_time(PSI, 8, 2, "25 GB/s") == Fraction(3, 20)
    assert offload.link_bytes(PSI, 8, 3, parameters=True) == 8 * PSI // 8


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: offload.offloaded(PSI, 8, 0), "stage must be 1, 2 or 3"),
        (lambda: offload.offloaded(PSI, 8, 2, parameters=True), "parameter offload needs stage 3"),
        (lambda: offload.link_time(PSI, 8, 2, 0), "bandwidth must be a number > 0"),
        (lambda: offload.link_time(PSI, 8, 2, "fast"), "bandwidth: cannot read"),
    ],
)
def test_offload_rejects(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_compute_time_six_flops_per_parameter_per_token():
    # 7.5 B parameters, 8 × 4096 tokens, at 400 TFLOP/s: 6 · 7.5e9 · 32768 / 4e14 = 3.6864 s.
    assert offload.compute_time(PSI, 8 * 4096, 4 * 10**14) == Fraction("3.6864")
    with pytest.raises(ValueError, match="flops_per_second"):
        offload.compute_time(PSI, 10, 0)


def test_capacity_per_gpu_and_per_node():
    cpu = offload.capacity(PSI, 8, 2)
    assert (cpu["gpu"], cpu["cpu_per_node"], cpu["nvme_per_node"]) == (Fraction("16.875") * GB, 90 * GB, 0)
    nvme = offload.capacity(PSI, 16, 3, parameters=True, gpus_per_node=8, target="nvme")
    assert nvme["cpu_per_node"] == 0 and nvme["nvme_per_node"] == 8 * 14 * PSI // 16
    with pytest.raises(ValueError, match="target must be"):
        offload.capacity(PSI, 8, 2, target="tape")
