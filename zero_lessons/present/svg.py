"""Tiny SVG charts for the explorer, drawn from `figures.Chart` as text in well under a millisecond.

Matplotlib takes about 100 ms to render one figure on a small machine, too slow to redraw on
every slider step. These charts are plain SVG strings, so they update instantly, survive in a
saved notebook's widget state, and show the same in JupyterLab, Voila and a static page.
"""

from __future__ import annotations

import math
from html import escape

from .. import checks
from .figures import BAND_HATCH, Chart

WIDTH, HEIGHT = 420, 260
HATCH_ID = "zero-band-hatch"  #: the band's hatching pattern: every chart defines it alike, so a page agrees
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 28, 50


def _frame(title: str, ylabel: str, body: list[str]) -> str:
    """Wrap chart elements in an <svg> with a title (its lines joined by " · ") and a y-axis label."""
    one_line = title.replace("\n", " · ")
    return "".join(
        [
            f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}' class='zero-chart' "
            f"viewBox='0 0 {WIDTH} {HEIGHT}' style='max-width:100%;height:auto' "
            f"font-family='sans-serif' font-size='11'>",
            f"<text x='{WIDTH / 2}' y='16' text-anchor='middle' font-size='12'>{escape(one_line)}</text>",
            f"<text transform='translate(12,{TOP + (HEIGHT - TOP - BOTTOM) / 2}) rotate(-90)' "
            f"text-anchor='middle'>{escape(ylabel)}</text>",
            *body,
            "</svg>",
        ]
    )


def _checked(
    xs: list, series: dict[str, list[float]], colours: dict[str, str], *extra: float | None, **texts: object
) -> None:
    """Refuse what cannot be drawn: no points, uneven series, no colour, a value not finite and ≥ 0."""
    for name, text in texts.items():
        if not isinstance(text, str):
            raise TypeError(f"{name} must be text, got {type(text).__name__}")
    if not isinstance(xs, (list, tuple)) or not xs:
        raise ValueError(f"a chart needs at least one category or x value, got {xs!r:.60}")
    if not isinstance(series, dict) or not isinstance(colours, dict):
        raise TypeError("series and colours must be dicts keyed by series name")
    for name, values in series.items():
        if name not in colours:
            raise ValueError(f"colours has no entry for series {name!r:.60}")
        if not isinstance(values, (list, tuple)) or len(values) != len(xs):
            raise ValueError(f"series {name!r:.60} must have one value per x value ({len(xs)})")
    numbers = [v for values in series.values() for v in values] + [v for v in extra if v is not None]
    drawable, floats = all(issubclass(kind, (int, float)) for kind in set(map(type, numbers))), []
    try:
        floats = list(map(float, numbers)) if drawable else []
    except OverflowError:  # an int past float's range
        drawable = False
    if floats and not (
        min(floats) >= 0 and math.isfinite(sum(floats))
    ):  # a NaN or an infinity spoils the sum
        drawable = False
    if not drawable:
        raise ValueError("every value drawn must be a finite number ≥ 0")


def _tick(value: float) -> str:
    """A short axis label in one style, never an exponent next to plain numbers: 0.05, 41.3, 120, 10,000."""
    rounded = float(f"{value:.3g}")
    if rounded >= 1:
        return f"{rounded:,.0f}" if rounded == int(rounded) else f"{rounded:.3g}"
    return f"{rounded:.3g}" if 0 < rounded < 1e-6 else f"{rounded:.6f}".rstrip("0").rstrip(".")


def _step(top: float) -> float:
    """A round tick spacing (1, 2 or 5 times a power of ten) giving about five ticks up to `top`."""
    rough = top / 5
    power = 10 ** math.floor(math.log10(rough))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= rough)


def bar_chart(
    categories: list[str],
    series: dict[str, list[float]],
    colours: dict[str, str],
    *,
    title: str = "",
    ylabel: str = "",
    line: float | None = None,
    line_label: str = "",
    labels: list[str] | None = None,
    band: float | None = None,
    band_label: str = "",
) -> str:
    """Stacked bars, one per category, with their totals (or `labels`) on top, an optional limit line and an
    optional lighter `band` line under it (such as the card less its headroom)."""
    texts = {"title": title, "ylabel": ylabel, "line_label": line_label, "band_label": band_label}
    _checked(categories, series, colours, line, band, **texts)
    _checked_names(categories, series, labels)
    totals = [sum(values[i] for values in series.values()) for i in range(len(categories))]
    top = (max([*totals, line or 0, band or 0]) or 1) * 1.12  # all zero (one GPU sends nothing): 0 to 1
    plot_h, plot_w = HEIGHT - TOP - BOTTOM, WIDTH - LEFT - RIGHT
    y = lambda v: TOP + plot_h * (1 - v / top)  # noqa: E731
    slot = plot_w / len(categories)
    behind, edge = ([], []) if band is None else _band(y(band), y(band if line is None else line), band_label)
    body = _y_axis(top, y) + behind
    for i, name in enumerate(categories):
        heights = {label: values[i] for label, values in series.items()}
        x = LEFT + i * slot + slot * 0.15
        body += _column(name, heights, labels[i] if labels else None, colours, x, slot, y)
    if line is not None:
        body += _limit(y(line), line_label)
    body += edge + _legend(list(series), colours)
    return _frame(title, ylabel, body)


def _y_axis(top: float, y) -> list[str]:
    """The x axis's line at the bottom, and round ticks from 0 up to `top` on the y axis, placed by `y`."""
    bottom, step = HEIGHT - BOTTOM, _step(top)
    out = [f"<line x1='{LEFT}' y1='{bottom}' x2='{WIDTH - RIGHT}' y2='{bottom}' stroke='#333'/>"]
    for k in range(int(top / step) + 1):
        v = k * step
        out.append(f"<text x='{LEFT - 4}' y='{y(v) + 4:.1f}' text-anchor='end' fill='#555'>{_tick(v)}</text>")
    return out


def _checked_names(categories: list[str], series: dict[str, list[float]], labels: list[str] | None) -> None:
    """Raise unless categories and series names are text and `labels`, if given, is a text per category."""
    if labels is not None and (
        not isinstance(labels, (list, tuple))
        or len(labels) != len(categories)
        or not all(isinstance(label, str) for label in labels)
    ):
        raise ValueError(f"labels must be a list of text, one per category ({len(categories)})")
    if not all(isinstance(name, str) for name in [*categories, *series]):
        raise TypeError("categories and series names must be text")


def _column(
    name: str, heights: dict[str, float], shown: str | None, colours: dict[str, str], x: float, slot: float, y
) -> list[str]:
    """One category's bar, stacked up in series order, with its total (or `shown`) on top and `name` below."""
    out, base = [], 0.0
    for label, h in heights.items():
        out.append(
            f"<rect class='bar' data-series='{escape(label)}' x='{x:.1f}' y='{y(base + h):.1f}' "
            f"width='{slot * 0.7:.1f}' height='{y(base) - y(base + h):.1f}' fill='{colours[label]}'/>"
        )
        base += h
    shown = _tick(base) if shown is None else shown
    out.append(
        f"<text class='total' x='{x + slot * 0.35:.1f}' y='{y(base) - 3:.1f}' text-anchor='middle'>"
        f"{escape(shown)}</text>"
    )
    out.append(
        f"<text x='{x + slot * 0.35:.1f}' y='{HEIGHT - BOTTOM + 14}' text-anchor='middle'>"
        f"{escape(name)}</text>"
    )
    return out


def _limit(at: float, label: str) -> list[str]:
    """A dashed crimson limit line across the bar chart at height `at`, labelled at its right end."""
    return [
        f"<line class='limit' x1='{LEFT}' y1='{at:.1f}' x2='{WIDTH - RIGHT}' y2='{at:.1f}' "
        f"stroke='crimson' stroke-dasharray='5,3'/>",
        f"<text x='{WIDTH - RIGHT}' y='{at - 4:.1f}' text-anchor='end' fill='crimson'>{escape(label)}</text>",
    ]


def _band(at: float, limit: float, label: str) -> tuple[list[str], list[str]]:
    """The band the headroom keeps free, as the matplotlib bars draw it: grey hatching from height `at` up to
    the limit line at `limit`, drawn behind the columns; and over them its edge, a dotted line at `at`, with
    `label` under the line's right end."""
    stroke = f"stroke='{BAND_HATCH}' stroke-width='1'"
    behind = [
        f"<defs><pattern id='{HATCH_ID}' width='6' height='6' patternUnits='userSpaceOnUse' "
        f"patternTransform='rotate(45)'><line x1='0' y1='0' x2='0' y2='6' {stroke}/></pattern></defs>",
        f"<rect class='band' x='{LEFT}' y='{limit:.1f}' width='{WIDTH - RIGHT - LEFT}' "
        f"height='{at - limit:.1f}' fill='url(#{HATCH_ID})'/>",
    ]
    return behind, [
        f"<line class='band' x1='{LEFT}' y1='{at:.1f}' x2='{WIDTH - RIGHT}' y2='{at:.1f}' "
        f"stroke='crimson' stroke-opacity='0.6' stroke-dasharray='2,2'/>",
        f"<text x='{WIDTH - RIGHT}' y='{at + 12:.1f}' text-anchor='end' fill='crimson'>"
        f"{escape(label)}</text>",
    ]


def _legend(labels: list[str], colours: dict[str, str]) -> list[str]:
    """Coloured squares and names along the bottom edge."""
    out, x = [], LEFT
    for label in labels:
        out.append(f"<rect x='{x}' y='{HEIGHT - 14}' width='9' height='9' fill='{colours[label]}'/>")
        out.append(f"<text x='{x + 12}' y='{HEIGHT - 6}'>{escape(label)}</text>")
        x += 14 + 7 * len(label)
    return out


def line_chart(
    xs: list[float],
    series: dict[str, list[float]],
    colours: dict[str, str],
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    line: float | None = None,
    marker: float | None = None,
) -> str:
    """Log-log lines sharing one x axis, with an optional horizontal limit and a vertical marker."""
    _checked(xs, series, colours, line, marker, title=title, xlabel=xlabel, ylabel=ylabel)
    _checked_log_x(xs, series)
    ys = [v for values in series.values() for v in values if v > 0] + ([line] if line else []) or [1.0]
    lo_x, hi_x = math.log10(min(xs)), math.log10(max(xs))
    lo_y, hi_y = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    plot_h, plot_w = HEIGHT - TOP - BOTTOM, WIDTH - LEFT - RIGHT
    px = lambda v: LEFT + plot_w * (math.log10(v) - lo_x) / max(hi_x - lo_x, 1e-9)  # noqa: E731
    py = lambda v: TOP + plot_h * (1 - (math.log10(v) - lo_y) / max(hi_y - lo_y, 1))  # noqa: E731
    body = [f"<rect x='{LEFT}' y='{TOP}' width='{plot_w}' height='{plot_h}' fill='none' stroke='#333'/>"]
    for e in range(lo_y, hi_y + 1, max(1, math.ceil((hi_y - lo_y) / 8))):  # at most about eight labels
        body.append(
            f"<text x='{LEFT - 4}' y='{py(10**e) + 4:.1f}' text-anchor='end' fill='#555'>"
            f"{_tick(10**e)}</text>"
        )
    for e in range(math.ceil(lo_x), math.floor(hi_x) + 1):
        body.append(
            f"<text x='{px(10**e):.1f}' y='{TOP + plot_h + 14}' text-anchor='middle' fill='#555'>"
            f"{_tick(10**e)}</text>"
        )
    body.append(
        f"<text x='{LEFT + plot_w / 2}' y='{HEIGHT - 20}' text-anchor='middle'>{escape(xlabel)}</text>"
    )
    body += _curves(xs, series, colours, px, py)
    body += _guides(py(line) if line else None, px(marker) if marker else None, plot_w, plot_h)
    body += _legend(list(series), colours)
    return _frame(title, ylabel, body)


def _checked_log_x(xs: list[float], series: dict[str, list[float]]) -> None:
    """Raise unless series names are text and every x is a finite number > 0, as a log axis needs."""
    if not all(isinstance(name, str) for name in series):
        raise TypeError("series names must be text")
    try:
        positive = all(isinstance(x, (int, float)) and 0 < float(x) < math.inf for x in xs)
    except OverflowError:
        positive = False
    if not positive:
        raise ValueError("a log-scale x axis needs every x value to be a finite number > 0")


def _curves(xs: list[float], series: dict[str, list[float]], colours: dict[str, str], px, py) -> list[str]:
    """One polyline per series through its positive points (a log axis has no place for 0)."""
    out = []
    for label, values in series.items():
        points = " ".join(f"{px(x):.1f},{py(v):.1f}" for x, v in zip(xs, values, strict=True) if v > 0)
        out.append(
            f"<polyline class='curve' data-series='{escape(label)}' points='{points}' fill='none' "
            f"stroke='{colours[label]}' stroke-width='2'/>"
        )
    return out


def _guides(limit_y: float | None, marker_x: float | None, plot_w: float, plot_h: float) -> list[str]:
    """The line chart's dashed horizontal limit and dotted vertical marker, where given (in pixels)."""
    out = []
    if limit_y is not None:
        out.append(
            f"<line class='limit' x1='{LEFT}' y1='{limit_y:.1f}' x2='{LEFT + plot_w}' y2='{limit_y:.1f}' "
            f"stroke='crimson' stroke-dasharray='5,3'/>"
        )
    if marker_x is not None:
        out.append(
            f"<line class='marker' x1='{marker_x:.1f}' y1='{TOP}' x2='{marker_x:.1f}' "
            f"y2='{TOP + plot_h}' stroke='#999' stroke-dasharray='2,2'/>"
        )
    return out


def draw(chart: Chart) -> str:
    """`chart` as an SVG string: stacked bars, or log-log lines."""
    checks.instance("chart", chart, Chart, "a figures.Chart")
    series = {name: list(values) for name, values in chart.series.items()}
    common = {"title": chart.title, "ylabel": chart.ylabel, "line": chart.line}
    if chart.kind == "bars":
        labels = None if chart.labels is None else list(chart.labels)
        return bar_chart(
            list(chart.x),
            series,
            chart.colours,
            line_label=chart.line_label,
            labels=labels,
            band=chart.band,
            band_label=chart.band_label,
            **common,
        )
    return line_chart(
        list(chart.x), series, chart.colours, xlabel=chart.xlabel, marker=chart.marker, **common
    )
