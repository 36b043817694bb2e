"""How DeepSpeed's knobs cut one step's traffic (`ds_traffic.knob_collectives`), Linear by Linear.

The collectives are checked against `ds_scale.predict`, whose rules tests/test_lab.py pins message by message
on real ranks, and against small cases worked by hand."""

import pytest

from zero_lessons.planning import DDP, DeepSpeed, ds_scale, ds_traffic, transformer_model
from zero_lessons.planning.step_choices import MODELS

SHAPE = MODELS["7.5b"]
GPT = transformer_model(SHAPE)
MODULES = ds_scale.gpt_modules()  # as DeepSpeed fetches the 7.5 B GPT: each Linear and norm a module
H = SHAPE.hidden


def test_stage_2_all_reduces_one_bucket_each_as_worked_by_hand():
    """Stage 2's gradients arrive last module first, bias before weight: 2, then 1, then 3. A bucket of 4
    takes 2 and 1; 3 would overflow it, so it goes alone."""
    found = ds_traffic.knob_collectives(((3, 1), (2,)), 2, DeepSpeed(stage=2, reduce_bucket_size=4))
    assert [(c.kind, c.tensors, c.elements) for c in found] == [
        ("all_reduce", (2, 1), 3),
        ("all_reduce", (3,), 3),
    ]


def test_stage_3_pads_each_tensor_and_leaves_small_ones_whole():
    """Threshold 2: the 2-element bias stays whole; the 5-element weight is cut into 2 pieces of 3."""
    fw = DeepSpeed(stage=3, param_persistence_threshold=2, prefetch_bucket_size=0)
    found = ds_traffic.knob_collectives(((5, 2),), 2, fw)
    assert [(c.kind, c.tensors, c.elements) for c in found] == [("all_gather", (5,), 6)]


@pytest.mark.parametrize("reduce_bucket_size", [500_000_000, 100_000_000])
def test_stage_2_matches_the_scale_rules(reduce_bucket_size):
    found = ds_traffic.knob_collectives(MODULES, 8, DeepSpeed(stage=2, reduce_bucket_size=reduce_bucket_size))
    knobs = ds_scale.Knobs(reduce_bucket_size=reduce_bucket_size)
    expected = [n for op, n in ds_scale.predict(MODULES, 8, knobs)[2].messages if op == "all_reduce"]
    assert [c.elements for c in found] == expected and sum(expected) == GPT.params


@pytest.mark.parametrize(
    ("prefetch", "live", "reuse"),
    [(50_000_000, 10**9, 10**9), (0, 10**9, 10**9), (50_000_000, 10**8, 10**9), (50_000_000, 10**9, 0)],
)
def test_stage_3_matches_the_scale_rules_with_every_tensor_sharded(prefetch, live, reuse):
    fw = DeepSpeed(
        stage=3,
        param_persistence_threshold=0,
        prefetch_bucket_size=prefetch,
        max_live_parameters=live,
        max_reuse_distance=reuse,
    )
    knobs = ds_scale.Knobs(prefetch_bucket_size=prefetch, max_live_parameters=live, max_reuse_distance=reuse)
    found = [c.elements for c in ds_traffic.knob_collectives(MODULES, 8, fw)]
    expected = [n for op, n in ds_scale.predict(MODULES, 8, knobs)[3].messages if op == "all_gather"]
    assert found == expected
    # no tensor needs padding on 8 ranks, so the buffers hold Ψ once, plus what is gathered twice
    assert sum(found) == GPT.params + ds_scale.reuse(MODULES, knobs).gathered_twice


def test_the_split_is_the_step_models_parameters_and_dropping_the_norms_leaves_four_weights_a_block():
    assert sum(n for m in MODULES for n in m) == GPT.params and len(MODULES) == 1 + 6 * SHAPE.layers
    kept_whole = DeepSpeed(stage=3).param_persistence_threshold
    sharded = [[n for n in m if n > kept_whole] for m in MODULES[1:]]
    assert [len(m) for m in sharded[:6]] == [0, 1, 1, 0, 1, 1]  # norms and biases stay whole
    assert [sum(m) for m in sharded[:6]] == [0, 3 * H * H, H * H, 0, 4 * H * H, 4 * H * H]


def test_prefetching_sends_fewer_all_gathers_than_gathering_at_use():
    """Gathered at use, each of a block's four weights comes alone: 1 + 4 × 32 in forward, and 120 again in
    backward. A prefetch stops once it holds 5 × 10⁷ elements, so the output projection (h² = 1.9 × 10⁷)
    shares one with the MLP's first weight, once per block in forward; and the walk keeps two blocks' worth
    more of weights for backward (ds_scale.reuse's by_prefetch, less their norms and biases, kept whole):
    32 + 8 fewer."""
    ahead = ds_traffic.knob_collectives(MODULES, 8, DeepSpeed(stage=3))
    at_use = ds_traffic.knob_collectives(MODULES, 8, DeepSpeed(stage=3, prefetch_bucket_size=0))
    assert (len(ahead), len(at_use)) == (209, 249)
    assert all(len(c.tensors) == 1 for c in at_use) and len(at_use) == 1 + 4 * 32 + 4 * 30
    assert [c.tensors for c in ahead if len(c.tensors) == 2] == [(H * H, 4 * H * H)] * 32
    assert sum(len(c.tensors) for c in ahead) == 249 - 8
    elements = [sum(c.elements for c in side) for side in (ahead, at_use)]
    assert elements == [13_998_408_192, 14_452_965_888]
    assert elements[1] - elements[0] == 2 * 12 * H * H == 454_557_696
    by_prefetch = ds_scale.reuse().by_prefetch
    assert by_prefetch - 2 * 12 * H * H == 2 * 13 * H  # the rest: two blocks' worth of norms and biases


def test_turning_the_max_reuse_distance_off_changes_nothing_at_this_size():
    """The weights the max reuse distance keeps, the prefetcher's walk has already passed at their backward
    use (lesson 11, section 8), so it keeps them anyway: the same all-gathers."""
    default, off = (ds_scale.reuse(knobs=ds_scale.Knobs(max_reuse_distance=d)) for d in (10**9, 0))
    assert (off.by_distance, off.by_prefetch) == (0, default.by_distance + default.by_prefetch)
    assert off.by_prefetch == 985_105_664
    assert off.gathered_twice == default.gathered_twice
    found = [
        ds_traffic.knob_collectives(MODULES, 8, DeepSpeed(stage=3, max_reuse_distance=d)) for d in (10**9, 0)
    ]
    assert found[0] == found[1]


def test_a_block_as_one_module_counts_otherwise():
    """The step model's view, each block one module: gathering at use brings a block's four weights in one
    all-gather, so the same rules give other counts; lesson 12 counts at DeepSpeed's real modules."""
    blocks = [layer.tensors for layer in GPT.layers]
    counts = [
        len(ds_traffic.knob_collectives(blocks, 8, DeepSpeed(stage=3, **knob)))
        for knob in ({}, {"prefetch_bucket_size": 0}, {"max_reuse_distance": 0})
    ]
    assert counts == [185, 63, 191]


def test_a_smaller_bucket_sends_more_than_five_times_as_many_as_buckets_close_at_tensor_boundaries():
    """97 buckets of 10⁸, not 5 × 17 = 85: a bucket is sent before a tensor that would overflow it, and a
    block's MLP weights (4h² = 7.6 × 10⁷ each) leave room in a 10⁸ bucket for little else."""
    sizes = [n for m in MODULES for n in m]
    fills = {
        bucket: [
            sum(sizes[i] for i in g)
            for g in ds_traffic.buckets(ds_traffic.gradient_order(MODULES, 2), sizes, bucket)
        ]
        for bucket in (500_000_000, 100_000_000)
    }
    assert {bucket: len(f) for bucket, f in fills.items()} == {500_000_000: 17, 100_000_000: 97}
    assert len(fills[100_000_000]) > 5 * len(fills[500_000_000])
    assert [round(100 * sum(f) / len(f) / bucket) for bucket, f in fills.items()] == [88, 77]
    assert all(sum(f) == GPT.params for f in fills.values())


def test_the_traffic_helpers_refuse_what_they_cannot_count():
    with pytest.raises(TypeError, match="fw must be a planning DeepSpeed"):
        ds_traffic.knob_collectives(MODULES, 8, DDP())
    with pytest.raises(ValueError, match="gpus"):
        ds_traffic.knob_collectives(MODULES, 0, DeepSpeed(stage=2))
