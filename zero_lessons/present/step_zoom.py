"""A closer look at a step figure: each panel of `step_figure.plot_step` cut to a few columns, with its y axis
cut to the tops of their bars and each bar's total written on it, so that small parts (the loss on top of
the forward pass, a waiting gradient, the optimizer step's copies) can be read.

`window` gives the columns either side of the loss's, or the last columns of the step (the backward pass's
end, the gradient reduction and the optimizer step); `tops` gives the totals it writes, without drawing. The
peak's triangle is left out (`plot_step(peak_mark=False)`): the dashed line and the totals mark the peak.
"""

from __future__ import annotations

from fractions import Fraction

from matplotlib.figure import Figure

from .. import checks, units
from .axis_cut import mark_cut
from .step_figure import Panel, check_panels, plot_step, short_name
from .step_floor import differ_below, lift, note_rises
from .step_legend import Shown, above, fit, title_peak

#: What a zoom can be around: the loss's column, or the step's end.
AROUND = ("loss", "end")
#: The title a zoom gets when it is given none.
TITLES = {"loss": "Around the loss", "end": "The step's end"}
#: Columns a zoom shows either side of the loss, or in all at the step's end less one.
SPAN = 2


def window(panel: Panel, around: str = "loss") -> tuple[int, ...]:
    """The x positions (`Panel.columns`) a zoom shows: the loss's column and SPAN either side, or the step's
    last 2·SPAN + 1 columns."""
    checks.instance("panel", panel, Panel, "a step_figure.Panel")
    if around not in AROUND:
        raise ValueError(f"around must be one of {', '.join(AROUND)}, got {checks.shown(around)}")
    xs, loss_x = panel.columns()
    if around == "loss":
        if loss_x is None:
            raise ValueError("around='loss' needs a panel with a loss column (Panel(model_loss=...))")
        return tuple(range(loss_x - SPAN, loss_x + SPAN + 1))
    last = max(xs)
    return tuple(range(last - 2 * SPAN, last + 1))


def tops(panel: Panel, unit: str = "GB", around: str = "loss") -> dict[str, Fraction]:
    """Each shown column's total in `unit`, named as the zoom's axis names it ("fwd block 32", "loss")."""
    shown = window(panel, around)  # checks panel and around first
    size = units.unit_size(units.unit_name(unit))
    xs, loss_x = panel.columns()
    at = {x: phase for x, phase in zip(xs, panel.timeline.phases, strict=True)}
    out = {}
    for x in shown:
        if x == loss_x:
            out["loss"] = Fraction(panel.timeline.as_loss_runs.total + panel.model_loss) / size
        else:
            out[short_name(at[x].name)] = Fraction(at[x].total) / size
    return out


def plot_zoom(
    panels, unit: str = "GB", title: str = "", around: str = "loss", same_floor: bool = False
) -> Figure:
    """`plot_step`'s panels, each showing only `window`'s columns, its y axis from a little under their
    lowest top (with `same_floor`, every panel on one scale, from the lowest of those to above the highest),
    each column's total written above it and the peak in the title to two decimals, as the totals are."""
    checks.instance("title", title, str, "text")
    checks.instance("same_floor", same_floor, bool, "True or False")
    check_panels(panels)  # before `drawn` walks them
    every = [tops(p, unit, around) for p in panels]  # each panel's columns, named, and their totals
    cuts = _same([_cut(named.values()) for named in every], min, same_floor)
    placed = [_phases(p, around) for p in panels]  # each panel's columns as (phase index, x position)
    columns = [[i for i, _ in pairs] for pairs in placed]
    across = differ_below(panels, unit, cuts[0], columns) if same_floor else ()  # unseen, panel to panel
    panels = [  # what grows under a cut, or differs under one scale's cut, drawn on top of the bars
        lift(p, unit, cut, phases, across) for p, cut, phases in zip(panels, cuts, columns, strict=True)
    ]
    kinds = drawn(panels, unit, around, cuts)  # the legend keeps to what the cut columns draw
    # the dashed line and the totals mark the peak here, so no triangle (plot_step leaves room for a title)
    title = title or TITLES.get(around, "")
    fig = plot_step(panels, unit, title, shown=kinds, peak_mark=False)
    highs = _same([float(max(named.values())) for named in every], max, same_floor)
    for ax, panel, cut, named, high, pairs in zip(fig.axes, panels, cuts, every, highs, placed, strict=True):
        shown = window(panel, around)
        totals = [float(v) for v in named.values()]
        title_peak(ax, panel, unit, 2)
        ax.set_xlim(shown[0] - 0.6, shown[-1] + 0.6)
        ax.set_ylim(cut, high + 0.25 * (high - cut))
        if cut > 0:
            mark_cut(ax)
        ax.set_xticks(shown, list(named), fontsize=7.5)
        for x, total in zip(shown, totals, strict=True):
            ax.text(x, total, units.format_number(total, 2), ha="center", va="bottom", fontsize=7, zorder=6,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6})  # fmt: skip
        note_rises(ax, panel, unit, cut, pairs)
        for text in ax.texts[:]:  # a reference line's label, outside the cut y range, would float
            if text.get_transform() != ax.transData and not cut <= text.get_position()[1] <= high * 1.3:
                text.set_visible(False)
    fit(fig, bool(title))  # laid out again for the columns' own names
    return fig


def _same(values: list[float], pick, same: bool) -> list[float]:
    """`values`, or with `same` all of them `pick(values)`: one scale for every panel."""
    return [pick(values)] * len(values) if same else values


def floor(panel: Panel, unit: str = "GB", around: str = "loss") -> float:
    """Where a zoom's y axis starts for `panel`: a little under its columns' lowest top (`tops`)."""
    return _cut(tops(panel, unit, around).values())


def _cut(totals) -> float:
    """A little under the lowest of a zoom's column totals: room to see how they differ."""
    low, high = float(min(totals)), float(max(totals))
    return max(0.0, low - max(high - low, 0.1 * high))


def _phases(panel: Panel, around: str) -> list[tuple[int, int]]:
    """Each column `window` shows as (phase index, x position); the loss's column stands on the last forward
    bar, so it takes that phase."""
    xs, _ = panel.columns()
    at = {x: i for i, x in enumerate(xs)}
    return [(at.get(x, panel.timeline.after_forward_index), x) for x in window(panel, around)]


def drawn(panels, unit: str = "GB", around: str = "loss", cuts=None) -> Shown:
    """The kinds a zoom's bars show above its cut y axes (`cuts`, one per panel; `floor` by default) in its
    columns, over all `panels`, and whether a boundary phase shows. A kind held only below the cut, as the
    model state is, is left out."""
    kinds, boundaries = set(), False
    cuts = [floor(p, unit, around) for p in panels] if cuts is None else cuts
    for panel, cut in zip(panels, cuts, strict=True):
        _, loss_x = panel.columns()
        columns = _phases(panel, around)
        if loss_x in (x for _, x in columns):
            kinds.add("loss")
        kinds |= above(panel, units.unit_name(unit), cut, [phase for phase, _ in columns])
        boundaries |= any(x != loss_x and panel.timeline.phases[i].kind == "boundary" for i, x in columns)
    return frozenset(kinds), boundaries
