"""The figures draw what they claim: one bar per stage and state, one curve per stage."""

import matplotlib

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
