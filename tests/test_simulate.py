"""Brute-force sharding of real numpy arrays agrees with the closed form, padding included."""

import numpy as np
import pytest

from zero_lessons import memory, recipes, simulate
from zero_lessons.stages import Stage

PSI = simulate.count_params(simulate.TINY_MLP)


def test_tiny_mlp_size():
    assert PSI == 784 * 64 + 64 + 64 * 10 + 10 == 50_890


@pytest.mark.parametrize("gpus", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("stage", list(Stage))
@pytest.mark.parametrize(
    "recipe", [recipes.MIXED_ADAM, recipes.FP32_ADAM, recipes.MEGATRON_18, recipes.MIXED_ADAM_8BIT]
)
def test_counted_bytes_equal_the_padded_formula(gpus, stage, recipe):
    ranks = simulate.split_model(simulate.TINY_MLP, gpus, stage, recipe)
    assert len(ranks) == gpus
    expected = memory.per_gpu(PSI, gpus, stage, recipe, padded=True)
    for rank in ranks:
        assert rank.nbytes() == expected.total
        assert rank.nbytes("optimizer") == expected.optimizer
        assert rank.nbytes("weights") == expected.weights


def test_shards_cover_the_flat_buffer_exactly_once():
    flat = np.arange(10, dtype=np.float32)
    pieces = [simulate.shard(flat, 4, r) for r in range(4)]
    assert [p.size for p in pieces] == [3, 3, 3, 3]
    assert np.array_equal(np.concatenate(pieces)[:10], flat)
    assert np.count_nonzero(np.concatenate(pieces)[10:]) == 0


@pytest.mark.parametrize("gpus", [2, 3, 4, 8])
def test_ring_all_reduce_sums_and_sends_two_psi_times_ring_factor(gpus):
    rng = np.random.default_rng(gpus)
    size = 24 * gpus
    buffers = [rng.standard_normal(size) for _ in range(gpus)]
    results, sent = simulate.ring_all_reduce(buffers)
    for result in results:
        np.testing.assert_allclose(result, np.sum(buffers, axis=0))
    assert sent == 2 * size * (gpus - 1) // gpus


def test_fractional_parts_are_refused():
    with pytest.raises(ValueError, match="whole-byte parts"):
        simulate.split_model(simulate.TINY_MLP, 2, 1, recipes.custom(0.5, 2, 12))
