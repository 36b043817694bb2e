"""Figures for the lessons with matplotlib: any `figures.Chart`, and two lesson-only figures.

`draw` renders the same chart specs that `svg.draw` renders for the explorer, so a lesson's
bars and the explorer's bars are one figure; `plot_partitioning` and `plot_step_times` exist
only here.
"""

from __future__ import annotations

import math
from fractions import Fraction

import matplotlib.pyplot as plt
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from .. import checks, communication, memory, units
from ..inputs import Setup
from ..recipes import MIXED_ADAM, RecipeLike, get
from ..stages import STATES, Stage
from ..units import Size
from . import bar_limits, figures
from .figures import STATE_COLOURS, STATE_NAMES
from .table import stage_table

#: Most GPUs `plot_partitioning` draws, one row each.
MAX_DRAWN_GPUS = 16
#: Most link speeds `plot_step_times` sets side by side.
MAX_LINKS = 8


def _plain(text: str) -> str:
    """User text for a matplotlib label: a "$" would start mathtext, which can fail to parse."""
    return text.replace("$", r"\$")


def plot_partitioning(gpus: int = 4, recipe: RecipeLike = MIXED_ADAM) -> Figure:
    """The ZeRO paper's Figure 1 idea: for each stage and GPU, whole states versus owned shards."""
    gpus, recipe = checks.whole("gpus", gpus, high=MAX_DRAWN_GPUS), get(recipe)
    fig, axes = plt.subplots(len(Stage), 1, figsize=(8, 6.4), sharex=True)
    width = float(recipe.total_bytes)
    for ax, stage in zip(axes, Stage, strict=True):
        for gpu in range(gpus):
            left = 0.0
            for state in STATES[::-1]:  # weights, gradients, optimizer from left to right
                size = float(recipe.bytes_for(state))
                _draw_state(ax, gpu, gpus, left, size, STATE_COLOURS[state], stage.partitions(state))
                left += size
        ax.set_ylabel(stage.label, rotation=0, ha="right", va="center")
        ax.set_yticks(range(gpus), [f"GPU {g}" for g in range(gpus)], fontsize=9)
        ax.set_xlim(0, width)
        ax.invert_yaxis()
        ax.spines[["top", "right"]].set_visible(False)
    axes[-1].set_xlabel(f"bytes per parameter ({_plain(recipe.summary())})")
    handles = [plt.Rectangle((0, 0), 1, 1, color=STATE_COLOURS[s]) for s in STATES[::-1]]
    fig.legend(handles, [STATE_NAMES[s] for s in STATES[::-1]], loc="upper center", ncol=3, frameon=False)
    fig.suptitle(
        "Solid: the GPU keeps its own shard.  Faded: the shards other GPUs keep.", y=0.02, fontsize=9
    )
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    plt.close(fig)
    return fig


def _done(fig: Figure) -> Figure:
    """Lay out `fig` and detach it from pyplot, so a notebook shows it once, as the cell's value."""
    fig.tight_layout()
    plt.close(fig)
    return fig


def _draw_state(ax, gpu: int, gpus: int, left: float, size: float, colour: str, split: bool) -> None:
    """Draw one GPU's copy of one state: whole, or 1/N owned and the rest faded."""
    if not split:
        ax.barh(gpu, size, left=left, color=colour, edgecolor="white")
        return
    piece = size / gpus
    ax.barh(gpu, size, left=left, color=colour, alpha=0.15, edgecolor="white")
    ax.barh(gpu, piece, left=left + gpu * piece, color=colour, edgecolor="white")


def plot_stage_bars(
    params: int,
    gpus: int,
    recipe: RecipeLike = MIXED_ADAM,
    unit: str = "GB",
    gpu_memory: Size | None = None,
    activations: Fraction | int = 0,
    headroom: Fraction | int = 0,
    note: str = "",
) -> Figure:
    """Stacked per-GPU bars, one per stage, activations on top if given, the memory per GPU as a line.

    `headroom` (a share, such as Fraction(1, 10)) adds the card less that share as a lighter line and shades
    the room it keeps free; `note`, a second title line, says what the bars assume.
    """
    table = stage_table(params, gpus, recipe, unit, gpu_memory=gpu_memory)
    return draw(figures.stage_bars(table, activations, headroom, note))


def plot_scaling(
    params: int,
    recipe: RecipeLike = MIXED_ADAM,
    unit: str = "GB",
    max_gpus: int = 1024,
    gpu_memory: Size | None = None,
    gpus: int | None = None,
) -> Figure:
    """Per-GPU model state against the number of GPUs, log-log, one curve per stage; `gpus` marked if given.

    The mark is the explorer's dotted line at the current count, labelled, with each stage's value there.
    """
    setup, unit = Setup(params, 1, recipe, gpu_memory), units.unit_name(unit)
    if gpus is not None:
        gpus = checks.whole("gpus", gpus, high=checks.whole("max_gpus", max_gpus, high=checks.MAX_GPUS))
    fig = draw(figures.scaling(setup, unit, max_gpus, marker=gpus))
    _mark_floors(fig.axes[0], setup, unit)
    if gpus is not None:
        _mark_gpus(fig.axes[0], Setup(params, gpus, recipe), unit)
    return fig


def _mark_floors(ax, setup: Setup, unit: str) -> None:
    """A faint line at each floor a curve flattens to: the bytes a stage keeps whole, where it also splits."""
    for stage in Stage:
        kept, split = memory.kept_and_split_bytes(setup, stage)
        if kept and split:  # data parallelism splits nothing; ZeRO-3 keeps nothing whole
            value, colour = float(units.in_unit(kept, unit)), figures.STAGE_COLOURS[stage.label]
            ax.axhline(value, color=colour, lw=0.6, alpha=0.6, zorder=1, gid="floor")
            ax.annotate(
                f"floor {units.format_number(value)} {unit}",
                (1, value),
                xycoords=("axes fraction", "data"),
                xytext=(-4, 3),
                textcoords="offset points",
                ha="right",
                fontsize=8,
                color=colour,
            )


def _mark_gpus(ax, setup: Setup, unit: str) -> None:
    """Label the dotted line at `setup.gpus`, and dot each stage's curve there with its exact value."""
    for stage, held in zip(Stage, memory.per_stage(setup), strict=True):
        value, colour = units.in_unit(held.total, unit), figures.STAGE_COLOURS[stage.label]
        ax.plot([setup.gpus], [float(value)], "o", color=colour, ms=5, zorder=3)
        ax.annotate(
            units.format_number(value),
            (setup.gpus, float(value)),
            xytext=(6, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
            color=colour,
            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85},
        )
    ax.annotate(
        f"{setup.gpus:,} GPUs",
        (setup.gpus, 0.03),
        xycoords=("data", "axes fraction"),
        xytext=(3, 0),
        textcoords="offset points",
        rotation=90,
        va="bottom",
        fontsize=8,
        color="#666",
    )


#: Inches a bars chart widens for each bar past six, so that two-line category names stay apart.
BAR_WIDTH = 1.6
#: A colour whose luma passes this is light: a label drawn inside a bar of it is black, not white.
LIGHT = 0.6
#: How a label inside a bar is drawn: just under the bar's top, bold (its colour by `_ink`).
INSIDE = {"xytext": (0, -4), "textcoords": "offset points", "fontweight": "bold"}


def draw(chart: figures.Chart) -> Figure:
    """`chart` with matplotlib: stacked bars and their labels, or log-log lines; the limit dashed."""
    checks.instance("chart", chart, figures.Chart, "a figures.Chart")
    wide = 8.4 + BAR_WIDTH * max(0, len(chart.x) - 6)  # past six bars, wider by a bar's width each
    fig, ax = plt.subplots(figsize=(wide, 3.6) if chart.kind == "bars" else (7, 4))
    if chart.kind == "bars":
        _bars(ax, chart)
    else:
        for name, ys in chart.series.items():
            ax.plot(chart.x, ys, label=name, lw=2, color=chart.colours[name])
        ax.set(xscale="log", yscale="log")
        ax.grid(True, which="major", alpha=0.3)
    bar_limits.draw(ax, chart)
    if chart.marker is not None:
        ax.axvline(chart.marker, color="#999", ls=":")
    ax.set(xlabel=_plain(chart.xlabel), ylabel=_plain(chart.ylabel), title=_plain(chart.title))
    beside = (
        {"loc": "upper left", "bbox_to_anchor": (1.01, 1)} if chart.kind == "bars" else {}
    )  # clear of bars
    ax.legend(frameon=False, fontsize=8, **beside)
    ax.spines[["top", "right"]].set_visible(False)
    return _done(fig)


def _bars(ax, chart: figures.Chart) -> None:
    """Stack `chart`'s series per category and label each top; with a band, lifted onto a white box."""
    bottom = [0.0] * len(chart.x)
    for name, heights in chart.series.items():
        ax.bar(chart.x, heights, bottom=bottom, color=chart.colours[name], label=name)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    labels = chart.labels or [f"{b:.3g}" for b in bottom]
    lifted = {}  # without a band, as before; with one, a label can sit on the lines, so it gets a white box
    if chart.band is not None:
        box = {"fc": "white", "ec": "none", "alpha": 0.85, "pad": 1}
        lifted = {"xytext": (0, 3), "textcoords": "offset points", "bbox": box}
    scale = max([*bottom, chart.line or 0])
    for x, (top, label) in enumerate(zip(bottom, labels, strict=True)):
        if bar_limits.just_under(chart, top, scale, x):  # a label above would sit on a line: inside the bar
            ink = _ink(chart.colours[next(n for n in reversed(chart.series) if chart.series[n][x])])
            ax.annotate(label, (x, top), ha="center", va="top", fontsize=9, color=ink, **INSIDE)
        else:
            ax.annotate(label, (x, top), ha="center", va="bottom", fontsize=9, **lifted)


def _ink(colour: str) -> str:
    """White on a dark bar's colour, black on a light one (its luma over LIGHT), so a label inside reads."""
    red, green, blue = to_rgb(colour)
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > LIGHT else "white"


def plot_step_times(params: int, gpus: int, links: dict[str, str], dtype: str = "fp16") -> Figure:
    """Seconds per step spent communicating, per stage, for each named link speed (ring, no overlap)."""
    if not isinstance(links, dict) or not 1 <= len(links) <= MAX_LINKS:
        raise TypeError(
            f"links must be a dict of 1 to {MAX_LINKS} names and speeds such as "
            f"{{'InfiniBand': '200 Gb/s'}}, got {checks.kind(links)}"
        )
    for name in links:
        checks.instance("each link name", name, str, "text such as 'InfiniBand'")
    times = {
        name: [float(communication.step_time(params, gpus, s, speed, dtype, ring=True)) for s in Stage]
        for name, speed in links.items()
    }
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / len(links)
    for i, (name, speed) in enumerate(links.items()):
        label = name if str(speed) in name else f"{name} ({speed})"  # say the speed once
        bars = ax.bar([x + i * width for x in range(len(Stage))], times[name], width, label=_plain(label))
        ax.bar_label(bars, [f"{t:.3g}" for t in times[name]], fontsize=7, padding=1)
    ax.set_xticks([x + width * (len(links) - 1) / 2 for x in range(len(Stage))], [s.label for s in Stage])
    positive = all(t > 0 for row in times.values() for t in row)  # one GPU sends nothing: no log scale then
    ax.set(
        yscale="log" if positive else "linear",
        ylabel="seconds per step (log scale)" if positive else "seconds per step",
        title=f"{units.format_count(params)} parameters on {gpus} GPUs, {dtype}",
    )
    if positive:  # the axis starts at least half a decade under the shortest bar: a bar, not a sliver
        low, high = min(min(row) for row in times.values()), max(max(row) for row in times.values())
        ax.set_ylim(10 ** math.floor(math.log10(low / 3)), high * 3)
    # Under the axes, never over the bars: the tallest bar is the point of the chart.
    ax.legend(
        frameon=False, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=min(len(links), 3)
    )
    ax.spines[["top", "right"]].set_visible(False)
    return _done(fig)
