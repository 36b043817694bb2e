"""`run.stage3_plan`: lesson 13's example at stage 3 as the loss runs, by the step model and by DeepSpeed's
rules, and the peak to plan with."""

import pytest

from zero_lessons.planning import DeepSpeed
from zero_lessons.planning.step_choices import MODELS
from zero_lessons.run.example import SHAPE, example_step, loss_bytes
from zero_lessons.run.stage3_plan import AtLoss, at_loss

H = SHAPE.hidden
BLOCK = 12 * H * H  #: a block's four weight matrices, in elements (QKV 3h², output h², the MLP's 4h² twice)
MLP = 4 * H * H  #: one of the MLP's two matrices


def test_at_the_defaults_deepspeed_holds_blocks_29_to_32_and_block_28s_mlp_the_step_model_four_blocks():
    got = at_loss()
    assert got.deepspeed == 2 * (4 * BLOCK + 2 * MLP)  # blocks 29-32 whole, block 28's two MLP matrices
    assert got.step_model == 2 * 4 * BLOCK  # blocks 30-32, and block 32 again in its all-gather buffer
    step = example_step(SHAPE, DeepSpeed(stage=3))
    assert (
        got.column == step.after_forward.total + loss_bytes(SHAPE) == step.peak_with_loss(loss_bytes(SHAPE))
    )
    assert got.plan == got.column + 2 * (2 * MLP) > got.own_peak == step.peak.total
    assert round(got.plan / 10**9, 2) == 50.52 and round(got.column / 10**9, 2) == 50.22


def test_reuse_distance_zero_frees_nothing_at_the_loss_by_deepspeeds_rules():
    """The prefetcher, a matrix at a time, has walked past the blocks' backward uses: they stay gathered."""
    default, reuse_off = at_loss(), at_loss(DeepSpeed(stage=3, max_reuse_distance=0))
    assert reuse_off.deepspeed == default.deepspeed and reuse_off.plan == default.plan
    assert reuse_off.step_model == 2 * 2 * BLOCK < default.step_model  # the step model frees blocks 30, 31


@pytest.mark.parametrize("knob", [{"prefetch_bucket_size": 0}, {"max_live_parameters": 10**8}])
def test_without_prefetch_deepspeed_holds_only_what_reuse_keeps(knob):
    got = at_loss(DeepSpeed(stage=3, **knob))
    assert got.deepspeed == 2 * (2 * BLOCK + MLP)  # blocks 31 and 32, and block 30's second MLP matrix
    assert got.plan == got.column - got.step_model + got.deepspeed < at_loss().plan


def test_a_higher_persistence_threshold_keeps_the_output_projections_out_of_the_gathers():
    got = at_loss(DeepSpeed(stage=3, param_persistence_threshold=2 * 10**7))
    # blocks 28 to 32, each without its h × h output projection (18.9 M elements, now kept whole)
    assert H * H <= 2 * 10**7 < 3 * H * H and got.deepspeed == 2 * 5 * (BLOCK - H * H)


def test_plan_takes_the_step_models_own_peak_where_it_is_higher():
    assert AtLoss(column=10, step_model=5, deepspeed=1, own_peak=8).plan == 8
    assert AtLoss(column=10, step_model=5, deepspeed=7, own_peak=8).plan == 12


def test_another_shape_is_counted_on_its_own_modules():
    shape = MODELS["gpt2-xl"]
    got = at_loss(shape=shape)
    assert got.column == example_step(shape, DeepSpeed(stage=3)).after_forward.total + loss_bytes(shape)
    assert 0 < got.deepspeed and 0 < got.step_model


def test_bad_input_gets_a_one_line_error_naming_the_field():
    with pytest.raises(ValueError, match=r"^framework.stage must be 3 .*got 2$"):
        at_loss(DeepSpeed(stage=2))
    with pytest.raises(TypeError, match=r"^framework must be a planning.DeepSpeed"):
        at_loss("stage 3")
    with pytest.raises(TypeError, match=r"^shape must be an activations.Transformer"):
        at_loss(shape="7.5b")


def test_the_output_layer_as_one_more_module_stops_the_look_ahead_sooner():
    """With the head walked too, DeepSpeed holds its V·h weights, blocks 30 to 32 and block 29's MLP."""
    from zero_lessons.planning import ds_scale
    from zero_lessons.run.stage3_plan import modules

    walked = modules(head=True)
    assert walked[:-1] == modules() == ds_scale.gpt_modules() and walked[-1] == (SHAPE.vocab * H,)
    held = ds_scale.held_at_loss(walked)
    assert held[len(walked) - 1] == SHAPE.vocab * H
    got, without = at_loss(head=True), at_loss()
    assert got.deepspeed == 2 * (SHAPE.vocab * H + 3 * BLOCK + 2 * MLP) < without.deepspeed
    assert (got.column, got.step_model, got.own_peak) == (
        without.column,
        without.step_model,
        without.own_peak,
    )
    assert round(got.plan / 10**9, 2) == 50.5
    with pytest.raises(TypeError, match=r"^head must be True or False"):
        at_loss(head="yes")


def test_planned_is_the_step_models_peak_with_the_loss_below_stage_3_and_at_loss_at_it():
    from zero_lessons.run.stage3_plan import planned

    z2 = DeepSpeed(stage=2, overlap_comm=True)
    assert planned(z2) == example_step(SHAPE, z2).peak_with_loss(loss_bytes(SHAPE))
    assert planned(DeepSpeed(stage=3)) == at_loss().plan
    with pytest.raises(TypeError, match=r"^framework must be a planning.DeepSpeed"):
        planned("stage 2")
