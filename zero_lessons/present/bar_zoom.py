"""A zoomed inset for a stacked-bar chart whose headroom band is a sliver of its axis.

On a 0-120 GB axis the 3 GB between a 30 GB card and its 27 GB headroom line is a few pixels, and a bar
whose top falls between them cannot be read. The inset redraws only the bars whose tops fall near the band,
on a y range a few bands wide, with the card, the band and each bar's total.
"""

from __future__ import annotations

from . import figures

#: A band thinner than this share of the axis's height gets an inset.
ZOOM_BELOW = 0.05
#: How far the inset reaches, in band widths: this many below the band's lower edge, and above the card.
REACH_BELOW, REACH_ABOVE = 2, 1


#: How the card is drawn, and the dotted lower edge of the band its headroom keeps free: on the chart
#: (`bar_limits`) and in its inset alike.
CARD = {"color": "crimson", "ls": "--"}
EDGE = {"color": "crimson", "ls": ":", "alpha": 0.6}


def hatch(
    ax, chart: figures.Chart, label: str | None = None, span: tuple[float, float] | None = None
) -> None:
    """Hatch `chart`'s band, from its lower edge up to the card, behind the bars: across the axes, or over
    `span` (left and right x) alone."""
    style = {"fc": "none", "ec": figures.BAND_HATCH, "hatch": "///", "lw": 0, "zorder": 0, "label": label}
    if span is None:
        ax.axhspan(chart.band, chart.line, **style)
    else:
        ax.fill_between(span, chart.band, chart.line, **style)


def _tops(chart: figures.Chart) -> list[float]:
    """Each stacked bar's top: its series summed."""
    return [sum(heights[i] for heights in chart.series.values()) for i in range(len(chart.x))]


def near_band(chart: figures.Chart) -> list[int]:
    """The bars (by index) whose tops fall within the inset's y range; none without a band."""
    if chart.band is None or chart.line is None:
        return []
    low, high = window(chart)
    return [i for i, top in enumerate(_tops(chart)) if low <= top <= high]


def window(chart: figures.Chart) -> tuple[float, float]:
    """The inset's y range: from REACH_BELOW band widths under the band to REACH_ABOVE over the card."""
    gap = chart.line - chart.band
    return chart.band - REACH_BELOW * gap, chart.line + REACH_ABOVE * gap


def add(ax, chart: figures.Chart) -> None:
    """Draw the inset on `ax` when the band is under ZOOM_BELOW of the axis and a bar's top falls near it."""
    near = near_band(chart)
    if not near or chart.line - chart.band >= ZOOM_BELOW * ax.get_ylim()[1]:
        return
    tops = _tops(chart)
    tallest = max(range(len(tops)), key=tops.__getitem__)
    left = 0.06 if tallest >= len(chart.x) / 2 else 0.56  # on the side away from the tallest bar
    inset = ax.inset_axes([left, 0.42, 0.36, 0.52])
    bottom = [0.0] * len(near)
    for name, heights in chart.series.items():
        inset.bar(near, [heights[i] for i in near], bottom=bottom, color=chart.colours[name])
        bottom = [b + heights[i] for b, i in zip(bottom, near, strict=True)]
    for top, i in zip(bottom, near, strict=True):
        label = chart.labels[i] if chart.labels else f"{top:.3g}"
        inset.annotate(label, (i, top), ha="center", va="bottom", fontsize=8)
    hatch(inset, chart)
    inset.axhline(chart.line, **CARD)
    inset.axhline(chart.band, **EDGE)
    low, high = window(chart)
    inset.set(
        ylim=(low, high),
        xlim=(near[0] - 0.6, near[-1] + 0.6),
        title=f"zoomed: {low:g} to {high:g} {chart.ylabel}",
    )
    inset.set_xticks(
        near, [chart.x[i] for i in near], fontsize=8
    )  # the main axes' positions: the zoom box fits
    inset.tick_params(axis="y", labelsize=8)
    inset.title.set_fontsize(8)
    ax.indicate_inset_zoom(inset, edgecolor="#888")
