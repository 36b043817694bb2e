"""Every public function rejects bad input with an error that names the field and its range."""

import pytest

from zero_lessons import cluster_total, max_params, min_gpus, per_gpu, stage_table
from zero_lessons.checks import MAX_GPUS, MAX_PARAMS


@pytest.mark.parametrize("kwargs, error, words", [
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
])
def test_per_gpu_rejects(kwargs, error, words):
    args = {"params": 7_500_000_000, "gpus": 8, "stage": 1, "recipe": "mixed-adam"} | kwargs
    with pytest.raises(error, match=words):
        per_gpu(**args)


@pytest.mark.parametrize("call, error, words", [
    (lambda: max_params(0, 8, 3), ValueError, "memory must be a number > 0"),
    (lambda: max_params("80 GHz", 8, 3), ValueError, "memory: cannot read"),
    (lambda: max_params(float("nan"), 8, 3), ValueError, "memory must be a finite"),
    (lambda: min_gpus(10**9, -1, 3), ValueError, "memory must be a number > 0"),
    (lambda: cluster_total(10**9, 0, 3), ValueError, "gpus must be"),
    (lambda: stage_table(10**9, 8, unit="GBs"), ValueError, "unit must be one of"),
    (lambda: stage_table(10**9, 8, budget="lots"), ValueError, "budget: cannot read"),
])
def test_other_entry_points_reject(call, error, words):
    with pytest.raises(error, match=words):
        call()
