"""`run.stage3_plan`: lesson 17's example at stage 3 as the loss runs, by the step model and by DeepSpeed's
rules, and the peak to plan with."""

from fractions import Fraction

import pytest

from zero_lessons.planning import DeepSpeed
from zero_lessons.planning.step_choices import MODELS
from zero_lessons.planning.step_effects import effects
from zero_lessons.planning.step_model import transformer_model
from zero_lessons.planning.step_parts import KINDS
from zero_lessons.run.example import SHAPE, example_step, loss_bytes
from zero_lessons.run.stage3_plan import AtLoss, at_loss, deepspeed_count


def effects_of(**kwargs):
    """`effects` on the example's GPT, with `kwargs`."""
    return effects(transformer_model(SHAPE), 8, **kwargs)


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


def test_deepspeed_count_puts_deepspeeds_gathered_weights_in_the_loss_column_of_tables_and_figures():
    from zero_lessons.planning import timeline, transformer_model
    from zero_lessons.planning.step_effects import CHANGES, effects
    from zero_lessons.present.step_figure import Panel, plot_step
    from zero_lessons.present.step_tables import peak_table
    from zero_lessons.present.step_zoom import tops
    from zero_lessons.run.stage3_plan import deepspeed_count, plan_count

    gpt, loss = transformer_model(SHAPE), loss_bytes(SHAPE)
    step = timeline(gpt, DeepSpeed(stage=3), 8)
    counted = deepspeed_count(step)
    assert step.as_loss_runs is step.after_forward and counted.at_loss is not None
    held = counted.as_loss_runs
    assert (
        held.name == step.after_forward.name and held.bytes_of("gathered parameters") == at_loss().deepspeed
    )
    assert counted.peak_with_loss(loss) == at_loss().plan > step.peak_with_loss(loss)
    assert [p.kind for p in held.parts] == sorted((p.kind for p in held.parts), key=KINDS.index)
    row = peak_table([counted], loss=loss).body[0]
    assert row[4:6] == ("the loss", f"{at_loss().plan / 10**9:.3f}")
    assert tops(Panel("z3", counted, model_loss=loss))["loss"] == Fraction(at_loss().plan, 10**9)
    ck = [c for c in CHANGES if c.knob == "activation checkpointing" and c.before.stage == 3]
    moved = effects(gpt, 8, tuple(ck), loss=loss, recount=plan_count).rows[0]
    assert moved.before == at_loss().plan and moved.after == timeline(
        gpt, DeepSpeed(stage=3), 8, checkpointing=True
    ).peak_with_loss(loss)
    assert plan_count(timeline(gpt, DeepSpeed(stage=2), 8)).at_loss is None  # below stage 3: unchanged
    panel = Panel("z3", counted, model_loss=loss)
    axes, (_, loss_x) = plot_step([panel], "GB").axes[0], panel.columns()
    drawn = [
        p for p in axes.patches if p.get_gid() == "gathered parameters" and p.get_x() < loss_x < p.get_x() + 1
    ]
    assert [round(p.get_height(), 6) for p in drawn] == [round(at_loss().deepspeed / 10**9, 6)]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: deepspeed_count(t(stage=2)), "timeline must be DeepSpeed's stage 3"),
        (lambda t: deepspeed_count(t(stage=3, checkpointing=True)), "without activation checkpointing"),
        (lambda t: deepspeed_count(t(stage=3), shape=MODELS["gpt2-xl"]), "timeline must be of shape's GPT"),
        (lambda t: deepspeed_count("step"), "timeline must be"),
        (lambda t: effects_of(recount=3), "recount must be"),
    ],
)
def test_deepspeed_count_refuses_what_it_does_not_model(call, message):
    from zero_lessons.planning import timeline, transformer_model

    gpt = transformer_model(SHAPE)

    def t(stage, checkpointing=False):
        return timeline(gpt, DeepSpeed(stage=stage), 8, checkpointing=checkpointing)

    with pytest.raises((TypeError, ValueError)) as raised:
        call(t)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_deepspeed_count_puts_deepspeeds_gathered_weights_in_every_forward_and_backward_bar():
    """Each bar holds the most DeepSpeed's rules gather while its modules run: a block's six, and the
    parameter-free steps after them; the phases around the passes keep the step model's count."""
    from zero_lessons.planning import ds_scale, ds_traffic, timeline, transformer_model
    from zero_lessons.run.stage3_plan import _spans, knobs, modules

    step = timeline(transformer_model(SHAPE), DeepSpeed(stage=3), 8)
    counted = deepspeed_count(step)
    big, held = ds_scale.sharded_held(modules(), knobs(DeepSpeed(stage=3)), 100_000)
    sizes = [n for m in big for n in m]
    spans = _spans(len(big), SHAPE.layers)
    covered = sorted(e for r in spans.values() for e in r)  # every entry once, but the loss's
    assert covered == [e for e in range(len(held)) if e != ds_traffic.loss_entry(len(big))]
    assert spans["forward block 1"] == range(3, 15) and spans["backward embedding"] == range(771, 772)
    for before, after in zip(step.phases, counted.phases, strict=True):
        assert after.name == before.name
        assert [p for p in after.parts if p.kind != "gathered parameters"] == [
            p for p in before.parts if p.kind != "gathered parameters"
        ]
        if before.kind in ("forward", "backward"):
            most = max(sum(sizes[i] for i in held[e]) for e in spans[before.name])
            assert after.bytes_of("gathered parameters") == 2 * most
        else:
            assert after == before
    # the cap binds through most of the step: 10⁹ elements and one matrix, as at the loss
    middle = counted.phase("forward block 16").bytes_of("gathered parameters")
    assert middle == counted.as_loss_runs.bytes_of("gathered parameters") == at_loss().deepspeed
    assert counted.peak.name == "backward block 32" and counted.peak.total < at_loss().plan


@pytest.mark.parametrize(
    "knob",
    [
        {},
        {"prefetch_bucket_size": 0},
        {"max_live_parameters": 10**8},
        {"max_reuse_distance": 0},
        {"param_persistence_threshold": 2 * 10**7},
    ],
)
def test_the_plan_is_the_same_whether_read_from_at_loss_or_from_every_bar(knob):
    """Lesson 17 prices the stage-3 keys by `at_loss().plan`; lesson 14's figures draw `plan_count`'s bars.
    With DeepSpeed's count in every bar, the highest with the loss is still that plan, at each key lesson 17
    tries."""
    from zero_lessons.run.stage3_plan import planned

    framework = DeepSpeed(stage=3, **knob)
    counted = deepspeed_count(example_step(SHAPE, framework))
    assert counted.peak_with_loss(loss_bytes(SHAPE)) == at_loss(framework).plan == planned(framework)
    assert counted.loss_is_peak(loss_bytes(SHAPE))
