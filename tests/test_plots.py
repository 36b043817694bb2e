"""The figures draw what they claim: one bar per stage and state, one curve per stage."""

import re

import matplotlib
import pytest

matplotlib.use("Agg")

from zero_lessons.present import plots
from zero_lessons.stages import Stage


def test_partitioning_figure_has_a_panel_per_stage():
    fig = plots.plot_partitioning(4)
    assert len(fig.axes) == len(Stage)
    # data parallel: 3 whole bars per GPU; ZeRO-3: 3 faded + 3 owned per GPU.
    assert len(fig.axes[0].patches) == 4 * 3
    assert len(fig.axes[3].patches) == 4 * 6


def test_stage_bars_heights_add_to_the_table():
    fig = plots.plot_stage_bars(7_500_000_000, 8, gpu_memory="32GB")
    ax = fig.axes[0]
    totals = [sum(p.get_height() for p in ax.patches[i::4]) for i in range(4)]
    assert totals == [120, 41.25, 28.125, 15]
    assert ax.lines[0].get_ydata()[0] == 32


def test_scaling_and_step_time_figures():
    assert len(plots.plot_scaling(7_500_000_000, max_gpus=64).axes[0].lines) == 4
    fig = plots.plot_step_times(7_500_000_000, 8, {"a": "25 GB/s", "b": "100 Gb/s"})
    assert len(fig.axes[0].patches) == 8


def test_scaling_marks_the_gpu_count_as_the_explorer_does():
    ax = plots.plot_scaling(7_500_000_000, gpu_memory="80GB", gpus=8).axes[0]
    dots = [line for line in ax.lines if line.get_marker() == "o"]
    assert [(d.get_xdata()[0], d.get_ydata()[0]) for d in dots] == [
        (8, 120),
        (8, 41.25),
        (8, 28.125),
        (8, 15),
    ]
    assert [t.get_text() for t in ax.texts] == ["80 GB", "120", "41.25", "28.125", "15", "8 GPUs"]
    assert [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == ":"] == [8]
    plain = plots.plot_scaling(7_500_000_000, gpu_memory="80GB").axes[0]  # lesson 02's chart: no mark
    assert len(plain.lines) == 5 and [t.get_text() for t in plain.texts] == ["80 GB"]


@pytest.mark.parametrize(
    ("gpus", "error", "message"),
    [
        (0, ValueError, "gpus must be a whole number from 1 to 1,024, got 0"),
        (2048, ValueError, "gpus must be a whole number from 1 to 1,024, got 2,048"),
        (True, TypeError, "gpus must be a whole number from 1 to 1,024"),
        (8.0, TypeError, "gpus must be a whole number from 1 to 1,024"),
    ],
)
def test_scaling_refuses_a_gpu_count_off_the_chart(gpus, error, message):
    with pytest.raises(error, match=re.escape(message)):
        plots.plot_scaling(7_500_000_000, gpus=gpus)
