"""Each setup's peak as one stacked bar, part by part: the answer a step figure builds up to, in one picture.

A bar is the phase where the setup peaks once the loss is counted (`Timeline.peak_with_loss`): the forward
pass's end with the loss hatched on top where the loss is the peak, or else the step model's own peak phase.
One panel per regime (for instance without and with activation checkpointing), on one y scale, with each
setup's figure from the source article as a dotted tick.
"""

from __future__ import annotations

from fractions import Fraction

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from .. import checks, units
from ..planning.step_parts import Phase, Timeline
from .figures import KIND_COLOURS
from .step_legend import KIND_NAMES, LOSS_STYLE, STACK

#: Most regimes drawn side by side, one panel each.
MAX_REGIMES = 4


def peak_phase(timeline: Timeline, loss: int) -> tuple[Phase, int]:
    """The phase a setup's bar draws, and the loss's bytes on top of it (0 where the loss is not the peak)."""
    checks.instance("timeline", timeline, Timeline, "a step model Timeline")
    return timeline.phase_with_loss(loss)


def parts(timeline: Timeline, loss: int, unit: str = "GB") -> dict[str, Fraction]:
    """The bar's heights in `unit`, bottom to top, kinds held only, and "loss" last if it is on top."""
    phase, on_top = peak_phase(timeline, loss)
    size = units.unit_size(units.unit_name(unit))
    heights = {kind: Fraction(phase.bytes_of(kind)) / size for kind in STACK if phase.bytes_of(kind)}
    return heights | ({"loss": Fraction(on_top) / size} if on_top else {})


def plot_peaks(
    regimes: dict, loss: int, article: dict | None = None, unit: str = "GB", title: str = ""
) -> Figure:
    """One panel per regime (name -> timelines, one per setup), each setup's peak with the loss as a stacked
    bar, its total above it; `article` (setup label -> GB) adds the article's figure as a dotted tick."""
    if not isinstance(regimes, dict) or not 1 <= len(regimes) <= MAX_REGIMES:
        raise TypeError(
            f"regimes must be a dict of 1 to {MAX_REGIMES} names and timelines, got {checks.kind(regimes)}"
        )
    unit, article = units.unit_name(unit), _article(article)
    checks.instance("title", title, str, "text")
    fig, axes = plt.subplots(
        1, len(regimes), figsize=(4.2 * len(regimes) + 1.6, 3.6), sharey=True, squeeze=False
    )
    for ax, (name, timelines) in zip(axes[0], regimes.items(), strict=True):
        _panel(ax, name, timelines, loss, article, unit)
    _legend(fig, [t for ts in regimes.values() for t in ts], loss, unit, bool(article))
    if title:
        fig.suptitle(title.replace("$", r"\$"), fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    plt.close(fig)
    return fig


def _article(article: dict | None) -> dict[str, float]:
    """`article` as setup label -> a size in the figure's unit, checked; {} for None."""
    if article is None:
        return {}
    checks.instance(
        "article", article, dict, "a dict of setup labels and sizes, such as {'PyTorch DDP': 120}"
    )
    for label in article:
        checks.instance("each article label", label, str, "a setup's label, such as 'PyTorch DDP'")
    return {label: float(checks.amount("each article size", size)) for label, size in article.items()}


def _panel(ax, name: str, timelines, loss: int, article: dict, unit: str) -> None:
    """One regime: a stacked bar per setup, its total written above, the article's figure as a dotted tick."""
    for x, timeline in enumerate(timelines):
        bottom = 0.0
        for kind, height in parts(timeline, loss, unit).items():
            style = LOSS_STYLE if kind == "loss" else {"color": KIND_COLOURS[kind]}
            ax.bar(x, float(height), bottom=bottom, width=0.7, **style)
            bottom += float(height)
        ax.annotate(units.format_number(bottom, 2), (x, bottom), ha="center", va="bottom", fontsize=8)
        label = timeline.framework.label
        if label in article:
            ax.hlines(article[label], x - 0.42, x + 0.42, colors="black", linestyles=":", lw=1.2)
    ax.set_xticks(range(len(timelines)), [_short(t.framework.label) for t in timelines], fontsize=8)
    ax.set_title(name, fontsize=9)
    if ax.get_subplotspec().is_first_col():
        ax.set_ylabel(unit)
    ax.spines[["top", "right"]].set_visible(False)


def _short(label: str) -> str:
    """A setup's name under its bar: "DeepSpeed ZeRO-2" -> "ZeRO-2", "PyTorch DDP" -> "DDP"."""
    return label.removeprefix("DeepSpeed ").removeprefix("PyTorch ")


def _legend(fig: Figure, timelines, loss: int, unit: str, article: bool) -> None:
    """The kinds drawn in any bar, bottom to top, then the loss and the article's tick."""
    held = set().union(*(parts(t, loss, unit) for t in timelines))  # each bar's parts, read once
    drawn = [k for k in STACK if k in held]
    handles = [plt.Rectangle((0, 0), 1, 1, color=KIND_COLOURS[k]) for k in drawn]
    names = [KIND_NAMES[k] for k in drawn]
    if "loss" in held:
        handles.append(plt.Rectangle((0, 0), 1, 1, **LOSS_STYLE))
        names.append("the loss, where it tops the step")
    if article:
        handles.append(plt.Line2D([], [], color="black", ls=":", lw=1.2))
        names.append("the article's figure")
    fig.legend(handles[::-1], names[::-1], loc="center right", fontsize=7.5, frameon=False)
