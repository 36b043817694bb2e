"""Lesson 06's figure and table of DeepSpeed's estimator beside the optimizer step (present.estimator_bars):
each bar's total is what another module counts its own way (the paper's `memory.per_gpu`, DeepSpeed's
estimator re-derived in `ds_estimator`, lesson 04's `step_check.at_step`), the table's bytes per shard element
add up to the lesson's 14, 18, 20 and 16, 18, 22, and bad input is refused in one line."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zero_lessons import GB, memory
from zero_lessons.planning import ds_estimator, pick_checks, step_check
from zero_lessons.present import estimator_bars, plots
from zero_lessons.stages import Stage

PSI = 7_500_000_000
EMBEDDING = 50_257 * 4_352  # lesson 06's largest layer


def _totals(params, gpus, largest):
    return {name: sum(parts.values()) for name, parts in estimator_bars.bars(params, gpus, largest).items()}


@settings(max_examples=120, deadline=None)
@given(params=st.integers(1, 10**13), gpus=st.integers(1, 1024), share=st.fractions(0, 1))
def test_each_bar_is_what_another_module_counts(params, gpus, share):
    largest = int(params * share)
    got = _totals(params, gpus, largest)
    for stage in (Stage.ZERO2, Stage.ZERO3):
        assert got[f"{stage.label}, paper"] == memory.per_gpu(params, gpus, stage).total
        assert got[f"{stage.label}, at the step"] == step_check.at_step(params, gpus, stage)
    assert got["ZeRO-2, backward pass"] == pick_checks.four_checks(params, gpus, 10**15, 2).backward
    # DeepSpeed truncates its split bytes to whole bytes; the bars keep them exact.
    zero2 = ds_estimator.zero2(params, gpus, cpu_offload=False).gpu_bytes
    zero3 = ds_estimator.zero3(params, largest, gpus, cpu_offload=False, cpu_offload_params=False).gpu_bytes
    assert 0 <= got["ZeRO-2, estimator"] - zero2 < 1 and 0 <= got["ZeRO-3, estimator"] - zero3 < 1


def test_lesson_06s_bars_for_the_articles_model_on_8_gpus():
    parts = estimator_bars.bars(PSI, 8, EMBEDDING)
    assert {name: sum(p.values()) / GB for name, p in parts.items()} == {
        "ZeRO-2, paper": 28.125,
        "ZeRO-2, estimator": 31.875,
        "ZeRO-2, backward pass": 30.125,
        "ZeRO-2, at the step": 33.75,
        "ZeRO-3, paper": 15,
        "ZeRO-3, estimator": Fraction(16_875, 1000) + Fraction(4 * EMBEDDING, GB),  # prints "17.750"
        "ZeRO-3, at the step": 21.625,
    }
    assert parts["ZeRO-3, estimator"]["largest layer's buffer"] == 4 * EMBEDDING
    assert parts["ZeRO-3, at the step"]["gradient buckets"] == GB
    assert parts["ZeRO-2, backward pass"]["gradient buckets"] == 2 * GB  # two buckets, with overlap_comm
    assert parts["ZeRO-3, estimator"]["16-bit gradients"] == 0  # the estimator's stage 3 leaves them out
    assert parts["ZeRO-2, at the step"]["flattened 16-bit gradient copy"] == 2 * PSI / 8


def test_the_table_adds_up_to_the_lessons_bytes_per_shard_element():
    split = {
        stage: [sum(split.values()) for split, _ in estimator_bars.per_element(stage).values()]
        for stage in (2, "ZeRO-3")
    }
    assert split == {2: [14, 18, 20], "ZeRO-3": [16, 18, 22]}
    text = estimator_bars.table()
    assert "| **in all, split** | **14** | **18** | **20** | **16** | **18** | **22** |" in text
    assert "| 16-bit weights | whole | whole | whole | 2 | 2 | 2 |" in text
    assert "| 16-bit gradients | 2 | 2 | 2 | 2 | — | 2 |" in text
    assert "| also counted | — | — | — | — | 4 B per parameter" in text  # stage 2's whole weights: their row


def test_the_chart_draws_the_card_and_its_headroom_band():
    chart = estimator_bars.chart(PSI, 8, EMBEDDING, "32GB")
    assert (chart.line, chart.band, chart.margin) == (32, 28.8, 31)  # card, counts' and moments' limits
    assert (chart.band_label, chart.margin_label) == ("counts keep 10% free", "moments leave 1 GB")
    assert chart.labels == ("28.125", "31.875", "30.125", "33.75", "15", "17.750", "21.625")
    assert chart.x[0] == "ZeRO-2\npaper" and "largest layer's buffer" in chart.series
    bare = estimator_bars.chart(PSI, 8, 0, headroom=0)
    assert bare.line is None and bare.band is None and "largest layer's buffer" not in bare.series
    assert estimator_bars.chart(PSI, 8, EMBEDDING, "32GB", headroom=0).band is None
    assert (chart.band_bars, chart.margin_bars) == ((0, 1, 4, 5), (2, 3, 6))  # counts; moments of the step
    ax = plots.draw(chart).axes[0]
    hatched = [c for c in ax.collections if c.get_hatch()]
    spans = sorted((v[:, 0].min(), v[:, 0].max()) for c in hatched for v in (c.get_paths()[0].vertices,))
    assert spans == [(-0.5, 1.5), (3.5, 5.5)]  # the headroom band over the two counts of each stage alone
    dashes = [c for c in ax.collections if not c.get_hatch() and len(c.get_segments()) == 1]
    moments = sorted(tuple(seg[:, 0]) for c in dashes for seg in c.get_segments() if seg[0, 1] == 31)
    assert moments == [(1.5, 3.5), (5.5, 6.5)]  # the moments' 1 GB line over the others
    inks = {t.get_text(): t.get_color() for t in ax.texts if t.get_text() in ("28.125", "30.125")}
    assert inks == {
        "28.125": "white",
        "30.125": "black",
    }  # inside its bar: white on green, black on light gold


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: estimator_bars.per_element(1), ValueError, "stage must be ZeRO-2 or ZeRO-3"),
        (lambda: estimator_bars.bars(PSI, 8, PSI + 1), ValueError, "largest"),
        (lambda: estimator_bars.bars(PSI, 0, 1), ValueError, "gpus"),
        (lambda: estimator_bars.chart(PSI, 8, 1, "32GB", headroom=1), ValueError, "headroom"),
        (lambda: estimator_bars.chart(PSI, 8, 1, "lots"), ValueError, "card"),
        (lambda: estimator_bars.chart(PSI, 8, 1, unit="GX"), ValueError, "unit"),
        (lambda: estimator_bars.chart(PSI, 8, 1, headroom=Fraction(-1, 10)), ValueError, "headroom"),
    ],
)
def test_bad_input_is_refused_in_one_line(call, error, words):
    with pytest.raises(error, match=words) as caught:
        call()
    assert "\n" not in str(caught.value)
