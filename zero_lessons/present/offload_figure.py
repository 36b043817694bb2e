"""Where each offload keeps the training state, and what crosses each link per step, by DeepSpeed's code:
one row per choice, a box per place (GPU, host, NVMe drive), bytes per shard element in each.

A shard element is one of the Ψ/N parameters a GPU owns. The GPU's whole 16-bit weights at ZeRO-2 are N times
its shard: 2 B per parameter, 2N B per shard element. The bytes come from `planning.offload` (DeepSpeed's host
bytes, its PCIe and NVMe traffic) and `planning.nvme_buffers` (the pinned staging buffers), not from here.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from .. import checks
from ..planning import counts, nvme_buffers, offload
from ..recipes import MIXED_ADAM
from ..stages import Stage

#: Where a box stands in its row (x of its left edge) and what it is called.
PLACES = {"GPU": 0.0, "host": 4.5, "NVMe drive": 9.6}
WIDTHS = {"GPU": 2.4, "host": 2.5, "NVMe drive": 2.5}  #: each box's width
ROW_HEIGHT, LINE = 1.9, 0.2
FILL = {"GPU": "#dceaf7", "host": "#f6e6cc", "NVMe drive": "#e3e3e3"}
#: What crosses PCIe per step, per shard element, by DeepSpeed's code (`offload.DEEPSPEED_*`): the gradient
#: shard down in fp32, the updated 16-bit weights back, and at stage 3 the 16-bit gradients' round trip first.
DOWN = f"fp32 gradients ↓ {offload.DEEPSPEED_DOWN} B"
BACK = f"16-bit weights ↑ {offload.DEEPSPEED_BACK} B"
BOUNCE = "16-bit grads ↓↑ 2 + 2 B"
UP_TWICE = "16-bit weights ↑ 2-4 B"
#: What DeepSpeed keeps on the drive with the optimizer there: the optimizer state and the fp32 gradients.
ON_DRIVE = ("fp32 master weights", "fp32 gradients", "Adam moments")


@dataclass(frozen=True)
class Placement:
    """One offload choice: what each place holds (label, bytes per shard element) and what each link carries
    per step, as labels with their bytes per shard element."""

    name: str
    held: dict[str, tuple[tuple[str, int | None], ...]]  #: place → (what, bytes per shard element or None)
    links: dict[tuple[str, str], tuple[str, ...]]  #: (from, to) → what crosses, per step
    totals: dict[tuple[str, str], str]  #: (from, to) → all that crosses per step, as drawn under the arrow


def _rows(kinds: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(kinds.items())


def placements(gpus: int = 8) -> tuple[Placement, ...]:
    """The four offloads lesson 07 compares, by DeepSpeed's code: ZeRO-2 and ZeRO-3 with the optimizer on the
    host, ZeRO-3 with the parameters there too, and ZeRO-3 with both set to an NVMe drive, where the weight
    shard stays in host memory while it is under `offload.MAX_IN_CPU` elements (as for 7.5 B on 8 GPUs)."""
    whole = 2 * checks.gpus(gpus)  # the whole 16-bit weights: 2 B per parameter, N shards' worth
    zero3 = _rows(offload.DEEPSPEED_ZERO3_HOST)
    staging = nvme_buffers.BUFFER_COUNT * nvme_buffers.FP32  # one sub-group: the whole shard by default
    shard, layers = (("16-bit weight shard", 2),), (("no shard kept", 0), ("layers: up as they run", None))
    weights = (("whole 16-bit weights", whole), (f"  (2 B × {gpus} shards: 2Ψ)", None))
    state = MIXED_ADAM.optimizer_bytes  # the optimizer state, read and written
    grads = offload.NVME_GRAD_BYTES  # the fp32 gradients, written in the backward pass and read at the step
    pcie = {stage: _total(offload.DEEPSPEED_PCIE[stage]) for stage in (Stage.ZERO2, Stage.ZERO3)}
    with_params = _total(*counts.PARAMS_PCIE)  # weights up once or twice
    to_drive = _total(int(offload.link_bytes(gpus, gpus, Stage.ZERO3, link="nvme")))  # a one-element shard
    drive = (
        f"fp32 grads written {grads} B",
        f"state read, written {state} + {state} B",
        f"fp32 grads read {grads} B",
    )
    pci, nvme = ("GPU", "host"), ("host", "NVMe drive")
    return (
        Placement("ZeRO-2, optimizer on the host",
                  {"GPU": weights, "host": _rows(offload.DEEPSPEED_ZERO2_HOST)},
                  {pci: (DOWN, BACK)}, {pci: pcie[Stage.ZERO2]}),
        Placement("ZeRO-3, optimizer on the host", {"GPU": shard, "host": zero3},
                  {pci: (BOUNCE, DOWN, BACK)}, {pci: pcie[Stage.ZERO3]}),
        Placement("ZeRO-3, optimizer and parameters on the host",
                  {"GPU": layers, "host": (*zero3, ("16-bit weights", 2))},
                  {pci: (BOUNCE, DOWN, UP_TWICE)}, {pci: with_params}),
        Placement("ZeRO-3, optimizer and parameters set to NVMe (weights kept on the host: max_in_cpu)",
                  {"GPU": layers,
                   "host": (("16-bit gradients", 2), ("16-bit weights", 2),
                            ("pinned staging buffers", staging), ("  (default sub_group_size)", None)),
                   "NVMe drive": tuple(row for row in zero3 if row[0] in ON_DRIVE)},
                  {pci: (BOUNCE, DOWN, UP_TWICE), nvme: drive},
                  {pci: with_params, nvme: to_drive}),
    )  # fmt: skip


def _total(least: int, most: int | None = None) -> str:
    """All that crosses a link per step, per shard element: a number, or a range where it depends on reuse."""
    return f"in all {least} B" if most in (None, least) else f"in all {least}-{most} B"


def _box(ax, x: float, y: float, place: str, rows: tuple[tuple[str, int | None], ...]) -> None:
    """One place: its name, then what it holds, a line each, and their sum when several have bytes."""
    width = WIDTHS[place]
    ax.add_patch(FancyBboxPatch((x, y), width, ROW_HEIGHT - 0.35, boxstyle="round,pad=0.04",
                                facecolor=FILL[place], edgecolor="#666", lw=0.8))  # fmt: skip
    ax.text(x + 0.08, y + ROW_HEIGHT - 0.42, place, fontsize=8, weight="bold", va="top")
    sized = [size for _, size in rows if size is not None]
    if len(sized) > 1:
        rows = (*rows, ("in all", sum(sized)))
    for i, (what, size) in enumerate(rows):
        line_y = y + ROW_HEIGHT - 0.66 - LINE * i
        ax.text(x + 0.08, line_y, what, fontsize=7, va="top")
        shown = "" if size is None else f"{size} B"
        ax.text(x + width - 0.08, line_y, shown, fontsize=7, va="top", ha="right")


#: Which of `placements` a figure draws: all four, the three that use host memory only, or the NVMe drive's.
WHICH = {"all": slice(None), "host": slice(0, 3), "nvme": slice(3, 4)}


def plot_placements(gpus: int = 8, which: str = "all") -> Figure:
    """`placements(gpus)` drawn, those `which` names (a key of WHICH): a row per choice, boxes for the places,
    arrows labelled with each link's bytes per shard element per step."""
    rows = placements(gpus)[WHICH[checks.choice("which", which, tuple(WHICH))]]
    drawn = {place for placement in rows for place in placement.held}  # the places any row draws
    wide = "NVMe drive" in drawn
    fig, ax = plt.subplots(figsize=(7.84 if wide else 5.6, ROW_HEIGHT * len(rows) + 0.5))
    for r, placement in enumerate(rows):
        y = (len(rows) - 1 - r) * ROW_HEIGHT
        ax.text(0, y + ROW_HEIGHT - 0.12, placement.name, fontsize=9, va="top", color="#333")
        for place, held in placement.held.items():
            _box(ax, PLACES[place], y, place, held)
        for (left, right), what in placement.links.items():
            x0, x1 = PLACES[left] + WIDTHS[left], PLACES[right]
            mid = y + (ROW_HEIGHT - 0.35) / 2
            ax.annotate("", (x1 - 0.05, mid), (x0 + 0.05, mid), arrowprops={"arrowstyle": "<->", "lw": 1.2})
            for i, label in enumerate(what):
                ax.text((x0 + x1) / 2, mid + 0.1 + 0.18 * (len(what) - 1 - i), label, fontsize=6.5,
                        ha="center", va="bottom")  # fmt: skip
            total = placement.totals[left, right]
            ax.text((x0 + x1) / 2, mid - 0.1, total, fontsize=6.5, ha="center", va="top", weight="bold")
    right = max(PLACES[place] + WIDTHS[place] for place in drawn)
    ax.set_xlim(-0.1, right + 0.1)  # as wide as the places drawn: no empty drive column
    ax.set_ylim(-0.1, ROW_HEIGHT * len(rows) - 0.05)
    ax.axis("off")
    links = "each link" if wide else "PCIe"
    title = f"Where each offload keeps the state, and what crosses {links} per step"
    unit = (
        f"By DeepSpeed's code. B: bytes per shard element, one of the Ψ/{gpus} parameters each GPU owns; "
        "↓ GPU to host, ↑ back"
    )
    lines = [title, unit] if wide else [*textwrap.wrap(title, 70), *textwrap.wrap(unit, 70)]
    fig.suptitle("\n".join(lines), fontsize=8.5, y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    plt.close(fig)
    return fig
