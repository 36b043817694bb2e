"""Lesson 06's four checks of a DeepSpeed pick (planning.pick_checks): each figure is what its own module
computes, the verdicts hold each to its line, the table gives lesson 06's ways out, and bad input is refused
in one line."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zero_lessons import GB, memory
from zero_lessons.planning import ds_estimator, pick_checks, step_check
from zero_lessons.stages import Stage

PSI = 7_500_000_000
EMBEDDING = 50_257 * 4_352  # lesson 06's largest layer


@settings(max_examples=100, deadline=None)
@given(
    params=st.integers(1, 10**13),
    gpus=st.integers(1, 1024),
    card=st.integers(1, 10**12),
    stage=st.sampled_from([2, 3]),
    share=st.fractions(0, 1),
)
def test_each_figure_is_its_modules_and_each_verdict_its_line(params, gpus, card, stage, share):
    largest = int(params * share)
    found = pick_checks.four_checks(params, gpus, card, stage, largest)
    paper = memory.per_gpu(params, gpus, stage).total
    assert (found.paper, found.at_step) == (paper, step_check.at_step(params, gpus, stage))
    if stage == 2:
        assert found.estimator == ds_estimator.zero2(params, gpus, cpu_offload=False).gpu_bytes
        assert found.backward == paper + 2 * 10**9  # two 1 GB buckets
    else:
        plain = ds_estimator.zero3(params, largest, gpus, cpu_offload=False, cpu_offload_params=False)
        assert found.estimator == plain.gpu_bytes and found.backward is None
    room = Fraction(card) * 9 / 10
    assert found.verdicts[:3] == (paper <= room, found.estimator <= room, found.at_step <= card - 10**9)
    assert found.left == card - max(found.at_step, found.backward or 0)
    assert found.thin == (0 <= found.left < 10**9)


def test_lesson_06s_ways_out_on_32_gb_cards():
    text = pick_checks.table(PSI, "32GB", [(2, 8), (2, 9), (2, 10), (2, 16), (3, 8)], EMBEDDING)
    assert (
        "| the paper, within 28.8 GB? | the estimator, within 28.8 GB? "
        "| the optimizer step, leaving 1 GB of 32 GB?" in text
    )
    assert (
        "| ZeRO-2 on 8 | 28.125: yes | 31.875: **no** | 33.75: **no** | 30.125: yes | over by 1.75 GB |"
        in text
    )
    assert (
        "| ZeRO-2 on 9 | 26.667: yes | 30: **no** | 31.667: **no** | 28.667: yes | 0.333 GB: **thin** |"
        in text
    )
    assert "| ZeRO-2 on 10 | 25.5: yes | 28.5: yes | 30: yes | 27.5: yes | 2 GB |" in text
    assert (
        "| ZeRO-3 on 8 | 15: yes | 17.750: yes | 21.625: yes | — (needs a step model: lesson 14) "
        "| 10.375 GB, at the step |" in text
    )
    five = pick_checks.four_checks(PSI, 5, "32GB", Stage.ZERO3, EMBEDDING)  # lesson 06's exercise 4
    assert five.verdicts[:3] == (True, True, True) and five.at_step == 31 * GB  # one sub-group's copies
    assert five.left == GB and not five.thin


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: pick_checks.four_checks(PSI, 8, "32GB", 1), ValueError, "stage must be ZeRO-2 or ZeRO-3"),
        (lambda: pick_checks.four_checks(PSI, 2000, "32GB", 2), ValueError, "gpus"),
        (lambda: pick_checks.four_checks(PSI, 8, "32GB", 3, PSI + 1), ValueError, "largest"),
        (lambda: pick_checks.four_checks(PSI, 8, "lots", 2), ValueError, "card"),
        (lambda: pick_checks.table(PSI, "32GB", []), TypeError, "cases"),
        (lambda: pick_checks.table(PSI, "32GB", [2, 8]), TypeError, "each of cases"),
        (lambda: pick_checks.table(PSI, "32GB", [(2, 8)], unit="GX"), ValueError, "unit"),
    ],
)
def test_bad_input_is_refused_in_one_line(call, error, words):
    with pytest.raises(error, match=words) as caught:
        call()
    assert "\n" not in str(caught.value)
