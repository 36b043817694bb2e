"""Lesson 04's optimizer-step check (planning.step_check): the figures lesson 04 gives, the fewest GPUs that
pass it found by bisection and agreeing with a count-by-count check, and bad input refused in one line."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zero_lessons import GB
from zero_lessons.planning import DeepSpeed, step_check, timeline, transformer_model
from zero_lessons.planning.activations import Transformer
from zero_lessons.planning.step_choices import MODELS
from zero_lessons.stages import Stage

PSI = 7_500_000_000


def test_lesson_04s_figures_at_the_optimizer_step():
    """Section 3's table: 160 GB DDP 165, ZeRO-1 46.875, ZeRO-2 33.75, ZeRO-3 21.625 GB on 8 GPUs."""
    got = [step_check.at_step(PSI, 8, s) / GB for s in Stage]
    assert got == [165, 46.875, 33.75, 21.625]
    assert step_check.extra(PSI, 8, Stage.ZERO2) == 6 * PSI / 8 == 5.625 * GB
    assert step_check.extra(PSI, 8, 3) == 5.625 * GB + GB and step_check.extra(PSI, 8, 0) == 45 * GB


def test_the_fewest_gpus_lesson_04_plans_from():
    """Cards filled exactly at the step: stage 2 on 30 GB cards at 10 GPUs, stage 3 on 12 GB at 15; the
    64.8 B shape under stage 3 on 80 GB cards needs 15, its shard over one sub-group; DDP either fits on one
    GPU or on none."""
    assert step_check.fewest_gpus(PSI, "30GB", 2) == 10 and step_check.at_step(PSI, 10, 2) == 30 * GB
    assert step_check.fewest_gpus(PSI, "12GB", 3) == 15 and step_check.at_step(PSI, 15, 3) == 12 * GB
    big = Transformer(
        layers=80, hidden=8192, heads=64, seq_len=4096, micro_batch=1
    ).params  # lesson 04's 64.8 B
    assert step_check.fewest_gpus(big, "80GB", 3) == 15  # 16Ψ/15 + 6 B × 10⁹ + 1 GB = 76.2 GB
    assert round(float(step_check.at_step(big, 15, 3) / GB), 1) == 76.2
    assert step_check.fewest_gpus(PSI, "160GB", 0) is None and step_check.fewest_gpus(PSI, "165GB", 0) == 1
    assert step_check.fewest_gpus(PSI, "1GB", 3) is None  # the bucket alone fills the card


@settings(max_examples=150, deadline=None)
@given(
    params=st.integers(1, 10**11),
    card=st.integers(10**6, 10**12),
    stage=st.sampled_from(list(Stage)),
)
def test_the_bisection_finds_the_fewest_count_that_passes(params, card, stage):
    """At the count found the step fits the card and one GPU fewer it does not; None means even 4,096 GPUs
    leave it over the card."""
    n = step_check.fewest_gpus(params, card, stage)
    if n is None:
        assert step_check.at_step(params, 4096, stage) > card
        return
    if n <= 4096:
        assert step_check.at_step(params, n, stage) <= card
    if 1 < n <= 4097:
        assert step_check.at_step(params, n - 1, stage) > card


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: step_check.at_step(0, 8, 2), "params must be"),
        (lambda: step_check.at_step(PSI, 0, 2), "gpus must be"),
        (lambda: step_check.extra(PSI, 8, 7), "stage"),
        (lambda: step_check.fewest_gpus(PSI, "-3GB", 2), "card"),
        (lambda: step_check.fewest_gpus(PSI, "lots", 2), "card"),
    ],
)
def test_bad_input_is_refused_in_one_line_naming_the_field(call, words):
    with pytest.raises((ValueError, TypeError)) as error:
        call()
    message = str(error.value)
    assert words in message and "\n" not in message


def test_stage_3_copies_one_sub_group_as_the_step_model_does():
    """Above 10⁹ elements a stage-3 shard's step copies are one sub-group's, 6 B × 10⁹; the step model, which
    closes sub-groups at whole tensors and keeps small tensors whole, holds a little more: under 0.1 GB."""
    gpt = transformer_model(MODELS["7.5b"])
    for n in (5, 8):  # a shard of 1.5 and of 0.94 × 10⁹ elements
        modelled = timeline(gpt, DeepSpeed(stage=3), n).phase("optimizer step").total
        assert 0 < modelled - step_check.at_step(gpt.params, n, 3) < GB / 10
    shard = Fraction(gpt.params, 5)
    assert step_check.at_step(gpt.params, 5, 3) == 16 * shard + 6 * step_check.SUB_GROUP + GB
