"""The step figure's legend, and each panel's peak written above it (`title_peak`). The legend: one block
above the panels, in columns under three headings (the model state drawn, the buffers drawn, the marks),
each column `LEGEND_DEPTH` entries deep."""

from __future__ import annotations

from fractions import Fraction

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from .. import units
from ..planning.step_parts import AT_THE_LOSS, KINDS
from .figures import KIND_COLOURS, STATE_NAMES

#: Kinds from the bottom of a bar to its top: weights, gradients, optimizer state, then transient buffers.
STACK = ("weights", "gradients", "optimizer", *KINDS[3:])
#: A kind's name in the legend.
KIND_NAMES = {**STATE_NAMES, **{kind: kind for kind in KINDS[3:]}}
#: How the modelled loss is drawn: hatched, as it is no kind of the step model's own
LOSS_STYLE = {"facecolor": "white", "edgecolor": "#333333", "hatch": "////", "lw": 0.6}
#: Legend entries per column, under the column's heading, and the inches each row takes.
LEGEND_DEPTH, LEGEND_ROW = 3, 0.13
#: Rows the legend takes, whatever it shows: a heading, then `LEGEND_DEPTH` entries.
LEGEND_ROWS = LEGEND_DEPTH + 1
#: The legend's groups, one heading each: the paper's model state, the activations and the step's buffers,
#: the marks.
LEGEND_GROUPS = ("model state (bars)", "activations and buffers (bars)", "marks")
#: What a figure of some columns draws: the kinds in its bars ("loss" where the loss's column shows), and
#: whether it shows a boundary phase.
Shown = tuple[frozenset[str], bool]
#: the grey bands' legend entry: the three moments the step model marks between passes, with no activations
BOUNDARIES = "grey: the start, and before and after the step (no activations)"


def stacked(heights: dict, phase: int):
    """Each kind a bar holds at `phase` (an index of `Panel.heights`' rows), bottom to top: (kind, its
    height, the top of its part)."""
    top = 0
    for kind, row in heights.items():  # bottom to top
        if row[phase]:
            top += row[phase]
            yield kind, row[phase], top


def above(panel, unit: str, cut: float, columns=None) -> frozenset[str]:
    """The kinds whose part of a bar reaches above `cut` (in `unit`) at the phases `columns` (indices, all
    if None): what a panel whose y axis starts at `cut` shows of its bars."""
    heights = panel.heights(unit)
    phases = range(len(panel.timeline.phases)) if columns is None else columns
    return frozenset(kind for i in phases for kind, _, top in stacked(heights, i) if top > cut)


def _peak_name(panels, peak_mark: bool = True) -> str:
    """The peak line's name: the step model's peak, or with the modelled loss where a panel counts it; where
    `peak_mark`, it says that the triangle marks the peak's column, not its height."""
    name = (
        "the peak, loss counted" if any(p.model_loss is not None for p in panels) else "the step model's peak"
    )
    return f"{name} (▼ marks its column)" if peak_mark else name


def legend(
    fig: Figure, panels, unit: str, top: float, shown: Shown | None = None, peak_mark: bool = True, cut=0.0
) -> None:
    """One legend above the panels, in columns under three headings: the kinds of model state drawn, the
    step's buffers drawn, then the markers, the bands and the peak line (with its triangle where
    `peak_mark`). `shown` (kinds, boundaries), for a figure of only some columns, keeps to the kinds it draws
    and drops the band where it shows none; with a y axis `cut` (in `unit`), a kind of model state wholly
    under it keeps its entry, named as under the cut."""
    handles, names = _entries(panels, unit, shown, peak_mark, cut)
    legend = fig.legend(
        handles,
        names,
        loc="upper center",
        ncol=len(handles) // LEGEND_ROWS,
        fontsize=7.5,
        frameon=False,
        bbox_to_anchor=(0.5, top),
        handlelength=1.4,
        handletextpad=0.5,
        columnspacing=1.0,
    )
    for text in legend.get_texts():
        if text.get_text() in LEGEND_GROUPS:
            text.set_fontweight("bold")


def _entries(
    panels, unit: str, shown: Shown | None = None, peak_mark: bool = True, cut=0.0
) -> tuple[list, list]:
    """The legend's handles and names, column by column: each group's heading, then its entries,
    `LEGEND_DEPTH` to a column; a group's further columns have a blank heading, a short column blank rows."""
    blank = plt.Line2D([], [], ls="none")
    handles, names = [], []
    for heading, entries in zip(LEGEND_GROUPS, _groups(panels, unit, shown, peak_mark, cut), strict=True):
        for start in range(0, len(entries), LEGEND_DEPTH):
            column = entries[start : start + LEGEND_DEPTH]
            column += [(blank, "")] * (LEGEND_DEPTH - len(column))
            handles += [blank, *(h for h, _ in column)]
            names += [heading if start == 0 else "", *(n for _, n in column)]
    return handles, names


def _groups(panels, unit: str, shown: Shown | None = None, peak_mark: bool = True, cut=0.0) -> tuple:
    """(handle, name) pairs of each legend group: the model states drawn (or, with a `cut` or in a zoom's
    `shown` columns, wholly under the cut: named so, as the bars stand on them), the buffers, the marks."""
    kinds_shown, boundaries = shown if shown is not None else (set(STACK), True)
    heights = [p.heights(unit) for p in panels]  # once a panel: each call rebuilds every kind's row
    present = [k for k in STACK if any(k in h for h in heights)]
    # a zoom draws only some columns: of the model state it does not draw, name as under its cut only what
    # every phase holds, so that no kind is named that its columns lack (stage 2's gradients, not yet made)
    always = {k for h in heights for k, row in h.items() if all(row)} if shown is not None else set()
    under = {k for k in present if (cut or k in always) and k in STACK[:3] and k not in kinds_shown}
    drawn = [k for k in present if k in kinds_shown or k in under]
    lifted = {k for p in panels for k in p.on_top}  # drawn out of place: the legend says so
    kinds = [
        (plt.Rectangle((0, 0), 1, 1, color=KIND_COLOURS[k]),
         KIND_NAMES[k] + " (drawn on top)" * (k in lifted) + " (under the cut)" * (k in under))
        for k in drawn
    ]  # fmt: skip
    states = [entry for entry, k in zip(kinds, drawn, strict=True) if k in STACK[:3]]
    buffers = [entry for entry, k in zip(kinds, drawn, strict=True) if k not in STACK[:3]]
    marks = []
    if any(p.measured is not None for p in panels):
        marks.append(
            (plt.Line2D([], [], ls="none", marker="D", ms=4, color="black"), "measured, busiest rank")
        )
    if any(p.model_loss is not None for p in panels) and (shown is None or "loss" in kinds_shown):
        buffers.append((plt.Rectangle((0, 0), 1, 1, **LOSS_STYLE), "the loss, after the forward pass"))
    if any(p.loss is not None for p in panels):
        hollow = plt.Line2D([], [], ls="none", marker="D", ms=4, mfc="white", mec="black")
        marks.append((hollow, "measured during the loss"))
    if any(p.tolerance is not None and any(p.tolerance) for p in panels):
        box = plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="#444444", lw=0.6, ls=(0, (2, 1)))
        marks.append((box, "tolerance"))
    if boundaries:
        marks.append((plt.Rectangle((0, 0), 1, 1, color="#e6e6e6"), BOUNDARIES))
    line = plt.Line2D([], [], color="crimson", ls="--", lw=0.9, marker="v" if peak_mark else "", ms=4)
    marks.append((line, _peak_name(panels, peak_mark)))
    return states, buffers, marks


def title_peak(ax, panel, unit: str, digits: int | None = None) -> None:
    """The panel's peak, to `digits` decimals (by default as the tables write the unit: 2 in GB, else 1), and
    where it falls, in red at the right above its axes."""
    digits = (2 if unit == "GB" else 1) if digits is None else digits
    top, at = panel.peak
    where = AT_THE_LOSS if at is None else panel.timeline.phases[at].name  # the full name, as tables write it
    which = "step-model peak" if panel.model_loss is None else "peak (loss counted)"
    shown = units.format_number(Fraction(top) / units.unit_size(unit), digits)
    ax.set_title(f"{which} {shown} {unit} at {where}", fontsize=8, loc="right", pad=3, color="crimson")


def fit(fig, titled: bool) -> None:
    """Lay a step figure's panels out under its legend (and its title, if `titled`): `plot_step` does it once
    its panels are drawn, and `step_zoom` again once it has cut them to a few columns and named those."""
    head = LEGEND_ROW * LEGEND_ROWS + (0.3 if titled else 0.05)
    fig.tight_layout(rect=(0, 0, 1, 1 - (head - 0.12) / fig.get_figheight()), h_pad=0.5)
