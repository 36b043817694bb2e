"""A step's timeline as a chart: one stacked bar per phase, by kind of part, the peak marked; drawn as SVG.

`step_chart` makes the spec from a `Timeline` in the unit shown; `draw` writes it as an SVG string
in about a millisecond for 71 phases, so the explorer's step view can replace it on every control
change, as `present.svg` does for the other charts (a matplotlib figure takes ~100 ms to render here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

from .. import checks, units
from ..planning.step_parts import KINDS, Timeline
from .figures import KIND_COLOURS

#: Runs of phases the x axis brackets, by phase kind; every other phase is named on its own.
PHASE_WORDS = {"forward": "forward", "backward": "backward"}
#: Short names for the phases named on their own, which stand one bar wide.
SHORT = {
    "start of step": "start",
    "gradient reduction": "reduce",
    "before optimizer step": "before step",
    "optimizer step": "step",
    "after optimizer step": "after step",
}
WIDTH, HEIGHT = 760, 330
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 58, 74


@dataclass(frozen=True)
class StepChart:
    """What the step chart shows: bars by phase and kind, the peak, and the paper's table as a line."""

    phases: tuple[str, ...]  #: phase names, in step order
    phase_kinds: tuple[str, ...]  #: each phase's kind: boundary, forward, backward, reduction, optimizer
    series: dict[str, tuple[float, ...]]  #: kind of part -> its height at each phase, in `unit` (kinds held)
    totals: tuple[str, ...]  #: each phase's total, exact to three decimals, for its tooltip
    unit: str  #: "GB" or "GiB"
    peak: int  #: index of the peak phase
    peak_label: str  #: "peak 49.132 GB: backward block 32"
    line: float | None  #: the paper's table for this stage, in `unit`
    line_label: str  #: what the line is
    title: str  #: above the chart


def step_chart(line: Timeline, unit: str = "GB", paper: int | None = None) -> StepChart:
    """The chart of `line` in `unit`, with the paper's table (`paper` bytes, if given) as a dashed line."""
    checks.instance("line", line, Timeline, "a planning.step Timeline")
    unit, size = units.unit_name(unit), units.unit_size(unit)
    held = [_by_kind(phase) for phase in line.phases]  # one pass over each phase's parts
    kinds = [k for k in KINDS if any(k in h for h in held)]
    show = lambda b: f"{units.format_number(units.in_unit(b, unit))} {unit}"  # noqa: E731
    peak = line.peak
    return StepChart(
        tuple(p.name for p in line.phases),
        tuple(p.kind for p in line.phases),
        {k: tuple(float(h.get(k, 0) / size) for h in held) for k in kinds},
        tuple(show(sum(h.values())) for h in held),
        unit,
        line.peak_index,
        f"peak {show(peak.total)}: {peak.name}",
        None if paper is None else float(paper / size),
        "" if paper is None else f"the paper's table: {show(paper)}",
        f"{line.framework.label}, {line.model.name} on {line.gpus:,} GPUs: one rank over one step",
    )


def _by_kind(phase) -> dict:
    """A phase's bytes by kind of part, for the kinds it holds (exact)."""
    held: dict = {}
    for part in phase.parts:
        if part.nbytes:
            held[part.kind] = held.get(part.kind, 0) + part.nbytes
    return held


def _step(top: float) -> float:
    """A round tick spacing (1, 2 or 5 times a power of ten) giving about five ticks up to `top`."""
    rough = top / 5
    power = 10 ** math.floor(math.log10(rough))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= rough)


def draw(chart: StepChart) -> str:
    """`chart` as an SVG string: stacked bars, the peak's bar outlined and labelled, the paper's line."""
    checks.instance("chart", chart, StepChart, "a StepChart from step_chart")
    count = len(chart.phases)
    totals = [sum(values[i] for values in chart.series.values()) for i in range(count)]
    top = max([*totals, chart.line or 0, 1e-12]) * 1.15
    plot_h, plot_w = HEIGHT - TOP - BOTTOM, WIDTH - LEFT - RIGHT
    y = lambda v: TOP + plot_h * (1 - v / top)  # noqa: E731
    slot = plot_w / count
    body = [_axis(top, y, plot_h, escape(chart.unit))]
    for i in range(count):
        body.append(_bar(chart, i, LEFT + i * slot + slot * 0.1, slot * 0.8, y))
    if chart.line is not None:
        at = y(chart.line)
        body.append(
            f"<line class='paper' x1='{LEFT}' y1='{at:.1f}' x2='{WIDTH - RIGHT}' y2='{at:.1f}' "
            f"stroke='#222' stroke-dasharray='5,3'/><text x='{LEFT + 4}' y='{at - 4:.1f}' fill='#222' "
            f"stroke='white' stroke-width='3' paint-order='stroke'>{escape(chart.line_label)}</text>"
        )
    body += _peak(chart, LEFT + (chart.peak + 0.5) * slot, y(totals[chart.peak]))
    body += _phase_axis(chart, slot, TOP + plot_h)
    body += _legend(list(chart.series))
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}' class='zero-step-chart' "
        f"font-family='sans-serif' font-size='11'><text x='{WIDTH / 2}' y='16' text-anchor='middle' "
        f"font-size='12'>{escape(chart.title)}</text>{''.join(body)}</svg>"
    )


def _axis(top: float, y, plot_h: float, unit: str) -> str:
    """The y axis: round ticks up to `top`, grid lines, the unit beside them, and the base line."""
    step, out = _step(top), []
    for k in range(int(top / step) + 1):
        v = k * step
        out.append(f"<text x='{LEFT - 4}' y='{y(v) + 4:.1f}' text-anchor='end' fill='#555'>{v:.3g}</text>")
        out.append(f"<line x1='{LEFT}' y1='{y(v):.1f}' x2='{WIDTH - RIGHT}' y2='{y(v):.1f}' stroke='#eee'/>")
    out.append(
        f"<text transform='translate(14,{TOP + plot_h / 2}) rotate(-90)' text-anchor='middle'>"
        f"{unit} per rank</text>"
    )
    out.append(
        f"<line x1='{LEFT}' y1='{TOP + plot_h}' x2='{WIDTH - RIGHT}' y2='{TOP + plot_h}' stroke='#333'/>"
    )
    return "".join(out)


def _bar(chart: StepChart, i: int, x: float, width: float, y) -> str:
    """Phase `i`'s bar, stacked in KINDS order, with its name and total as a tooltip."""
    out, base = [f"<g class='phase'><title>{escape(chart.phases[i])}: {chart.totals[i]}</title>"], 0.0
    for kind, values in chart.series.items():
        h = values[i]
        if h:
            out.append(
                f"<rect x='{x:.1f}' y='{y(base + h):.1f}' width='{width:.1f}' "
                f"height='{y(base) - y(base + h):.1f}' fill='{KIND_COLOURS[kind]}'/>"
            )
        base += h
    return "".join(out) + "</g>"


def _peak(chart: StepChart, x: float, top: float) -> list[str]:
    """A marker over the peak's bar and its label, kept inside the chart."""
    anchor = "end" if x > WIDTH / 2 else "start"
    shift = -8 if anchor == "end" else 8
    return [
        f"<path class='peak' d='M{x - 5:.1f},{top - 12:.1f} L{x + 5:.1f},{top - 12:.1f} "
        f"L{x:.1f},{top - 3:.1f} Z' fill='crimson'/>",
        f"<text class='peak' x='{x + shift:.1f}' y='{top - 6:.1f}' text-anchor='{anchor}' fill='crimson' "
        f"font-weight='bold' stroke='white' stroke-width='3' paint-order='stroke'>"
        f"{escape(chart.peak_label)}</text>",
    ]


def _phase_axis(chart: StepChart, slot: float, base: float) -> list[str]:
    """Under the bars: a bracket over each run of forward or backward phases, and other phases by name."""
    out, i, kinds = [], 0, chart.phase_kinds
    while i < len(kinds):
        j = i
        while j + 1 < len(kinds) and kinds[j + 1] == kinds[i] and kinds[i] in PHASE_WORDS:
            j += 1
        left, right = LEFT + i * slot + 2, LEFT + (j + 1) * slot - 2
        if kinds[i] in PHASE_WORDS:
            first, last = (chart.phases[k].removeprefix(kinds[i] + " ") for k in (i, j))
            out.append(
                f"<path d='M{left:.1f},{base + 4} V{base + 8} H{right:.1f} V{base + 4}' "
                f"stroke='#555' fill='none'/>"
                f"<text x='{(left + right) / 2:.1f}' y='{base + 20}' text-anchor='middle'>"
                f"{escape(PHASE_WORDS[kinds[i]])}: {escape(first)} → {escape(last)}</text>"
            )
        else:
            x, name = LEFT + (i + 0.5) * slot + 3, chart.phases[i]
            out.append(
                f"<text x='{x:.1f}' y='{base + 6}' text-anchor='end' font-size='9' "
                f"transform='rotate(-90 {x:.1f} {base + 6})'>{escape(SHORT.get(name, name))}</text>"
            )
        i = j + 1
    return out


def _legend(kinds: list[str]) -> list[str]:
    """Coloured squares and the names of the kinds held, in rows under the title."""
    out, x, y = [], LEFT, 26
    for kind in kinds:
        width = 18 + 6 * len(kind)
        if x + width > WIDTH - RIGHT:
            x, y = LEFT, y + 14
        out.append(f"<rect x='{x}' y='{y}' width='9' height='9' fill='{KIND_COLOURS[kind]}'/>")
        out.append(f"<text x='{x + 12}' y='{y + 8}'>{escape(kind)}</text>")
        x += width
    return out
