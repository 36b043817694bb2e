"""`present.peak_bars`: each setup's peak, the loss counted, as one stacked bar part by part."""

import matplotlib

matplotlib.use("Agg")

import pytest

from zero_lessons.lab import timeline_view
from zero_lessons.planning import DDP, DeepSpeed, timeline, transformer_model
from zero_lessons.planning.step_choices import MODELS
from zero_lessons.present.peak_bars import parts, peak_phase, plot_peaks

SHAPE = MODELS["7.5b"]
GPT = transformer_model(SHAPE)
LOSS = timeline_view.at_size(SHAPE, timeline_view.CROSS_ENTROPY_COPIES)["loss"]
SETUPS = [DDP(), DeepSpeed(stage=1), DeepSpeed(stage=2), DeepSpeed(stage=3)]
OFF = [timeline(GPT, fw, 8) for fw in SETUPS]
ON = [timeline(GPT, fw, 8, checkpointing=True) for fw in SETUPS]


def test_each_bar_is_the_peak_with_the_loss_part_by_part():
    for t in OFF + ON:
        heights = parts(t, LOSS, "B")
        assert sum(heights.values()) == t.peak_with_loss(LOSS)
        assert ("loss" in heights) == t.loss_is_peak(LOSS)  # hatched on top only where the loss tops the step
    phase, on_top = peak_phase(OFF[2], LOSS)  # stage 2 without checkpointing: the forward pass's end
    assert phase is OFF[2].after_forward and on_top == LOSS
    assert peak_phase(ON[2], LOSS) == (ON[2].peak, 0)  # with checkpointing: its optimizer step


def test_the_figure_draws_a_bar_per_setup_with_its_total_and_the_article_tick():
    article = {
        "PyTorch DDP": 120,
        "DeepSpeed ZeRO-1": 41.25,
        "DeepSpeed ZeRO-2": 28.125,
        "DeepSpeed ZeRO-3": 15,
    }
    fig = plot_peaks({"off": OFF, "on": ON}, LOSS, article)
    off_ax, on_ax = fig.axes
    assert [t.get_text() for t in off_ax.texts] == ["164.86", "58.85", "58.63", "50.22"]
    assert [t.get_text() for t in on_ax.texts] == ["164.86", "43.20", "33.72", "21.61"]
    assert [tick.get_text() for tick in off_ax.get_xticklabels()] == ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"]
    ticks = sorted(c.get_segments()[0][0][1] for c in off_ax.collections)  # the article's dotted ticks
    assert ticks == [15, 28.125, 41.25, 120]
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "the loss, where it tops the step" in names and "fp32 gradients" in names


def test_bad_regimes_get_a_one_line_error():
    with pytest.raises(TypeError, match="regimes must be a dict of 1 to 4"):
        plot_peaks([OFF], LOSS)
    with pytest.raises(TypeError, match="timeline"):
        parts("not a timeline", LOSS)
    with pytest.raises(TypeError, match="article must be a dict"):
        plot_peaks({"off": OFF}, LOSS, [120])
    with pytest.raises((TypeError, ValueError), match="each article size"):
        plot_peaks({"off": OFF}, LOSS, {"PyTorch DDP": "lots"})
    with pytest.raises(TypeError, match="each article label"):
        plot_peaks({"off": OFF}, LOSS, {1: 120})
    with pytest.raises(TypeError, match="title must be text"):
        plot_peaks({"off": OFF}, LOSS, title=3)
