"""The memory model against the article's table and the ZeRO paper's closed forms."""

from fractions import Fraction

import pytest

from zero_lessons import GB, GiB, Stage, memory, recipes
from zero_lessons.memory import cluster_total, max_params, min_gpus, per_gpu, saving

PSI, N = 7_500_000_000, 8


@pytest.mark.parametrize(
    "stage, article_gb", [(0, 120), (1, Fraction("41.25")), (2, Fraction("28.125")), (3, 15)]
)
def test_article_table_exactly(stage, article_gb):
    assert per_gpu(PSI, N, stage).total == article_gb * GB


@pytest.mark.parametrize(
    "stage, paper",
    [
        (0, lambda psi, n, k: (2 + 2 + k) * psi),
        (1, lambda psi, n, k: 4 * psi + Fraction(k * psi, n)),
        (2, lambda psi, n, k: 2 * psi + Fraction((2 + k) * psi, n)),
        (3, lambda psi, n, k: Fraction((4 + k) * psi, n)),
    ],
)
@pytest.mark.parametrize("psi, n", [(1, 1), (7_500_000_000, 8), (10**15, 10**6), (123_457, 64)])
def test_paper_figure_one_formulas(stage, paper, psi, n):
    # The paper's table, written out by hand, for K = 12 and for 8-bit Adam's K = 6.
    assert per_gpu(psi, n, stage, recipes.MIXED_ADAM).total == paper(psi, n, 12)
    assert per_gpu(psi, n, stage, recipes.MIXED_ADAM_8BIT).total == paper(psi, n, 6)


def test_breakdown_of_zero2_at_article_size():
    held = per_gpu(PSI, N, Stage.ZERO2)
    assert (held.weights, held.gradients, held.optimizer) == (
        15 * GB,
        Fraction("1.875") * GB,
        Fraction("11.25") * GB,
    )
    assert held.in_unit("GB")["total"] == Fraction("28.125")
    assert held.in_unit("GiB")["total"] == Fraction(28_125_000_000, GiB)


def test_padded_split_rounds_each_shard_up():
    # 10 elements on 4 ranks: real code keeps 3 per rank, 12 in all, 2 of them padding.
    assert memory.shard_elements(10, 4) == Fraction(5, 2)
    assert memory.shard_elements(10, 4, padded=True) == 3
    assert per_gpu(10, 4, 3, padded=True).total == 3 * 16


def test_cluster_total_and_saving():
    assert cluster_total(PSI, N, 0) == 8 * 120 * GB
    assert cluster_total(PSI, N, 3) == 120 * GB  # no replication left
    assert saving(PSI, N, 3) == Fraction(7, 8)
    assert saving(PSI, N, 0) == 0
    assert saving(PSI, N, 1, recipes.custom(0, 0, 0)) == 0


def test_max_params_on_80_gb_cards():
    assert max_params(1, "80GB", 0) == 5 * 10**9
    assert max_params(8, 80 * GB, 3) == 40 * 10**9
    assert max_params(8, 80 * GB, 1) == 80 * GB * 8 // (4 * 8 + 12)
    assert max_params(8, 80 * GB, 1, recipes.custom(0, 0, 0)) is None


def test_min_gpus_matches_a_search():
    for stage in Stage:
        found = next((n for n in range(1, 200) if per_gpu(PSI, n, stage).total <= 32 * GB), None)
        assert min_gpus(PSI, "32GB", stage) == found
    assert min_gpus(PSI, "32GB", 1) == 45  # 30 GB + 90 GB / N ≤ 32 GB needs N ≥ 45


def test_min_gpus_none_when_replicated_state_fills_the_card():
    assert min_gpus(PSI, "30GB", 1) is None  # 4Ψ = 30 GB is left even with infinitely many GPUs
    assert min_gpus(PSI, "15GB", 2) is None  # 2Ψ = 15 GB, and the shard needs room too
    assert min_gpus(PSI, "121GB", 0) == 1
    assert min_gpus(PSI, "119GB", 0) is None
