"""The limits a bars chart draws over its bars: the card (dashed), the band its headroom keeps free
(hatched grey, its lower edge dotted) and a margin just under the card (dash-dot). The band and the margin can
each apply to some bars only (`Chart.band_bars`, `Chart.margin_bars`), as lesson 06 holds its counts to one
limit and the moments of a step to another; they are then drawn over those bars alone.
"""

from __future__ import annotations

from .. import units
from . import bar_zoom, figures

#: A bar whose top is this share of the axis or less under a limit drawn over it gets its label inside it.
UNDER_BAND = 0.06


def draw(ax, chart: figures.Chart) -> None:
    """`chart`'s card, band and margin on `ax`, each labelled with its value, leaving the bars' x extent."""
    shown = ax.get_xlim()  # a limit drawn over some bars only must not widen it
    if chart.line is not None:
        value = f"{units.format_number(chart.line)} {chart.ylabel}"  # the line labelled with its value
        ax.axhline(chart.line, label=f"{chart.line_label}: {value}", **bar_zoom.CARD)
        ax.annotate(
            value,
            (1, chart.line),
            xycoords=("axes fraction", "data"),
            ha="right",
            va="top" if chart.band is None else "bottom",  # under it, unless the band's label is there
            color="crimson",
        )
    if chart.band is not None:
        _band(ax, chart)
        bar_zoom.add(ax, chart)
    if chart.margin is not None:
        _margin(ax, chart)
    if chart.kind == "bars":
        ax.set_xlim(shown)


def just_under(chart: figures.Chart, top: float, scale: float, bar: int) -> bool:
    """Whether bar `bar`'s top lies just under a limit drawn over it, `chart.band` or `chart.margin` (within
    UNDER_BAND of the axis's `scale`), so that a label drawn above it would sit on the line and read as over
    it."""
    limits = (
        limit
        for limit, over in ((chart.band, chart.band_bars), (chart.margin, chart.margin_bars))
        if limit is not None and (over is None or bar in over)
    )
    return any(limit - UNDER_BAND * scale < top < limit for limit in limits)


def _band(ax, chart: figures.Chart) -> None:
    """Hatch from `chart.band` up to the card, dot the band's edge, and label it with its value: across the
    axes, or over `chart.band_bars` alone. Grey, behind the bars: no bar's colour reads as the band."""
    value = f"{units.format_number(chart.band)} {chart.ylabel}"
    edge_label = f"{units.format_number(100 * chart.band / chart.line, 1)}% of the card: {value}"
    if chart.band_bars is None:
        bar_zoom.hatch(ax, chart, chart.band_label)
        ax.axhline(chart.band, label=edge_label, **bar_zoom.EDGE)
        ax.annotate(
            value, (1, chart.band), xycoords=("axes fraction", "data"), ha="right", va="top", color="#c77"
        )
        return
    spans = runs(chart.band_bars)
    for k, (left, right) in enumerate(spans):
        bar_zoom.hatch(ax, chart, None if k else chart.band_label, (left, right))
        ax.hlines(chart.band, left, right, label=None if k else edge_label, **bar_zoom.EDGE)
    ax.annotate(value, (spans[-1][1], chart.band), ha="right", va="top", color="#c77")


def _margin(ax, chart: figures.Chart) -> None:
    """`chart.margin` dash-dot, labelled with its value: across the axes, or over `chart.margin_bars`."""
    label = f"{chart.margin_label}: {units.format_number(chart.margin)} {chart.ylabel}"
    style = {"color": "#444", "ls": "-.", "lw": 1}
    if chart.margin_bars is None:
        ax.axhline(chart.margin, label=label, **style)
    for k, (left, right) in enumerate(runs(chart.margin_bars)):
        ax.hlines(chart.margin, left, right, label=None if k else label, **style)


def runs(bars: tuple[int, ...] | None) -> list[tuple[float, float]]:
    """The x extents of `bars` (indices), each run of neighbours as one (left, right); none for None."""
    spans: list[tuple[float, float]] = []
    for i in sorted(bars or ()):
        if spans and spans[-1][1] == i - 0.5:
            spans[-1] = (spans[-1][0], i + 0.5)
        else:
            spans.append((i - 0.5, i + 0.5))
    return spans
