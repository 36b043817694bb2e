"""The figures draw what they claim: one bar per stage and state, one curve per stage."""

import re
from fractions import Fraction

import matplotlib
import pytest

matplotlib.use("Agg")

from zero_lessons import GB, memory, units
from zero_lessons.inputs import Setup
from zero_lessons.present import bar_limits, figures, plots, svg
from zero_lessons.present.table import stage_table
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


def test_the_headroom_band_is_hatched_behind_the_bars_and_named_in_the_legend():
    """The band is grey hatching under every bar (a bar's colour never reads as the band), in the legend
    beside the dotted line of what it leaves; its inset draws it the same way."""
    ax = plots.plot_stage_bars(7_500_000_000, 8, gpu_memory="30GB", headroom=Fraction(1, 10)).axes[0]
    for axes in (ax, *ax.child_axes):
        [band] = [patch for patch in axes.patches if patch.get_hatch()]
        bars = [bar for container in axes.containers for bar in container]
        assert band.get_zorder() < min(bar.get_zorder() for bar in bars) and band.get_facecolor()[3] == 0
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend[1:3] == ["keeping 10% free", "90% of the card: 27 GB"]
    seven = figures.Chart("bars", tuple("abcdefg"), {"s": (1,) * 7}, {"s": "k"})
    assert plots.draw(seven).get_figwidth() == 8.4 + plots.BAR_WIDTH  # a bar past six: wider by one


def test_a_thin_headroom_band_gets_a_zoomed_inset_of_the_bars_near_it():
    """On 30 GB cards ZeRO-2's 28.125 GB falls in a 3 GB band of a 0-120 GB axis: the inset shows it alone."""
    ax = plots.plot_stage_bars(7_500_000_000, 8, gpu_memory="30GB", headroom=Fraction(1, 10)).axes[0]
    [inset] = ax.child_axes
    assert inset.get_ylim() == (21, 33)  # two band widths under the 27 GB line, one over the card
    assert [t.get_text() for t in inset.get_xticklabels()] == ["ZeRO-2"]  # the one top in 21-33 GB
    stacked = [bar.get_height() for container in inset.containers for bar in container]
    assert len(stacked) == 3 and sum(stacked) == 28.125
    assert [line.get_ydata()[0] for line in inset.lines] == [30, 27]
    assert [t.get_text() for t in inset.texts] == ["28.125"]
    wide = plots.plot_stage_bars(
        1_311_524_864, 8, gpu_memory="24GB", headroom=Fraction(1, 10), activations=13 * GB
    )
    assert wide.axes[0].child_axes == []  # 2.4 GB is over 5% of a 35 GB axis: the band reads as it is
    assert plots.plot_stage_bars(7_500_000_000, 8, gpu_memory="32GB").axes[0].child_axes == []  # no band


def test_a_top_just_under_the_band_is_labelled_inside_its_bar_so_it_reads_as_under_the_line():
    """Lesson 04's 1.3 B case: ZeRO-1's top sits 0.7 GB under the 21.6 GB line of a 35 GB axis. Drawn above
    the bar, its label would sit in the band; it goes inside the bar. Other tops keep theirs above."""
    ax = plots.plot_stage_bars(
        1_311_524_864, 8, gpu_memory="24GB", headroom=Fraction(1, 10), activations=13_690 * 10**6
    ).axes[0]
    tops = [sum(bars[i].get_height() for bars in ax.containers) for i in range(4)]
    labels = {round(t.xy[1], 6): t.get_va() for t in ax.texts if t.xycoords == "data"}  # each bar's label
    assert sorted(labels) == sorted(round(v, 6) for v in tops)
    under = [v for v in tops if 21.6 - bar_limits.UNDER_BAND * max(tops) < v < 21.6]
    assert len(under) == 1 and round(under[0], 1) == 20.9  # ZeRO-1
    assert [labels[round(v, 6)] for v in tops] == ["bottom", "top", "bottom", "bottom"]
    banded = plots.plot_stage_bars(7_500_000_000, 8, gpu_memory="32GB").axes[0]  # no band: every label above
    assert [t.get_va() for t in banded.texts if t.xycoords == "data"] == ["bottom"] * 4


def test_scaling_and_step_time_figures():
    ax = plots.plot_scaling(7_500_000_000, max_gpus=64).axes[0]
    assert len([line for line in ax.lines if line.get_gid() != "floor"]) == 4  # one curve per stage
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
    floors = ["floor 30 GB", "floor 15 GB"]  # stage 1 keeps 4 B per parameter whole, stage 2 keeps 2 B
    assert [t.get_text() for t in ax.texts] == ["80 GB", *floors, "120", "41.25", "28.125", "15", "8 GPUs"]
    assert [line.get_ydata()[0] for line in ax.lines if line.get_gid() == "floor"] == [30, 15]
    assert [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == ":"] == [8]
    plain = plots.plot_scaling(7_500_000_000, gpu_memory="80GB").axes[0]  # lesson 02's chart: no mark
    assert len(plain.lines) == 7 and [t.get_text() for t in plain.texts] == ["80 GB", *floors]


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


def test_stage_bars_put_activations_on_top_and_mark_the_headroom():
    params, gpus, act = 7_500_000_000, 8, 1_545_000_000
    table = stage_table(params, gpus, gpu_memory="32GB")
    chart = figures.stage_bars(table, activations=act, headroom=Fraction(1, 10))
    assert list(chart.series) == ["weights", "gradients", "optimizer state", "activations"]
    held = memory.per_stage(Setup(params, gpus))
    for i, stage in enumerate(Stage):
        parts = [held[i].weights, held[i].gradients, held[i].optimizer, act]
        assert [s[i] for s in chart.series.values()] == [float(p / GB) for p in parts], stage
        assert chart.labels[i] == units.format_number((held[i].total + act) / GB)
    assert (chart.line, chart.band) == (32.0, float(32 * Fraction(9, 10)))
    assert chart.band_label == "keeping 10% free"
    ax = plots.draw(chart).axes[0]
    assert len(ax.patches) == 4 * 4 + 1  # four segments per stage, and the shaded headroom
    assert [p.get_height() for p in ax.patches[12:16]] == pytest.approx([float(Fraction(act) / GB)] * 4)
    assert [line.get_ydata()[0] for line in ax.lines] == [32.0, 28.8]


def test_stage_bars_without_activations_or_headroom_are_unchanged():
    table = stage_table(7_500_000_000, 8, gpu_memory="32GB")
    assert figures.stage_bars(table) == figures.stage_bars(table, activations=0, headroom=0)
    assert figures.stage_bars(table).band is None and "activations" not in figures.stage_bars(table).series


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"activations": -1}, ValueError, "activations must be at least 0 bytes, got -1"),
        ({"activations": 1.5}, TypeError, "activations must be bytes as an int or Fraction, got float 1.5"),
        (
            {"headroom": 1},
            ValueError,
            "headroom must be a share of each GPU from 0 to below 1, such as 0.1, got 1",
        ),
        ({"headroom": -0.1}, ValueError, "headroom must be a number ≥ 0"),
        ({"headroom": Fraction(1, 10), "gpu_memory": None}, ValueError, "headroom needs gpu_memory"),
    ],
)
def test_stage_bars_refuse_bad_activations_or_headroom(kwargs, error, message):
    setup = {"gpu_memory": "32GB", **kwargs}
    with pytest.raises(error, match=re.escape(message)):
        plots.plot_stage_bars(7_500_000_000, 8, **setup)


def test_stage_bars_take_a_note_as_their_second_title_line():
    table = stage_table(1_311_000_000, 8, gpu_memory="24GB")
    plain, noted = (
        figures.stage_bars(table),
        figures.stage_bars(table, note="FlashAttention, nothing recomputed"),
    )
    assert noted.title == plain.title + "\nFlashAttention, nothing recomputed" and "\n" not in plain.title
    fig = plots.plot_stage_bars(
        1_311_000_000, 8, gpu_memory="24GB", note="FlashAttention, nothing recomputed"
    )
    assert fig.axes[0].get_title().endswith("\nFlashAttention, nothing recomputed")
    with pytest.raises(TypeError, match="note must be text"):
        figures.stage_bars(table, note=3)
    assert "mixed-adam · FlashAttention, nothing recomputed</text>" in svg.draw(noted)  # SVG text: one line
