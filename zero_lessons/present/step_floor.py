"""A step figure whose y axes start above 0 (`plot_step(floor=)`, `step_zoom.plot_zoom`): what the cut
hides.

Below the cut the reader sees no colour, so a part of a bar that lies wholly under it and grows from one
column to the next (stage 2's gradient partition, arriving in the backward pass) would read as the parts above
it growing. `rises` finds those steps; `lift` draws the kinds that grew on top of the panel's bars, where
they show, and `note_rises` writes at the foot of its column what still grows unseen (a bar wholly under the
cut).
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .. import units
from .axis_cut import mark_cut
from .step_legend import STACK, stacked

#: The note's box: white, a little see-through, so a bar's colour shows at its edge.
NOTE = {"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 0.8}


def _hidden(heights: dict, cut: float, phase: int) -> dict[str, Fraction]:
    """The kinds of the bar at `phase` (an index) that lie wholly under `cut`, bottom first."""
    return {kind: height for kind, height, top in stacked(heights, phase) if top <= cut}


def rises(panel, unit: str, cut: float, phases) -> dict[int, tuple[Fraction, tuple[str, ...]]]:
    """Where the hidden part grows from one of `phases` (indices, in the figure's order) to the next: the
    phase, the rise in `unit` and the kinds that grew, in stacking order."""
    heights, found, before = panel.heights(unit), {}, None
    for phase in phases:
        now = _hidden(heights, cut, phase)
        if before is not None and sum(now.values()) > sum(before.values()):
            grew = tuple(k for k in STACK if now.get(k, 0) > before.get(k, 0))
            found[phase] = (sum(now.values()) - sum(before.values()), grew)
        before = now
    return found


def lift(panel, unit: str, cut: float, phases=None, also: tuple[str, ...] = ()):
    """`panel` with the kinds that grow wholly under `cut` at `phases` (indices, in the figure's order; all
    if None), and the kinds `also`, drawn on top of its bars (`Panel.on_top`), so that their growth shows
    above the cut."""
    phases = range(len(panel.timeline.phases)) if phases is None else phases
    grew = {kind for _, kinds in rises(panel, unit, cut, phases).values() for kind in kinds} | set(also)
    return replace(panel, on_top=tuple(k for k in STACK if k in grew)) if grew else panel


def differ_below(panels, unit: str, cut: float, columns) -> tuple[str, ...]:
    """The kinds that lie wholly under `cut` in every one of `panels` (drawn on one scale) at their `columns`
    (phase indices, one list per panel, in the figure's order) and differ in height from one panel to
    another, column by column: unseen, they would make the parts above them seem to differ instead."""
    heights_at: dict[tuple[str, int], list] = {}
    above: set[str] = set()
    for panel, phases in zip(panels, columns, strict=True):
        heights = panel.heights(unit)
        for k, phase in enumerate(phases):
            for kind, height, top in stacked(heights, phase):
                if top > cut:
                    above.add(kind)
                heights_at.setdefault((kind, k), []).append(height)
    differ = {kind for (kind, _), hs in heights_at.items() if len(set(hs)) > 1 or len(hs) < len(panels)}
    return tuple(kind for kind in STACK if kind in differ and kind not in above)


def note_rises(ax, panel, unit: str, cut: float, columns) -> None:
    """Write each of `rises` at the foot of its column; `columns` gives each column shown as (phase index, x
    position), in the figure's order (two columns may stand on one phase: the loss's on the forward pass's
    end; a rise is written at the first)."""
    x_of: dict[int, float] = {}
    for phase, x in columns:
        x_of.setdefault(phase, x)
    for phase, (rise, grew) in rises(panel, unit, cut, [phase for phase, _ in columns]).items():
        words = f"+{units.format_number(float(rise), 2)} {unit}\n{', '.join(grew)}\nbelow the axis"
        ax.text(x_of[phase], cut, words, ha="center", va="bottom", fontsize=6, zorder=6, bbox=NOTE)


def apply_floor(fig: Figure, axes, panels, bottom: float, unit: str) -> None:
    """Start every y axis at `bottom` (none if 0), with ticks enough to read a cut axis by, and note what it
    hides; at or above a panel's top, close the figure and raise."""
    for ax, panel in zip(axes, panels, strict=True) if bottom else ():
        if bottom >= ax.get_ylim()[1]:
            plt.close(fig)
            raise ValueError(
                f"floor must be below the panel's top, {ax.get_ylim()[1]:.3g} {unit}, got {bottom:g}"
            )
        ax.set_ylim(bottom, ax.get_ylim()[1])
        mark_cut(ax)
        ax.yaxis.set_major_locator(
            MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10])
        )  # a cut axis needs its ticks
        xs, _ = panel.columns()
        note_rises(ax, panel, unit, bottom, list(enumerate(xs)))
