"""Figures for the lessons: who holds what, per-stage bars, scaling curves and step times."""

from __future__ import annotations

from fractions import Fraction

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from . import checks, communication, memory, units
from .recipes import MIXED_ADAM, STATES, Recipe, get
from .stages import Stage

#: One colour per state, used by every figure so that the lessons read alike.
COLOURS = {"weights": "#4c72b0", "gradients": "#dd8452", "optimizer": "#55a868"}
LABELS = {"weights": "weights", "gradients": "gradients", "optimizer": "optimizer state"}
#: Most GPUs `plot_partitioning` draws, one row each.
MAX_DRAWN_GPUS = 16
#: Most link speeds `plot_step_times` sets side by side.
MAX_LINKS = 8


def _plain(text: str) -> str:
    """User text for a matplotlib label: a "$" would start mathtext, which can fail to parse."""
    return text.replace("$", r"\$")


def plot_partitioning(gpus: int = 4, recipe: Recipe | str = MIXED_ADAM) -> Figure:
    """The ZeRO paper's Figure 1 idea: for each stage and GPU, whole states versus owned shards."""
    gpus, recipe = checks.whole("gpus", gpus, high=MAX_DRAWN_GPUS), get(recipe)
    fig, axes = plt.subplots(len(Stage), 1, figsize=(8, 6.4), sharex=True)
    width = float(recipe.total_bytes)
    for ax, stage in zip(axes, Stage):
        for gpu in range(gpus):
            left = 0.0
            for state in STATES[::-1]:  # weights, gradients, optimizer from left to right
                size = float(recipe.bytes_for(state))
                _draw_state(ax, gpu, gpus, left, size, COLOURS[state], stage.partitions(state))
                left += size
        ax.set_ylabel(stage.label, rotation=0, ha="right", va="center")
        ax.set_yticks(range(gpus), [f"GPU {g}" for g in range(gpus)], fontsize=7)
        ax.set_xlim(0, width)
        ax.invert_yaxis()
        ax.spines[["top", "right"]].set_visible(False)
    axes[-1].set_xlabel(f"bytes per parameter ({_plain(recipe.summary())})")
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[s]) for s in STATES[::-1]]
    fig.legend(handles, [LABELS[s] for s in STATES[::-1]], loc="upper center", ncol=3, frameon=False)
    fig.suptitle("Solid: the GPU keeps its own shard.  Faded: the shards other GPUs keep.", y=0.02, fontsize=9)
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    plt.close(fig)
    return fig


def _done(fig: Figure) -> Figure:
    """Lay out `fig` and detach it from pyplot, so a notebook shows it once, as the cell's value."""
    fig.tight_layout()
    plt.close(fig)
    return fig


def _draw_state(ax, gpu: int, gpus: int, left: float, size: float, colour: str, split: bool) -> None:
    """Draw one GPU's copy of one state: whole, or 1/N owned and the rest faded."""
    if not split:
        ax.barh(gpu, size, left=left, color=colour, edgecolor="white")
        return
    piece = size / gpus
    ax.barh(gpu, size, left=left, color=colour, alpha=0.15, edgecolor="white")
    ax.barh(gpu, piece, left=left + gpu * piece, color=colour, edgecolor="white")


def plot_stage_bars(params: int, gpus: int, recipe: Recipe | str = MIXED_ADAM, unit: str = "GB",
                    budget=None) -> Figure:
    """Stacked per-GPU bars, one per stage, with the memory budget as a line."""
    params, gpus, recipe, unit = checks.params(params), checks.gpus(gpus), get(recipe), units.unit_name(unit)
    limit = None if budget is None else units.as_bytes("budget", budget)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    names = [s.label for s in Stage]
    bottom = [0.0] * len(names)
    for state in STATES[::-1]:
        heights = [float(units.in_unit(getattr(memory.per_gpu(params, gpus, s, recipe), state), unit)) for s in Stage]
        ax.bar(names, heights, bottom=bottom, color=COLOURS[state], label=LABELS[state])
        bottom = [b + h for b, h in zip(bottom, heights)]
    for x, total in enumerate(bottom):
        ax.annotate(units.format_number(Fraction(total).limit_denominator(1000)), (x, total),
                    ha="center", va="bottom", fontsize=9)
    if limit is not None:
        ax.axhline(float(units.in_unit(limit, unit)), color="crimson", ls="--", label="memory per GPU")
    ax.set_ylabel(f"model state per GPU ({unit})")
    ax.set_title(f"{units.format_count(params)} parameters on {gpus} GPUs ({_plain(recipe.name)})")
    ax.legend(frameon=False, fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    return _done(fig)


def plot_scaling(params: int, recipe: Recipe | str = MIXED_ADAM, unit: str = "GB", max_gpus: int = 1024,
                 budget=None) -> Figure:
    """Per-GPU model state against the number of GPUs, log-log, one curve per stage."""
    params, recipe, unit = checks.params(params), get(recipe), units.unit_name(unit)
    max_gpus = checks.whole("max_gpus", max_gpus, high=checks.MAX_GPUS)
    limit = None if budget is None else units.as_bytes("budget", budget)
    counts = sorted({round(2 ** (k / 4)) for k in range(0, 4 * max_gpus.bit_length() + 1)} | {1})
    counts = [n for n in counts if n <= max_gpus]
    fig, ax = plt.subplots(figsize=(7, 4))
    for stage in Stage:
        ys = [float(units.in_unit(memory.per_gpu(params, n, stage, recipe).total, unit)) for n in counts]
        ax.plot(counts, ys, label=stage.label, lw=2)
    if limit is not None:
        ax.axhline(float(units.in_unit(limit, unit)), color="crimson", ls="--", label="memory per GPU")
    ax.set(xscale="log", yscale="log", xlabel="GPUs (N_d)", ylabel=f"model state per GPU ({unit})",
           title=f"{units.format_count(params)} parameters, {_plain(recipe.name)}")
    ax.legend(frameon=False)
    ax.grid(True, which="major", alpha=0.3)
    return _done(fig)


def plot_step_times(params: int, gpus: int, links: dict[str, str], dtype: str = "fp16") -> Figure:
    """Seconds per step spent communicating, per stage, for each named link speed (ring, no overlap)."""
    if not isinstance(links, dict) or not 1 <= len(links) <= MAX_LINKS:
        raise TypeError(f"links must be a dict of 1 to {MAX_LINKS} names and speeds such as "
                        f"{{'InfiniBand': '200 Gb/s'}}, got {checks.kind(links)}")
    for name in links:
        checks.instance("each link name", name, str, "text such as 'InfiniBand'")
    times = {name: [float(communication.step_time(params, gpus, s, speed, dtype, ring=True)) for s in Stage]
             for name, speed in links.items()}
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / len(links)
    for i, (name, speed) in enumerate(links.items()):
        ax.bar([x + i * width for x in range(len(Stage))], times[name], width,
               label=_plain(f"{name} ({speed})"))
    ax.set_xticks([x + width * (len(links) - 1) / 2 for x in range(len(Stage))], [s.label for s in Stage])
    positive = all(t > 0 for row in times.values() for t in row)  # one GPU sends nothing: no log scale then
    ax.set(yscale="log" if positive else "linear", ylabel="seconds per step",
           title=f"{units.format_count(params)} parameters on {gpus} GPUs, {dtype}")
    ax.legend(frameon=False, fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    return _done(fig)
