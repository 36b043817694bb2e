"""Hypothesis properties of the exact memory model, over the whole promised domain."""

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from zero_lessons import recipes
from zero_lessons.checks import MAX_GPUS, MAX_PARAMS
from zero_lessons.memory import cluster_total, per_gpu, shard_elements
from zero_lessons.stages import Stage

params = st.integers(1, MAX_PARAMS)
gpus = st.integers(1, MAX_GPUS)
byte_counts = st.fractions(min_value=0, max_value=64, max_denominator=16)
recipe = st.one_of(
    st.sampled_from(list(recipes.PRESETS.values())),
    st.builds(recipes.custom, byte_counts, byte_counts, byte_counts),
)


@given(params, gpus, recipe)
def test_each_stage_holds_no_more_than_the_one_before(psi, n, r):
    totals = [per_gpu(psi, n, s, r).total for s in Stage]
    assert totals == sorted(totals, reverse=True)


@given(params, recipe)
def test_one_gpu_makes_every_stage_equal(psi, r):
    assert len({per_gpu(psi, 1, s, r) for s in Stage}) == 1


@given(params, gpus, recipe)
def test_stage_three_times_gpus_is_data_parallel(psi, n, r):
    assert per_gpu(psi, n, 3, r).total * n == per_gpu(psi, n, 0, r).total
    assert cluster_total(psi, n, 3, r) == per_gpu(psi, n, 0, r).total


@given(params, gpus, st.sampled_from(list(Stage)), recipe, st.booleans())
def test_breakdown_adds_up(psi, n, stage, r, padded):
    held = per_gpu(psi, n, stage, r, padded=padded)
    assert held.weights + held.gradients + held.optimizer == held.total
    assert all(isinstance(v, Fraction) for v in (held.weights, held.gradients, held.optimizer))


@given(
    st.integers(MAX_PARAMS - 10**6, MAX_PARAMS),
    st.integers(MAX_GPUS - 1000, MAX_GPUS),
    st.sampled_from(list(Stage)),
)
def test_exact_at_the_extremes(psi, n, stage):
    held = per_gpu(psi, n, stage)
    # Rebuild the total from integers alone: numerator over N, no float anywhere.
    split = sum(b for s, b in (("optimizer", 12), ("gradients", 2), ("weights", 2)) if stage.partitions(s))
    assert held.total * n == (16 - split) * psi * n + split * psi
    assert held.total == Fraction((16 - split) * psi * n + split * psi, n)


@given(params, gpus, st.sampled_from(list(Stage)), recipe)
@settings(max_examples=300)
def test_padding_never_saves_and_vanishes_when_gpus_divide_params(psi, n, stage, r):
    padded, exact = per_gpu(psi, n, stage, r, padded=True), per_gpu(psi, n, stage, r)
    assert padded.total >= exact.total
    assert (padded == exact) == (
        psi % n == 0
        or stage == 0
        or r.total_bytes == 0
        or all(r.bytes_for(s) == 0 for s in stage.partitioned)
    )
    assert shard_elements(psi * n, n, padded=True) == psi
