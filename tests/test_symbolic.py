"""The sympy model agrees with the exact numeric one, and reproduces the paper's limits."""

import random
from fractions import Fraction

import pytest
import sympy as sp

from zero_lessons import communication, memory, recipes, symbolic
from zero_lessons.stages import Stage
from zero_lessons.symbolic import N_d, Psi


def test_general_expressions_match_the_paper():
    b_w, b_g, K = symbolic.BYTES.values()
    assert sp.simplify(symbolic.per_gpu_expr(0) - (b_w + b_g + K) * Psi) == 0
    assert sp.simplify(symbolic.per_gpu_expr(2) - ((b_w * Psi) + (b_g + K) * Psi / N_d)) == 0
    assert symbolic.per_gpu_expr(1, "mixed-adam") == 4 * Psi + 12 * Psi / N_d


def test_limits_for_the_paper_recipe():
    assert [symbolic.limit_expr(s, "mixed-adam") for s in Stage] == [16 * Psi, 4 * Psi, 2 * Psi, 0]


def test_derivation_reaches_sixteen_psi():
    steps = symbolic.bytes_per_param("mixed-adam").steps
    assert [s.expr for s in steps[-2:]] == [16, 16 * Psi]
    assert len(steps) == len(recipes.MIXED_ADAM.parts) + 2
    assert "fp32 variance" in symbolic.bytes_per_param("mixed-adam")._repr_markdown_()


def test_min_gpus_expr_needs_a_partitioned_state():
    with pytest.raises(ValueError, match="partitions nothing"):
        symbolic.min_gpus_expr(0)


def test_symbolic_and_numeric_agree_on_random_inputs():
    rng = random.Random(20191002)
    for _ in range(200):
        stage = Stage(rng.randrange(4))
        r = rng.choice(
            [
                *recipes.PRESETS.values(),
                recipes.custom(*(Fraction(rng.randrange(0, 65), rng.choice([1, 2, 4])) for _ in range(3))),
            ]
        )
        psi, n = rng.randrange(1, 10**15), rng.randrange(1, 10**6)
        budget = rng.randrange(10**9, 10**12)
        assert (
            symbolic.evaluate(symbolic.per_gpu_expr(stage), r, params=psi, gpus=n)
            == memory.per_gpu(psi, n, stage, r).total
        )
        assert symbolic.evaluate(
            symbolic.comm_expr(stage, ring=True), r, params=psi, gpus=n
        ) == communication.volume_elements(psi, n, stage, ring=True)
        if r.total_bytes:
            largest = symbolic.evaluate(symbolic.max_params_expr(stage, r), r, gpus=n, gpu_memory=budget)
            assert int(largest) == memory.max_params(n, budget, stage, r)
        numeric = memory.min_gpus(psi % 10**11 + 1, budget, stage, r)
        if stage and numeric is not None and numeric > 1:
            edge = symbolic.evaluate(
                symbolic.min_gpus_expr(stage, r), r, params=psi % 10**11 + 1, gpu_memory=budget
            )
            assert -(-edge.numerator // edge.denominator) == numeric


def test_by_stage_shows_one_latex_row_per_stage():
    limits = [symbolic.limit_expr(s, "mixed-adam") for s in Stage]
    table = symbolic.by_stage("as N_d grows", limits, "bytes per GPU")._repr_markdown_()
    assert "| stage | bytes per GPU |" in table
    assert "| ZeRO-1 | $4 \\Psi$ |" in table and "| ZeRO-3 | $0$ |" in table
    with pytest.raises(ValueError, match="one per stage"):
        symbolic.by_stage("too few", limits[:3], "bytes")


def test_stage_derivation_heads_its_column_as_bytes_per_gpu_not_a_running_total():
    """Its rows rewrite one expression; only `bytes_per_param`, adding part by part, says "running total"."""
    shown = symbolic.stage_derivation(Stage.ZERO2, recipes.MIXED_ADAM)._repr_markdown_().splitlines()
    assert shown[2] == "| step | bytes per GPU |"
    assert "| step | running total |" in symbolic.bytes_per_param(recipes.MIXED_ADAM)._repr_markdown_()
