"""Every public function rejects bad input with an error that names the field and its range."""

from fractions import Fraction

import pytest

from zero_lessons import checks, cluster_total, custom, max_params, min_gpus, per_gpu, step_time, units
from zero_lessons.checks import MAX_GPUS, MAX_PARAMS
from zero_lessons.planning import ds_estimator, offload
from zero_lessons.planning.advice import advise
from zero_lessons.present import stage_table
from zero_lessons.recipes import Part, Recipe


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"params": 0}, ValueError, "params must be a whole number from 1"),
        ({"params": -5}, ValueError, "params must be"),
        ({"params": MAX_PARAMS + 1}, ValueError, "1,000,000,000,000,000"),
        ({"params": 7.5e9}, TypeError, "floats are not exact"),
        ({"params": float("nan")}, TypeError, "params"),
        ({"params": True}, TypeError, "params"),
        ({"params": "7.5B"}, TypeError, "params"),
        ({"gpus": 0}, ValueError, "gpus must be a whole number from 1 to 1,000,000"),
        ({"gpus": MAX_GPUS + 1}, ValueError, "gpus must be"),
        ({"gpus": 8.0}, TypeError, "gpus"),
        ({"gpus": float("inf")}, TypeError, "gpus"),
        ({"gpus": False}, TypeError, "gpus"),
        ({"stage": 4}, ValueError, "stage must be 0, 1, 2 or 3"),
        ({"stage": "ZeRO-9"}, ValueError, "stage must be"),
        ({"recipe": "adam-ish"}, ValueError, "recipe must be one of"),
    ],
)
def test_per_gpu_rejects(kwargs, error, words):
    args = {"params": 7_500_000_000, "gpus": 8, "stage": 1, "recipe": "mixed-adam"} | kwargs
    with pytest.raises(error, match=words):
        per_gpu(**args)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: max_params(8, 0, 3), ValueError, "memory must be a number > 0"),
        (lambda: max_params(8, "80 GHz", 3), ValueError, "memory: cannot read"),
        (lambda: max_params(8, float("nan"), 3), ValueError, "memory must be a finite"),
        (lambda: min_gpus(10**9, -1, 3), ValueError, "memory must be a number > 0"),
        (lambda: cluster_total(10**9, 0, 3), ValueError, "gpus must be"),
        (lambda: stage_table(10**9, 8, unit="GBs"), ValueError, "unit must be one of"),
        (lambda: stage_table(10**9, 8, gpu_memory="lots"), ValueError, "gpu_memory: cannot read"),
    ],
)
def test_other_entry_points_reject(call, error, words):
    with pytest.raises(error, match=words):
        call()


# Every quantity has one bound, named in checks.py; past it the error names the field and the bound.
@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: max_params(8, 10**18 + 1, 3), "memory must be at most 10**18 bytes (1 EB)"),
        (lambda: max_params(8, Fraction(1, 2), 3), "memory must be at least 1 byte"),
        (lambda: step_time(10**9, 8, 3, Fraction(1, 16)), "bandwidth must be at least 1 bit/s"),
        (lambda: step_time(10**9, 8, 3, "1001 TB/s"), "bandwidth must be at most 10**15 bytes/s (1 PB/s)"),
        (lambda: custom(1025, 0, 0), "weight_bytes must be at most 1,024 bytes per parameter"),
        (
            lambda: Recipe("r", (Part("a", "weights", 1024), Part("b", "weights", 1))),
            "weights bytes must be at most 1,024",
        ),
        (
            lambda: advise(10**9, 8, "80GB", activations=10**18 + 1),
            "activations must be at most 10**18 bytes",
        ),
        (lambda: advise(10**9, 8, "80GB", cpu_memory="1e7 TB"), "cpu_memory must be at most 10**18 bytes"),
        (
            lambda: advise(10**9, 8, "80GB", gpus_per_node=1025),
            "gpus_per_node must be a whole number from 1 to 1,024",
        ),
        (
            lambda: offload.capacity(10**9, 8, 2, gpus_per_node=1025),
            "gpus_per_node must be a whole number from 1 to 1,024",
        ),
        (lambda: ds_estimator.zero2(10**9, 1025), "gpus_per_node must be a whole number from 1 to 1,024"),
        (lambda: ds_estimator.zero2(10**9, 8, 125_001), "nodes must be a whole number from 1 to 125,000"),
        (
            lambda: ds_estimator.zero2(10**9, additional_buffer_factor=1001),
            "additional_buffer_factor must be at most 1,000",
        ),
        (lambda: offload.compute_time(10**9, 10**15 + 1, 10**15), "tokens must be a whole number from 1 to"),
        (lambda: offload.compute_time(10**9, 8, 10**21 + 1), "flops_per_second must be at most 10**21"),
        (lambda: units.format_number(1, digits=31), "digits must be a whole number from 0 to 30"),
        (lambda: units.parse_count("1e100"), "params: '1e100' has too many digits"),
        (lambda: units.parse_size("1" * 51 + "GB"), "has too many digits (at most 50"),
        (lambda: checks.amount("x", Fraction(1, 10**201)), "x must be a number ≥ 0 with at most 200 digits"),
    ],
)
def test_every_bound_is_named(call, words):
    with pytest.raises(ValueError) as caught:
        call()
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_the_bounds_cover_real_cases_with_room():
    assert (
        per_gpu(checks.MAX_PARAMS, checks.MAX_GPUS, 3, custom(1024, 1024, 1024)).total > 0
    )  # the largest corner
    assert (
        advise(10**12, 72, "192GB", cpu_memory="32 TiB", gpus_per_node=72).gpu_memory == 192 * 10**9
    )  # an NVL72 rack
    assert step_time(10**9, 8, 3, "1 Gb/s") > step_time(10**9, 8, 3, "1.8 TB/s") > 0  # 1 GbE to NVLink 5
    assert (
        custom(Fraction(1, 8), 0, Fraction("0.00065")).total_bytes > 0
    )  # 1-bit weights, Adafactor-like state
    assert ds_estimator.zero3(10**15, 10**12, 1024, 976).cpu_bytes > 0  # 999,424 GPUs, DeepSpeed's defaults
