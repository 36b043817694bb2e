"""One figure spec for both renderers: the colours, the GPU grid, and chart data made from model values.

A `Chart` says what to draw (stacked bars or log-log lines, their series, colours and limit line)
and nothing about how: `plots.draw` renders it with matplotlib for the lessons, and `svg.draw`
renders it as a small SVG string that the explorer can redraw on every slider step.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks, memory, units
from ..communication import StepTraffic
from ..inputs import Setup
from ..stages import STATES, Stage
from .table import StageTable

#: One colour per state, used by every figure so that the lessons read alike.
STATE_COLOURS = {"weights": "#4c72b0", "gradients": "#dd8452", "optimizer": "#55a868"}
#: One colour per stage, none of them a state's colour or the crimson of a memory limit, so that a colour
#: never means a stage in one figure and a state in the next.
STAGE_COLOURS = {"data parallel": "#7f7f7f", "ZeRO-1": "#b07aa1", "ZeRO-2": "#17becf", "ZeRO-3": "#222222"}
#: One colour per kind of part in a step's timeline: the model states as above, then the transient buffers.
KIND_COLOURS = STATE_COLOURS | {
    "activations": "#8172b3",
    "gathered parameters": "#4d4d4d",  # charcoal: not the peak mark's crimson
    "unreduced gradients": "#937860",
    "gradient buckets": "#ccb974",
    "fp32 gradients": "#64b5cd",
    "optimizer temporaries": "#da8bc3",
}
#: The colour of time.
SECONDS_COLOUR = "#8172b3"
#: A state's name in a legend.
STATE_NAMES = {"weights": "weights", "gradients": "gradients", "optimizer": "optimizer state"}


def gpu_grid(max_gpus: int) -> tuple[int, ...]:
    """GPU counts for a scaling curve: 1, then steps of about 1.19× (2**(1/4), rounded) up to `max_gpus`."""
    max_gpus = checks.whole("max_gpus", max_gpus, high=checks.MAX_GPUS)
    counts = {round(2 ** (k / 4)) for k in range(4 * max_gpus.bit_length() + 1)} | {1}
    return tuple(sorted(n for n in counts if n <= max_gpus))


#: GPU counts the explorer's scaling view plots: 1 to 4,096.
SCALING_GPUS = gpu_grid(4096)

#: The hatching of the band a headroom keeps free, in every renderer: grey, to match no bar's colour.
BAND_HATCH = "#bbb"


@dataclass(frozen=True)
class Chart:
    """What a figure shows, for any renderer: stacked bars per category, or log-log lines over x values."""

    kind: str  #: "bars" or "lines"
    x: tuple  #: the categories under the bars, or the x values of the lines
    series: dict[str, tuple[float, ...]]  #: name -> one value per x, drawn in this order
    colours: dict[str, str]  #: name -> colour, for every series
    title: str = ""  #: above the plot
    xlabel: str = ""  #: under the x axis
    ylabel: str = ""  #: beside the y axis
    labels: tuple[str, ...] | None = None  #: text over each bar, exact where the axis rounds
    line: float | None = None  #: a horizontal limit, such as the memory per GPU
    line_label: str = ""  #: what the limit is
    marker: float | None = None  #: an x value to mark with a vertical line, such as the current GPU count
    band: float | None = None  #: a second, lighter limit under `line`, such as the card less its headroom
    band_label: str = ""  #: what the lighter limit is
    margin: float | None = None  #: a third limit just under `line`, such as the card less a CUDA context
    margin_label: str = ""  #: what that limit is
    band_bars: tuple[int, ...] | None = None  #: the bars (by index) `band` applies to; None: all of them
    margin_bars: tuple[int, ...] | None = None  #: the bars (by index) `margin` applies to; None: all of them


def stage_bars(
    table: StageTable, activations: Fraction | int = 0, headroom: Fraction | int = 0, note: str = ""
) -> Chart:
    """Per-GPU model state per stage, stacked by state, activations on top, under the memory per GPU.

    `activations` are bytes per GPU, the same under every stage; `headroom`, a share of each GPU such as
    Fraction(1, 10), draws the card less that share as a second, lighter limit; `note`, if given, is a second
    title line: what the bars assume, such as how activations were counted."""
    checks.instance("table", table, StageTable, "a StageTable")
    checks.instance("note", note, str, "text such as 'FlashAttention, nothing recomputed'")
    act, share = checks.byte_count("activations", activations), headroom_share(headroom)
    unit, limit = table.unit, table.gpu_memory
    if share and limit is None:
        raise ValueError(
            "headroom needs gpu_memory, the card it leaves a share of free; give both or neither"
        )
    series = {
        STATE_NAMES[s]: tuple(float(units.in_unit(getattr(row.held, s), unit)) for row in table.rows)
        for s in STATES[::-1]
    }
    colours = {STATE_NAMES[s]: STATE_COLOURS[s] for s in STATES}
    if act:
        series["activations"] = (float(units.in_unit(act, unit)),) * len(table.rows)
        colours["activations"] = KIND_COLOURS["activations"]
    return Chart(
        "bars",
        tuple(row.stage.label for row in table.rows),
        series,
        colours,
        title=f"{'model state + activations' if act else 'model state'} per GPU: "
        f"{units.format_count(table.params)} on {table.gpus} GPUs, {table.recipe.name}"
        + (note and f"\n{note}"),
        ylabel=unit,
        labels=tuple(units.format_number(units.in_unit(row.held.total + act, unit)) for row in table.rows),
        line=None if limit is None else float(units.in_unit(limit, unit)),
        line_label="memory per GPU",
        # planning.headroom.budget's rule, written out: importing it would load the planning package with this
        band=float(units.in_unit(limit * (1 - share), unit)) if share else None,
        band_label=f"keeping {units.format_number(100 * share, 1)}% free" if share else "",
    )


def headroom_share(headroom: object) -> Fraction:
    """`headroom` as an exact share from 0 to below 1, or an error naming it."""
    share = checks.amount("headroom", headroom)
    if share >= 1:
        raise ValueError(
            f"headroom must be a share of each GPU from 0 to below 1, such as 0.1, got {checks.shown(share)}"
        )
    return share


def scaling(setup: Setup, unit: str = "GB", max_gpus: int = 4096, marker: int | None = None) -> Chart:
    """Per-GPU model state against the GPU count, 1 to `max_gpus`, one curve per stage: kept + split / N."""
    checks.instance("setup", setup, Setup, "an inputs.Setup")
    if marker is not None:
        checks.instance("marker", marker, int, "a GPU count, or None")
    size, counts = units.unit_size(unit), gpu_grid(max_gpus)
    series = {}
    for stage in Stage:  # exact per stage, then floats for the points drawn
        kept, split = (float(b / size) for b in memory.kept_and_split_bytes(setup, stage))
        series[stage.label] = tuple(kept + split / n for n in counts)
    limit = None if setup.gpu_memory is None else float(units.in_unit(setup.gpu_memory, unit))
    return Chart(
        "lines",
        counts,
        series,
        STAGE_COLOURS,
        xlabel="GPUs (N_d)",
        ylabel=unit,
        title=f"model state per GPU as GPUs are added: {units.format_count(setup.params)}, "
        f"{setup.recipe.name}",
        line=limit,
        line_label="memory per GPU",
        marker=marker,
    )


def comm_seconds(rows: tuple[StepTraffic, ...], title: str) -> Chart:
    """Seconds per step spent communicating, one bar per stage, each labelled exactly."""
    checks.instance("rows", rows, tuple, "a tuple of communication.StepTraffic, one per stage")
    for row in rows:
        checks.instance("rows", row, StepTraffic, "one communication.StepTraffic per stage")
    checks.instance("title", title, str, "text")
    seconds = tuple(row.seconds for row in rows)
    series = {"seconds": tuple(float(t) for t in seconds)}
    return Chart(
        "bars",
        tuple(row.stage.label for row in rows),
        series,
        {"seconds": SECONDS_COLOUR},
        title=title,
        ylabel="seconds",
        labels=tuple(f"{units.format_number(t)} s" for t in seconds),
    )
