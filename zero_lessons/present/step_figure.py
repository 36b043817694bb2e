"""Memory over one step as a figure: the model's parts stacked per phase, measured bytes as markers.

One panel per framework setup (DDP, ZeRO-1, ZeRO-2, ZeRO-3, FSDP2), the step's phases along the x axis. Each
bar is the planning model's bytes at a phase, stacked by kind (model states at the bottom, buffers above); a
black marker is what the busiest rank measured, a dashed box how far above the model it may be. The loss,
which has no phase, may get a column of its own with a hollow marker. Grey bands mark the boundaries between
passes; a dashed line marks the peak, a triangle its bar. `Panel.heights` and `Panel.labels` give the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.transforms import ScaledTranslation

from .. import checks, units
from ..planning.step_parts import Timeline
from .figures import KIND_COLOURS
from .step_chart import SHORT  # the explorer's chart names the phases the same way
from .step_floor import apply_floor, lift
from .step_legend import LEGEND_ROW, LEGEND_ROWS, LOSS_STYLE, STACK, Shown, above, fit, legend, title_peak

#: Most phases named one by one on the axis; a longer step names its runs instead.
MAX_LABELLED = 24
#: a long step numbers every BLOCK_TICKS-th block on its x axis, in both passes
BLOCK_TICKS = 8
#: A long step's phases after the backward pass, one bar wide each, named upright by their short names.
END_PHASES = ("gradient reduction", "before optimizer step", "optimizer step", "after optimizer step")
END_NAMES = {SHORT[name] for name in END_PHASES}
#: Most panels one figure holds.
MAX_PANELS = 8
#: Inches: the book's text column is about 784 px wide at matplotlib's 100 dpi.
WIDTH, PANEL_HEIGHT = 7.84, 1.9


def short_name(phase: str) -> str:
    """A phase's name on the axis: "forward layer 3" -> "fwd layer 3", "optimizer step" -> "step"."""
    if phase in SHORT:
        return SHORT[phase]
    for long, short in (("forward ", "fwd "), ("backward ", "bwd ")):
        if phase.startswith(long):
            return short + phase.removeprefix(long)
    return phase


def _per_phase(name: str, values, count: int) -> tuple[int | Fraction, ...]:
    """`values` checked as one exact byte count ≥ 0 per phase."""
    if not isinstance(values, (tuple, list)) or len(values) != count:
        raise ValueError(f"{name} must give one value per phase ({count}), got {checks.shown(values)}")
    exact = tuple(checks.exact(name, v, digits=None) for v in values)
    if any(v < 0 for v in exact):
        raise ValueError(f"{name} bytes must be ≥ 0, got {min(exact)}")
    return exact


@dataclass(frozen=True)
class Panel:
    """One setup's step in one panel: the model's timeline, and what the busiest rank measured per phase."""

    title: str  #: above the panel, e.g. "DeepSpeed ZeRO-3 on 2 ranks"
    timeline: Timeline  #: the planning model's phases and parts
    #: bytes measured at each phase, in the timeline's order (None: the model alone)
    measured: tuple[int | Fraction, ...] | None = None
    #: a level to compare with, e.g. ("the article: 15 GB", 15 * 10**9): a dotted line, named at the right
    reference: tuple[str, int | Fraction] | None = None
    #: per phase, how far above the model a measurement may be (buffers the model leaves out), drawn as a
    #: dashed box on top of each bar (None: not drawn)
    tolerance: tuple[int | Fraction, ...] | None = None
    #: bytes measured while the loss is computed, a stretch the model has no phase for; drawn as a hollow
    #: marker in a column of its own after the forward pass (None: no such column)
    loss: int | Fraction | None = None
    #: bytes the model's loss holds after the forward pass (`Timeline.peak_with_loss`), beside all that pass
    #: holds: drawn as that phase's bar with the loss hatched on top, in the loss's column (None: not drawn)
    model_loss: int | Fraction | None = None
    #: kinds drawn at the top of every bar, not in their place: where a cut y axis would hide them growing
    on_top: tuple[str, ...] = ()

    def __post_init__(self):
        checks.instance("title", self.title, str, "text")
        checks.instance("timeline", self.timeline, Timeline, "a planning Timeline (planning.timeline)")
        if not isinstance(self.on_top, tuple) or not set(self.on_top) <= set(STACK):
            raise ValueError(
                f"on_top must be a tuple of kinds from {', '.join(STACK)}, got {checks.shown(self.on_top)}"
            )
        count = len(self.timeline.phases)
        for name in ("measured", "tolerance"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _per_phase(name, getattr(self, name), count))
        if self.reference is not None:
            if not isinstance(self.reference, tuple) or len(self.reference) != 2:
                raise TypeError(
                    f"reference must be a (label, bytes) pair, got {checks.shown(self.reference)}"
                )
            checks.instance("reference label", self.reference[0], str, "text")
            level = checks.exact("reference bytes", self.reference[1], digits=None)
            object.__setattr__(self, "reference", (self.reference[0], level))
        for name in ("loss", "model_loss"):
            if getattr(self, name) is not None:
                if not any(p.kind == "forward" for p in self.timeline.phases):
                    raise ValueError(f"{name} needs a timeline with a forward pass to follow")
                object.__setattr__(self, name, _per_phase(name, (getattr(self, name),), 1)[0])

    @property
    def peak(self) -> tuple[int | Fraction, int | None]:
        """The panel's peak in bytes and its phase (None: the loss's column, if the modelled loss tops)."""
        t = self.timeline
        if self.model_loss is None or not t.loss_is_peak(self.model_loss):
            return t.peak.total, t.peak_index
        return t.peak_with_loss(self.model_loss), None

    def columns(self) -> tuple[tuple[int, ...], int | None]:
        """The x position of each phase, and of the loss's column (None without one): the loss comes
        right after the last forward phase, and the phases after it move one place right."""
        count = len(self.timeline.phases)
        if self.loss is None and self.model_loss is None:
            return tuple(range(count)), None
        after = self.timeline.after_forward_index
        return tuple(i + (i > after) for i in range(count)), after + 1

    def heights(self, unit: str = "kB") -> dict[str, tuple[Fraction, ...]]:
        """Each kind's height in `unit` at every phase, bottom to top (`on_top` last), if ever held."""
        size, order = units.unit_size(unit), [k for k in STACK if k not in self.on_top] + list(self.on_top)
        rows = {
            kind: tuple(Fraction(p.bytes_of(kind)) / size for p in self.timeline.phases) for kind in order
        }
        return {kind: row for kind, row in rows.items() if any(row)}

    @property
    def long(self) -> bool:
        """Whether the step has too many phases to name each one on the axis."""
        return len(self.timeline.phases) > MAX_LABELLED

    def labels(self) -> tuple[str, ...]:
        """The x axis's words, one per phase: every phase of a short step; else the start, each BLOCK_TICKS-th
        block's number in both passes (not the two beside the turn, where the loss's column goes), the passes'
        names under the middle of their runs, and each of `END_PHASES` by its short name."""
        phases = self.timeline.phases
        if not self.long:
            return tuple(short_name(p.name) for p in phases)
        shown = [_block_tick(p.name) for p in phases]
        kinds = [p.kind for p in phases]
        for turn in (len(kinds) - 1 - kinds[::-1].index("forward"), kinds.index("backward")):
            shown[turn] = ""  # the blocks either side of the turn between the passes, where the loss goes
        for way, words in (("forward", "blocks, forward →"), ("backward", "← backward, blocks")):
            run = [i for i, p in enumerate(phases) if p.kind == way]
            middle = run[len(run) // 2]
            shown[middle] = "\n".join(filter(None, (shown[middle], words)))
        for i, phase in enumerate(phases):
            if phase.name == "start of step" or phase.name in END_PHASES:
                shown[i] = short_name(phase.name)
        return tuple(shown)


def _block_tick(name: str) -> str:
    """A long step's tick for the phase `name`: the block's number if it is a multiple of BLOCK_TICKS."""
    way, _, rest = name.partition(" block ")
    ticked = way in ("forward", "backward") and rest.isdigit() and int(rest) % BLOCK_TICKS == 0
    return rest if ticked else ""


def check_panels(panels) -> None:
    """Raise a one-line error unless `panels` is a list of 1 to MAX_PANELS `Panel`."""
    if not isinstance(panels, (tuple, list)) or not 1 <= len(panels) <= MAX_PANELS:
        raise TypeError(f"panels must be a list of 1 to {MAX_PANELS} Panel, got {checks.shown(panels)}")
    for panel in panels:
        checks.instance("each panel", panel, Panel, "a step_figure.Panel")


def plot_step(
    panels,
    unit: str = "kB",
    title: str = "",
    same_scale: bool = False,
    floor: float = 0,
    shown: Shown | None = None,
    peak_mark: bool = True,
) -> Figure:
    """Stacked bars of the model's parts per phase, one panel per setup, measured bytes as markers.

    `same_scale` gives every panel the tallest's y range; `floor` (in `unit`) starts every y axis there, the
    legend naming only kinds above it; `shown` keeps the legend to what `step_zoom`'s columns draw;
    `peak_mark` False leaves out the triangle over the peak's bar, in the panels and the legend."""
    check_panels(panels)
    unit = units.unit_name(unit)
    checks.instance("title", title, str, "text")
    checks.instance("same_scale", same_scale, bool, "True or False")
    checks.instance("peak_mark", peak_mark, bool, "True or False")
    bottom = float(checks.amount("floor", floor))
    head = LEGEND_ROW * LEGEND_ROWS + (0.3 if title else 0.05)
    height = PANEL_HEIGHT * max(len(panels), 2) + head  # a lone panel: two panels' height, its slivers show
    panels = [lift(p, unit, bottom) for p in panels] if bottom else panels  # growth under the cut, on top
    fig, axes = plt.subplots(len(panels), 1, figsize=(WIDTH, height))
    axes = [axes] if len(panels) == 1 else list(axes)
    for ax, panel in zip(axes, panels, strict=True):
        _draw_panel(ax, panel, unit, peak_mark)
    if same_scale:
        top = max(ax.get_ylim()[1] for ax in axes)
        for ax in axes:
            ax.set_ylim(0, top)
    apply_floor(fig, axes, panels, bottom, unit)
    if bottom and shown is None:
        shown = frozenset().union(*(above(p, unit, bottom) for p in panels), {"loss"}), True
    legend(fig, panels, unit, 1 - (0.3 if title else 0.05) / height, shown, peak_mark, bottom)
    if title:
        fig.suptitle(title.replace("$", r"\$"), fontsize=10, y=1 - 0.04 / height, va="top")
    fit(fig, bool(title))
    plt.close(fig)
    return fig


#: the red triangle over the peak's bar, drawn unclipped above the axes if need be
PEAK_MARK = {"marker": "v", "ms": 5, "color": "crimson", "ls": "none", "zorder": 5, "clip_on": False}


def _draw_panel(ax, panel: Panel, unit: str, peak_mark: bool = True) -> None:
    """One setup: boundaries shaded, bars stacked by kind, measured markers, the model's peak dashed."""
    size = units.unit_size(unit)
    tops = _draw_bars(ax, panel, unit)
    top, at = panel.peak
    peak = float(Fraction(top) / size)
    ax.axhline(peak, color="crimson", ls="--", lw=0.9, zorder=1, gid="peak")
    ax.set_title(panel.title.replace("$", r"\$"), fontsize=9, loc="left", pad=3)
    title_peak(ax, panel, unit)
    xs, loss_x = panel.columns()
    lifted = ax.transData + ScaledTranslation(0, 7 / 72, ax.figure.dpi_scale_trans)  # clear of the diamond
    if peak_mark:  # over its column's tolerance box or marker where they top the peak: it marks the column
        box, marks = ([], [panel.loss]) if at is None else ([tops[at]], (panel.measured or ())[at : at + 1])
        over = max([peak, *map(float, box), *(float(Fraction(v) / size) for v in marks if v)])  # marks: bytes
        ax.plot([loss_x if at is None else xs[at]], [over], gid="peak bar", transform=lifted, **PEAK_MARK)
    ticks, labels = list(xs), list(panel.labels())
    if loss_x is not None:
        ticks.insert(loss_x, loss_x)
        labels.insert(loss_x, "loss")
    if panel.long:
        ax.set_xticks(ticks, labels, fontsize=7.5)
        ax.tick_params(axis="x", length=0)
        for text in ax.get_xticklabels():
            if text.get_text() in END_NAMES:
                text.set(rotation=90, fontsize=6.5, va="top")
    else:
        ax.set_xticks(ticks, labels, rotation=40, ha="right", fontsize=7, rotation_mode="anchor")
    ax.set_xlim(-0.6, max(ticks) + 0.6)
    if panel.reference is not None:
        label, level = panel.reference[0], float(panel.reference[1] / size)
        ax.axhline(level, color="black", ls=":", lw=1.1, zorder=4, gid="reference")
        ax.text(1.005, level, label, transform=ax.get_yaxis_transform(), va="center", fontsize=7)
    marks = [*(panel.measured or ()), *([] if panel.loss is None else [panel.loss])]
    ax.set_ylim(0, max([peak, *tops, *(float(v / size) for v in marks)]) * 1.1)
    ax.set_ylabel(unit, fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.spines[["top", "right"]].set_visible(False)


def _draw_bars(ax, panel: Panel, unit: str) -> list[float]:
    """Grey bands behind the boundaries, the model's parts stacked per phase, the tolerance boxes on top and
    the measured markers; returns the top of each bar with its tolerance."""
    t, size = panel.timeline, units.unit_size(unit)
    x, loss_x = panel.columns()
    for i, phase in zip(x, t.phases, strict=True):
        if phase.kind == "boundary":
            ax.axvspan(i - 0.5, i + 0.5, color="#e6e6e6", zorder=0, lw=0, gid="boundary")
    bottom = [0.0] * len(t.phases)
    for kind, row in panel.heights(unit).items():
        heights = [float(h) for h in row]
        _bars(ax, x, heights, bottom, color=KIND_COLOURS[kind], gid=kind)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    if panel.tolerance is not None:
        room = [float(v / size) for v in panel.tolerance]  # a boundary allows nothing: no box
        _bars(ax, x, room, bottom, fill=False, edgecolor="#444444", lw=0.6, ls=(0, (2, 1)), gid="tolerance")
        bottom = [b + r for b, r in zip(bottom, room, strict=True)]
    if panel.measured is not None:
        measured = [float(v / size) for v in panel.measured]
        ax.plot(list(x), measured, ls="none", marker="D", ms=3.5, color="black", zorder=3, gid="measured")
    if panel.model_loss is not None:
        _draw_loss_bar(ax, panel, loss_x, unit)
    if panel.loss is not None:
        style = {"marker": "D", "ms": 4, "mfc": "white", "mec": "black", "ls": "none"}
        ax.plot([loss_x], [float(panel.loss / size)], zorder=3, gid="loss", **style)
    return bottom


def _bars(ax, x, heights: list[float], bottom: list[float], **style) -> None:
    """Bars at `x` for the nonzero `heights` only: an empty part or box draws no rectangle (faster)."""
    k = [i for i, h in enumerate(heights) if h]
    ax.bar([x[i] for i in k], [heights[i] for i in k], 0.72, [bottom[i] for i in k], zorder=2, **style)


def _draw_loss_bar(ax, panel: Panel, x: int, unit: str) -> None:
    """The modelled loss's column: what is held as the loss runs (the last forward phase's bar, or the
    timeline's own count of it), stacked as the other bars are, then the loss hatched on top."""
    held, size, base = panel.timeline.as_loss_runs, units.unit_size(unit), 0.0
    for kind in panel.heights(unit):
        height = float(Fraction(held.bytes_of(kind)) / size)
        _bars(ax, [x], [height], [base], color=KIND_COLOURS[kind], gid=kind)
        base += height
    loss = float(panel.model_loss / size)
    ax.bar([x], [loss], 0.72, bottom=[base], zorder=2, gid="model loss", **LOSS_STYLE)
