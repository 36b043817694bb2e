"""The lab's three ways of cutting parameters into ranks' shares, as data and as matplotlib figures.

- DeepSpeed stages 1/2: one flat buffer, padded to a multiple of 2N, cut into N equal slices that
  ignore parameter boundaries; after backward a rank keeps each parameter touching its slice, whole.
- DeepSpeed stage 3: every parameter cut on its own into N pieces of ⌈n/N⌉ elements; the padding fills
  the end, so when n is small it can fill more than one rank's piece (5 elements: 2 / 2 / 1 / 0).
- FSDP2: every parameter cut by rows into chunks of ⌈rows/N⌉ rows; a short or missing chunk is padded.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from .. import checks, memory
from ..planning import ds_traffic

#: One colour per rank, the same in every lab figure.
RANK_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
PADDING = "#e0e0e0"  #: the colour of padding; it is also hatched, in PADDING_HATCH
PADDING_HATCH = "#555555"  #: the hatch lines of padding, dark enough to see on a thin sliver
#: A parameter narrower than this share of the flat buffer is named above its bar, not inside it.
NARROW = 0.06
MAX_RANKS = len(RANK_COLOURS)


@dataclass(frozen=True)
class Span:
    """A run of elements (or rows) on one rank: real data, or padding."""

    rank: int  #: whose it is
    start: int  #: first element (or row) in the drawing's coordinates
    length: int  #: how many
    padding: bool = False  #: padding, not data


def _check(gpus: int, sizes) -> int:
    """`gpus`, checked against what a figure can draw, after checking `sizes` are whole and positive."""
    if (
        not isinstance(sizes, (list, tuple))
        or not sizes
        or not all(isinstance(n, int) and n >= 1 for n in sizes)
    ):
        raise ValueError(f"sizes must be a non-empty list of whole numbers ≥ 1, got {sizes!r}")
    return checks.whole("gpus", gpus, low=1, high=MAX_RANKS)


def flat_slices(sizes: list[int], gpus: int) -> list[Span]:
    """The stage 1/2 flat buffer: each rank's slice of real elements, then the padding to a multiple of 2N."""
    _check(gpus, sizes)
    psi = sum(sizes)
    part = ds_traffic.padded_flat(psi, gpus) // gpus
    out = []
    for rank in range(gpus):
        low, high = rank * part, (rank + 1) * part
        if min(high, psi) > low:
            out.append(Span(rank, low, min(high, psi) - low))
        if high > psi:
            out.append(Span(rank, max(low, psi), high - max(low, psi), padding=True))
    return out


def zero3_pieces(n: int, gpus: int) -> list[Span]:
    """Stage 3's pieces of one n-element parameter: ⌈n/N⌉ per rank, the padding at the end (which can
    fill several ranks' pieces when n is small)."""
    _check(gpus, [n])
    size = memory.ceil_div(n, gpus)
    out = []
    for rank in range(gpus):
        real = max(0, min(size, n - rank * size))
        if real:
            out.append(Span(rank, rank * size, real))
        if real < size:
            out.append(Span(rank, rank * size + real, size - real, padding=True))
    return out


def fsdp2_chunks(rows: int, gpus: int) -> list[Span]:
    """FSDP2's row chunks of one parameter: ⌈rows/N⌉ rows per rank, a short or missing chunk padded."""
    return zero3_pieces(rows, gpus)  # the same cut, counted in rows instead of elements


def fsdp2_padding(shapes: list[tuple[int, ...]], gpus: int) -> list[int]:
    """Elements of padding each rank holds in its FSDP2 parameter shards: uneven, the last ranks hold more."""
    _check(gpus, [prod(s) for s in shapes])
    out = [0] * gpus
    for shape in shapes:
        for span in fsdp2_chunks(shape[0], gpus):
            out[span.rank] += span.length * prod(shape[1:]) if span.padding else 0
    return out


def _bar(ax, y: float, spans: list[Span], scale: float = 1.0, height: float = 0.6) -> None:
    """Draw spans as one horizontal bar at height y, each rank in its colour, padding hatched."""
    for s in spans:
        colour = PADDING if s.padding else RANK_COLOURS[s.rank]
        ax.barh(
            y,
            s.length * scale,
            left=s.start * scale,
            height=height,
            color=colour,
            edgecolor=PADDING_HATCH if s.padding else "white",
            hatch="///" if s.padding else None,
            linewidth=0.8,
        )


def _legend(ax, gpus: int, below: float = -0.12) -> None:
    """One legend entry per rank, and one for padding."""
    handles = [plt.Rectangle((0, 0), 1, 1, color=RANK_COLOURS[r]) for r in range(gpus)]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor=PADDING, hatch="///", edgecolor=PADDING_HATCH))
    ax.legend(
        handles,
        [f"rank {r}" for r in range(gpus)] + ["padding"],
        loc="upper center",
        bbox_to_anchor=(0.5, below),
        ncol=gpus + 1,
        frameon=False,
        fontsize=9,
    )


def _done(fig: Figure) -> Figure:
    """Lay out `fig` and detach it from pyplot, so a notebook shows it once, as the cell's value."""
    fig.tight_layout()
    plt.close(fig)
    return fig


def _parameter_row(ax, y: float, sizes: list[int], names: list[str], flat: int) -> None:
    """The parameters end to end in alternating greys, each named with its size: inside a wide bar, above a
    narrow one (staggered, so neighbouring narrow names do not touch)."""
    start, above = 0, 0
    for i, n in enumerate(sizes):
        ax.barh(y, n, left=start, height=0.6, color=("#9a9a9a", "#cfcfcf")[i % 2], edgecolor="white")
        if n >= NARROW * flat:
            ax.text(start + n / 2, y, f"{names[i]}  {n}", ha="center", va="center", fontsize=10)
        else:
            middle, rise = start + n / 2, 0.45 + 0.3 * (above % 2)
            ax.annotate(
                f"{names[i]} {n}",
                (middle, y + 0.3),
                (middle, y + rise),
                ha="right" if middle > 0.9 * flat else "left" if middle < 0.1 * flat else "center",
                va="bottom",
                fontsize=10,
                arrowprops={"arrowstyle": "-", "linewidth": 0.6},
            )
            above += 1
        start += n


def plot_flat_buffer(sizes: list[int], gpus: int, names: list[str] | None = None) -> Figure:
    """DeepSpeed stages 1/2: the parameters laid end to end, the ranks' equal slices under them, and below
    each rank the whole gradients it keeps after backward (every parameter touching its slice)."""
    gpus = _check(gpus, sizes)
    names = names or [f"p{i}" for i in range(len(sizes))]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    psi, flat = sum(sizes), ds_traffic.padded_flat(sum(sizes), gpus)
    fig, ax = plt.subplots(figsize=(10, 2.6 + 0.45 * gpus))
    _parameter_row(ax, gpus + 1, sizes, names, flat)
    slices = flat_slices(sizes, gpus)
    _bar(ax, gpus, slices)
    part = flat // gpus
    for rank in range(gpus):
        low, high = rank * part, (rank + 1) * part
        kept = [Span(rank, s, n) for s, n in zip(starts, sizes, strict=True) if s < high and s + n > low]
        _bar(ax, gpus - 1 - rank, kept + [s for s in slices if s.padding and s.rank == rank], height=0.45)
        ax.vlines(low, -0.5, gpus + 0.4, color="black", linewidth=0.6, linestyle=":")  # below the names
    if flat > psi:  # a sliver at the right end: named beside it, outside the axes
        ax.annotate(
            f"◂ padding: {flat - psi:,}", (flat, gpus), (4, 0), textcoords="offset points", va="center"
        )
    ax.set_yticks([gpus + 1, gpus] + [gpus - 1 - r for r in range(gpus)])
    ax.set_yticklabels(["parameters", "rank slices"] + [f"rank {r}: gradients kept" for r in range(gpus)])
    ax.set_xlim(0, flat)
    ax.set_xticks([rank * part for rank in range(gpus + 1)])  # the slices' borders, numbered
    ax.set_ylim(-0.6, gpus + 2.3)
    ax.set_xlabel(
        f"position in the flat buffer (elements; {psi:,} real, padded to {flat:,} = a multiple of 2N);"
        " ticks at the slices' borders\n"
        "white lines inside a bar: borders between parameters"
    )
    ax.set_title(f"DeepSpeed stages 1/2 on {gpus} ranks: one flat buffer, cut into equal slices")
    _legend(ax, gpus, below=-0.24 - 0.4 / (gpus + 2))
    return _done(fig)


def _per_parameter(spans_of, items, gpus: int, unit: str, title: str, names: list[str]) -> Figure:
    """One bar per parameter, each drawn to its own padded length, cut among the ranks."""
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.5 * len(items)))
    for row, item in enumerate(items):
        spans = spans_of(item)
        total = sum(s.length for s in spans)
        _bar(ax, len(items) - 1 - row, spans, scale=1 / total)
        real = [sum(s.length for s in spans if s.rank == r and not s.padding) for r in range(gpus)]
        ax.text(1.01, len(items) - 1 - row, " / ".join(map(str, real)) + f" {unit}", va="center", fontsize=8)
    ax.set_yticks(range(len(items)))
    ax.set_yticklabels(list(reversed(names)))
    ax.set_xlim(0, 1)
    ax.set_xticks([])
    ax.set_xlabel(
        f"each bar: one parameter's padded length, every bar drawn to the same width (not to scale),\n"
        f"cut into {gpus} equal pieces (real {unit} per rank at the right)"
    )
    ax.set_title(title)
    _legend(ax, gpus)
    return _done(fig)


def plot_zero3_pieces(sizes: list[int], gpus: int, names: list[str] | None = None) -> Figure:
    """DeepSpeed stage 3: every parameter cut on its own into N pieces of ⌈n/N⌉ elements."""
    gpus = _check(gpus, sizes)
    names = [
        f"{name} ({n})" for name, n in zip(names or [f"p{i}" for i in range(len(sizes))], sizes, strict=True)
    ]
    title = f"DeepSpeed stage 3 on {gpus} ranks: each parameter in {gpus} pieces of ⌈n/{gpus}⌉ elements"
    return _per_parameter(lambda n: zero3_pieces(n, gpus), sizes, gpus, "elements", title, names)


def plot_fsdp2_chunks(shapes: list[tuple[int, ...]], gpus: int, names: list[str] | None = None) -> Figure:
    """FSDP2: every parameter cut by rows into chunks of ⌈rows/N⌉ rows; short chunks padded."""
    gpus = _check(gpus, [prod(s) for s in shapes])
    labels = names or [f"p{i}" for i in range(len(shapes))]
    names = [f"{name} {' × '.join(map(str, s))}" for name, s in zip(labels, shapes, strict=True)]
    title = f"FSDP2 on {gpus} ranks: each parameter cut by rows into chunks of ⌈rows/{gpus}⌉ rows"
    return _per_parameter(lambda s: fsdp2_chunks(s[0], gpus), shapes, gpus, "rows", title, names)
