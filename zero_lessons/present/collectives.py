"""Pictures of communication: a ring all-reduce step by step, and which collective runs where in a step.

The data comes from `communication` (`ring_steps`, `ring_holdings`, `collectives`,
`deepspeed_collectives`); this module only lays it out, with matplotlib for the lessons and as a
Markdown/HTML table that wraps inside a narrow page.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from .. import checks, communication, tables, units
from ..communication import PHASES, Collective
from ..stages import Stage

#: Most ranks the ring figure draws: each panel is an N × N grid of chunks.
MAX_DRAWN_RANKS = 8
#: One colour per collective, in the timeline.
OP_COLOURS = {"all-reduce": "#8172b3", "reduce-scatter": "#dd8452", "all-gather": "#4c72b0"}
#: What a phase is called in a figure or a table.
PHASE_NAMES = {"forward": "forward", "backward": "backward", "step": "optimizer step"}
_FINISHED, _ARRIVED = "#2e7d32", "#e6550d"


@dataclass(frozen=True)
class RingPanel:
    """One picture of the ring: what every rank holds after a step (or at the start)."""

    title: str  #: e.g. "reduce-scatter, step 1 of 3"
    counts: tuple[
        tuple[int, ...], ...
    ]  #: counts[r][c]: how many ranks' gradients rank r has summed in chunk c
    arrived: tuple[tuple[int, int], ...]  #: (rank, chunk) cells that were received in this step


def ring_panels(gpus: int = 4) -> tuple[RingPanel, ...]:
    """The start, then one panel per step of a ring all-reduce over `gpus` ranks: 2(N−1) + 1 panels."""
    n = checks.whole("gpus", gpus, low=2, high=MAX_DRAWN_RANKS)
    steps, held = communication.ring_steps(n), communication.ring_holdings(n)
    panels = [RingPanel("start: own gradients", _counts(held[0]), ())]
    for i, step in enumerate(steps):
        number = i % (n - 1) + 1
        arrived = tuple(((r + 1) % n, c) for r, c in enumerate(step.sends))
        panels.append(RingPanel(f"{step.phase} {number} of {n - 1}", _counts(held[i + 1]), arrived))
    return tuple(panels)


def _counts(held) -> tuple[tuple[int, ...], ...]:
    """Sets of contributing ranks, as counts."""
    return tuple(tuple(len(chunk) for chunk in row) for row in held)


def plot_ring_all_reduce(gpus: int = 4, params: int | None = None) -> Figure:
    """A ring all-reduce of N chunks on N ranks, one grid per step: reduce-scatter row, all-gather row."""
    panels = ring_panels(gpus)
    n, chunk = len(panels[0].counts), "Ψ/N"
    if params is not None:
        chunk = f"Ψ/N = {units.format_number(Fraction(checks.params(params), n))} elements"
    fig, axes = plt.subplots(2, n, figsize=(7.8, 4.3), sharey=True)
    cells = [panels[0], *panels[1:n], None, *panels[n:]]  # start + reduce-scatter / a key + all-gather
    for ax, panel in zip(axes.flat, cells, strict=True):
        _draw_panel(ax, panel, n) if panel is not None else _draw_key(ax, n)
    for ax in axes[:, 1:].flat:
        ax.tick_params(labelleft=False)
    fig.suptitle(
        f"Ring all-reduce on {n} ranks: {2 * (n - 1)} steps; in each, every rank sends one chunk "
        f"({chunk}) to the next rank",
        fontsize=9.5,
    )
    fig.subplots_adjust(left=0.08, right=0.99, bottom=0.05, top=0.86, wspace=0.08, hspace=0.3)
    plt.close(fig)
    return fig


def _draw_panel(ax, panel: RingPanel, n: int) -> None:
    """One step: rows are ranks, columns chunks; each cell says how many ranks' gradients it sums."""
    for r, row in enumerate(panel.counts):
        for c, count in enumerate(row):
            done = count == n
            face = _FINISHED if done else plt.cm.Blues(0.12 + 0.5 * (count - 1) / max(n - 1, 1))
            edge, width = (_ARRIVED, 2.4) if (r, c) in panel.arrived else ("white", 1)
            ax.add_patch(plt.Rectangle((c, r), 1, 1, facecolor=face, edgecolor=edge, lw=width))
            text = "all" if done else str(count)
            ax.text(
                c + 0.5, r + 0.5, text, ha="center", va="center", fontsize=8, color="white" if done else "k"
            )
    ax.set(xlim=(0, n), ylim=(n, 0), aspect="equal")
    ax.set_xticks([c + 0.5 for c in range(n)], [f"c{c}" for c in range(n)], fontsize=7)
    ax.set_yticks([r + 0.5 for r in range(n)], [f"rank {r}" for r in range(n)], fontsize=7)
    ax.tick_params(length=0)
    ax.set_title(panel.title, fontsize=8.5)
    for side in ax.spines.values():
        side.set_visible(False)


def _draw_key(ax, n: int) -> None:
    """The key to the panels, in the free slot of the bottom row."""
    ax.axis("off")
    lines = [
        ("number: how many ranks'\ngradients the chunk sums", "k"),
        ('"all": the finished sum', _FINISHED),
        ("orange edge: the chunk\narrived in this step", _ARRIVED),
        (f"c0…c{n - 1}: the buffer\ncut into {n} chunks", "k"),
    ]
    for i, (text, colour) in enumerate(lines):
        ax.text(-0.05, 0.92 - 0.24 * i, text, fontsize=7.5, color=colour, transform=ax.transAxes, va="top")


@dataclass(frozen=True)
class TimelineRow:
    """One row of the timeline: a framework's stage and the collectives it runs in each phase."""

    label: str  #: e.g. "ZeRO-2 (paper)"
    by_phase: dict[str, tuple[Collective, ...]]  #: phase -> its collectives, in order
    multiple: int  #: elements sent per GPU per step, in units of Ψ (paper's count, one micro-batch)


def timeline_rows(deepspeed: bool = True) -> tuple[TimelineRow, ...]:
    """The paper's plan for stages 0-3, then (if `deepspeed`) DeepSpeed's defaults for stages 2 and 3 (its
    stage 1 sends stage 2's buckets, but after the backward pass)."""
    plans = [(f"{s.label} (paper)", communication.collectives(s)) for s in Stage]
    if checks.flag("deepspeed", deepspeed):
        plans += [
            ("DeepSpeed ZeRO-2 (default)", communication.deepspeed_collectives(Stage.ZERO2)),
            ("DeepSpeed ZeRO-3 (lab, steady)", communication.deepspeed_collectives(Stage.ZERO3)),
        ]
    return tuple(
        TimelineRow(
            label,
            {phase: tuple(c for c in plan if c.phase == phase) for phase in PHASES},
            communication.multiple_of_psi(plan),
        )
        for label, plan in plans
    )


def plot_collective_timeline(deepspeed: bool = True) -> Figure:
    """Which collective runs in the forward pass, the backward pass and the optimizer step, per stage."""
    rows = timeline_rows(deepspeed)
    fig, ax = plt.subplots(figsize=(7.8, 0.62 * len(rows) + 0.9))
    for y, row in enumerate(rows):
        for x, phase in enumerate(PHASES):
            _draw_phase(ax, x, y, row.by_phase[phase])
        ax.text(3.08, y + 0.5, f"{row.multiple}Ψ", va="center", fontsize=9, weight="bold")
    if deepspeed:
        ax.axhline(len(Stage), color="#555", lw=0.8, ls="--")
    ax.set(xlim=(0, 3.3), ylim=(len(rows), 0))
    ax.set_xticks([x + 0.5 for x in range(3)], [PHASE_NAMES[p] for p in PHASES], fontsize=9)
    ax.xaxis.tick_top()
    ax.set_yticks([y + 0.5 for y in range(len(rows))], [r.label for r in rows], fontsize=8.5)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_xlabel("sent per GPU per step (right): the paper's count, one micro-batch", fontsize=8)
    fig.tight_layout()
    plt.close(fig)
    return fig


def _draw_phase(ax, x: int, y: int, plan: tuple[Collective, ...]) -> None:
    """The collectives of one phase side by side in its cell, each with its op, its state and its size."""
    ax.add_patch(plt.Rectangle((x, y), 1, 1, facecolor="#f4f4f4", edgecolor="white", lw=2))
    width = 0.94 / max(len(plan), 1)
    for i, c in enumerate(plan):
        left = x + 0.03 + i * width
        pieces = _pieces(c, left, width - 0.02)
        for start, span in pieces:
            ax.add_patch(plt.Rectangle((start, y + 0.12), span, 0.76, facecolor=OP_COLOURS[c.op], lw=0))
        label = f"{c.op}\n{c.state} · {c.multiple}Ψ".replace(" · 1Ψ", " · Ψ")
        if c.when.startswith("end of") or "bucket" in c.when:
            label += "\n" + ("at the end" if c.when.startswith("end of") else "bucket by bucket")
        size = 7 if len(plan) == 1 else 6.3  # two boxes share a cell: "reduce-scatter" must fit
        middle = (pieces[0][0] + pieces[-1][0] + pieces[-1][1]) / 2
        pill = {
            "facecolor": OP_COLOURS[c.op],
            "edgecolor": "none",
            "pad": 1,
        }  # covers the gaps between slices
        ax.text(middle, y + 0.5, label, ha="center", va="center", fontsize=size, color="white", bbox=pill)


def _pieces(c: Collective, left: float, width: float) -> list[tuple[float, float]]:
    """Where a collective's box sits in its slot: bucket by bucket as four slices across the phase, and
    "end of" the phase with a blank start, so the two plans of ZeRO-1 and ZeRO-2 look different."""
    if "bucket" in c.when:
        step = width / 4
        return [(left + k * step, step - 0.02) for k in range(4)]
    if c.when.startswith("end of"):
        return [(left + width * 0.35, width * 0.65)]
    return [(left, width)]


@dataclass(frozen=True, repr=False)
class PlanTable:
    """Each stage's collectives by phase, as a table that wraps its cells instead of running off the page."""

    rows: tuple[TimelineRow, ...]  #: the rows, as the timeline figure draws them

    def cells(self) -> list[list[str]]:
        """A header row, then one row per stage: its collectives in each phase and what it sends."""
        head = ["stage", *(PHASE_NAMES[p] for p in PHASES), "sent per GPU"]
        body = [
            [row.label, *(_describe(row.by_phase[p]) for p in PHASES), f"{row.multiple}Ψ"]
            for row in self.rows
        ]
        return [head, *body]

    def _repr_markdown_(self) -> str:
        cells = self.cells()
        return tables.markdown(cells, ["---"] * (len(cells[0]) - 1) + ["--:"])

    def _repr_html_(self) -> str:
        return tables.html(self.cells(), "zero-plan")

    def __repr__(self) -> str:
        return "\n".join(" | ".join(r) for r in self.cells())


def _describe(plan: tuple[Collective, ...]) -> str:
    """The collectives of one phase in words, or a dash."""
    return "; ".join(f"{c.op} of {c.state} ({c.when})" for c in plan) or "–"


def plan_table(deepspeed: bool = False) -> PlanTable:
    """The paper's collectives per stage and phase (and DeepSpeed's defaults if `deepspeed`), as a table."""
    return PlanTable(timeline_rows(deepspeed))
