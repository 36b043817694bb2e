"""Offload moves bytes off the GPU without losing any, and pays for them on the host link and the drive."""

from fractions import Fraction

import pytest

from conftest import need_module
from zero_lessons import GB
from zero_lessons.memory import per_gpu
from zero_lessons.planning import offload

PSI = 7_500_000_000


@pytest.mark.parametrize("stage, parameters", [(2, False), (3, False), (3, True)])
def test_offload_conserves_bytes(stage, parameters):
    on_gpu, off_gpu = offload.offloaded(PSI, 8, stage, parameters=parameters)
    assert on_gpu.total + off_gpu.total == per_gpu(PSI, 8, stage).total
    assert on_gpu.optimizer == on_gpu.gradients == 0  # the ZeRO-Offload paper's split: gradients on the host


def test_zero_1_offload_copies_the_reduced_gradient_shard_down():
    """ZeRO-1 holds whole gradients on the GPU; only the reduced shard goes down for the CPU's step."""
    on_gpu, off_gpu = offload.offloaded(PSI, 8, 1)
    held = per_gpu(PSI, 8, 1)
    assert on_gpu.gradients == held.gradients == 15 * GB
    assert off_gpu.gradients == per_gpu(PSI, 8, 2).gradients == Fraction("1.875") * GB
    assert on_gpu.total + off_gpu.total == held.total + off_gpu.gradients


def test_zero_offload_numbers_for_the_article_example():
    on_gpu, off_gpu = offload.offloaded(PSI, 8, 2)
    assert on_gpu.total == 15 * GB  # whole fp16 weights: 2 bytes per parameter
    assert off_gpu.total == Fraction("13.125") * GB  # 16-bit gradient shard + optimizer shard, 14 B × Ψ/8
    # gradient shard down and weight shard up: 2 + 2 bytes on Ψ/8 elements = 3.75 GB, 0.15 s at 25 GB/s.
    assert offload.link_bytes(PSI, 8, 2) == Fraction("3.75") * GB
    assert offload.link_time(PSI, 8, 2, "25 GB/s") == Fraction(3, 20)


def test_parameter_offload_crosses_pcie_three_times_not_four():
    """With the weights on the host, the CPU's step updates them there: nothing comes back after the step.
    The gradient shard goes down once and the weight shard comes up for the forward and the backward pass."""
    shard = PSI // 8  # elements of one GPU's shard
    assert offload.link_bytes(PSI, 8, 3, parameters=True) == 3 * 2 * shard == Fraction("5.625") * GB
    # optimizer offload alone: gradient down, updated weights back up, at stage 2 and stage 3 alike
    assert offload.link_bytes(PSI, 8, 2) == offload.link_bytes(PSI, 8, 3) == 2 * 2 * shard
    assert offload.link_time(PSI, 8, 3, "25 GB/s", parameters=True) == Fraction(9, 40)


def test_nvme_traffic_is_the_optimizer_state_in_and_out_and_the_fp32_gradient():
    """DeepSpeed's optimizer swapper reads fp32 weights and both moments (12 B) before the step and writes
    them back after; the fp32 gradient (4 B) is written in the backward pass and read for the step."""
    shard = PSI // 8
    assert offload.link_bytes(PSI, 8, 3, link="nvme") == (12 + 12 + 4 + 4) * shard == 30 * GB
    assert offload.link_time(PSI, 8, 3, "6 GB/s", link="nvme") == 5
    # 937.5 M weight elements per GPU are under max_in_cpu (10**9): DeepSpeed keeps them all in host memory
    assert offload.link_bytes(PSI, 8, 3, parameters=True, link="nvme") == 30 * GB
    big = (
        70 * 10**9 // 8
    )  # 8.75 G elements per GPU: all but 10**9 stay on the drive, read twice, written once
    expected = 32 * big + 3 * 2 * (big - 10**9)
    assert offload.link_bytes(70 * 10**9, 8, 3, parameters=True, link="nvme") == expected == 326.5 * GB
    for call in (
        lambda: offload.link_bytes(PSI, 8, 2, link="nvme"),
        lambda: offload.capacity(PSI, 8, 2, target="nvme"),
    ):
        with pytest.raises(ValueError, match="'nvme' needs stage 3"):
            call()
    with pytest.raises(ValueError, match="link must be one of pcie, nvme"):
        offload.link_bytes(PSI, 8, 3, link="usb")


@pytest.mark.slow  # imports DeepSpeed
def test_max_in_cpu_is_deepspeeds_default():
    need_module("deepspeed.runtime.zero.offload_config")
    from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadParamConfig

    assert DeepSpeedZeroOffloadParamConfig().max_in_cpu == offload.MAX_IN_CPU


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
    assert (cpu["gpu"], cpu["cpu_per_node"], cpu["nvme_per_node"]) == (15 * GB, 105 * GB, 0)
    nvme = offload.capacity(PSI, 16, 3, parameters=True, gpus_per_node=8, target="nvme")
    # under max_in_cpu, DeepSpeed keeps the fp16 weight shards in host memory, beside its 16-bit gradient
    # buffer; the optimizer state (12 B) and the fp32 gradient shard (4 B) go to NVMe
    assert nvme["gpu"] == 0 and nvme["cpu_per_node"] == 8 * (2 + 2) * PSI // 16
    assert nvme["nvme_per_node"] == 8 * (12 + 4) * PSI // 16
    big = offload.capacity(70 * 10**9, 8, 3, parameters=True, target="nvme")
    assert big["cpu_per_node"] == 8 * (2 * 10**9 + 2 * 70 * 10**9 // 8)
    assert big["nvme_per_node"] == 8 * ((14 + 4) * 70 * 10**9 // 8 - 2 * 10**9)
    # optimizer offload only: the weight shard stays on the GPU, the host holds the 16-bit gradient shard
    assert offload.capacity(PSI, 8, 3, target="nvme") == {
        "gpu": Fraction("1.875") * GB,
        "cpu_per_node": 15 * GB,
        "nvme_per_node": 120 * GB,
    }
    with pytest.raises(ValueError, match="target must be"):
        offload.capacity(PSI, 8, 2, target="tape")


def test_nvme_capacity_counts_the_fp32_gradient_shard_deepspeed_writes():
    """7.5 B on 8 GPUs, ZeRO-3: the drive per node holds the optimizer shards, 12 B × Ψ/8 × 8 = 90 GB, plus
    the fp32 gradient shards DeepSpeed writes, 4 B × Ψ/8 × 8 = 30 GB: 120 GB, the bytes `link_bytes` moves."""
    for parameters in (False, True):
        drive = offload.capacity(PSI, 8, 3, parameters=parameters, target="nvme")["nvme_per_node"]
        assert drive == 90 * GB + 30 * GB == 120 * GB
        # each step writes all of it once and reads it once: one GPU's share is an eighth
        assert offload.link_bytes(PSI, 8, 3, parameters=parameters, link="nvme") == 2 * drive / 8
    # one GPU on its node: 16 B × Ψ on its drive
    assert offload.capacity(PSI, 1, 3, target="nvme")["nvme_per_node"] == 16 * PSI == 120 * GB
    # host offload puts nothing on the drive
    assert offload.capacity(PSI, 8, 3, target="cpu")["nvme_per_node"] == 0
