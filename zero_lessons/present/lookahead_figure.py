"""Stage 3's turn from the forward to the backward pass, matrix by matrix (`planning.ds_lookahead`): one row
per weight matrix with its two uses and the stretches it is held gathered, coloured by why it is held as the
loss runs; under each bar, how far the reuse horizon and the prefetcher's walk reached when its forward
use ended. Above the rows, the elements gathered against `max_live_parameters`."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from .. import checks
from ..planning import ds_traffic
from ..planning.ds_lookahead import WHY, Lookahead
from .axis_cut import mark_cut

#: A held stretch's colour, by why the matrix is gathered as the loss runs: teal, red, mauve and grey, hues
#: the step figures' kinds (`figures.KIND_COLOURS`) do not use, as the lessons draw both on one page.
WHY_COLOURS = dict(zip(WHY, ("#009e73", "#d62728", "#cc79a7", "#c7c7c7"), strict=True))
#: The all-gather marker: black here, as red marks the walk.
GATHER = "black"
#: What the legend says for each reason.
WHY_NAMES = {
    "reuse distance": "kept: its reuse distance is within stage3_max_reuse_distance",
    "walk": "kept: the prefetcher's walk had already passed its backward use",
    "fetched back": "freed after its forward use, then prefetched back before the loss",
    "not held": "freed after its forward use, gathered again during backward",
}
MARK_COLOUR = "#fbe9a6"  #: the column `mark` names, shaded (a pale yellow, behind every bar)
#: The rule the rows show, as the lower panel's title.
RULE = (
    "After its forward use (●) a tensor stays gathered if its backward use (○) lies within the teal arrow"
    " (stage3_max_reuse_distance's reach)\nor the red one (how far the prefetcher's walk had gone); otherwise"
    " it is freed, and gathered again for backward"
)
#: The x axis's label: the uses of the drawn tensors, or every place of the step.
PLACES = {
    False: "the step's uses of these tensors, in order: forward, the loss (dotted), backward (shaded)",
    True: "the step's modules in order: forward, the loss (dotted), backward (shaded)",
}
UNNAMED = "; · a step without weights"  #: added to the x label where a column is marked "·"
LEGEND_INCHES = 1.0  #: the height the legend takes under the rows
TAIL = 0.05  #: how far, in columns, a held stretch is drawn past its release: just past the use's marker
GAP = 0.8  #: the least gap drawn, in columns, between a release and the all-gather that follows it
#: The reuse-horizon and walk lines, each in the colour of the reason it gives.
HORIZON, REACH = WHY_COLOURS["reuse distance"], WHY_COLOURS["walk"]


def _columns(look: Lookahead, every_place: bool) -> list[int]:
    """The places of `trace` drawn: every use of the chosen matrices, and the loss, in step order; with
    `every_place`, every place from the step's start to the last of those uses."""
    uses = {p for m in look.matrices for p in (m.forward, m.backward)}
    return list(range(max(uses) + 1)) if every_place else sorted(uses | {look.loss})


def _x(columns: list[int], place: int) -> float:
    """A place's x: its column, a fraction of the way to the next where it falls between two, or half a column
    beyond the drawn ones where it falls outside them."""
    if place < columns[0]:
        return -0.5
    if place > columns[-1]:
        return len(columns) - 0.5
    i = max(k for k, c in enumerate(columns) if c <= place)
    return i if columns[i] == place else i + (place - columns[i]) / (columns[i + 1] - columns[i])


def _spans(matrix, columns: list[int]) -> list[tuple[float, float]]:
    """Each held stretch's left and right x: from its all-gather to just past its release. Where a stretch
    starts again just after a release (a matrix fetched straight back), it is drawn starting `GAP` after the
    release, so that the gap shows."""
    spans: list[tuple[float, float]] = []
    for gathered, released in matrix.held:
        left, right = _x(columns, gathered), _x(columns, released) + TAIL
        if spans and left < spans[-1][1] + GAP:
            left = spans[-1][1] + GAP
        spans.append((left, right))
    return spans


def _row(ax, y: float, matrix, columns: list[int]) -> None:
    """One matrix: its held stretches, its two uses, and the horizon and reach at its forward use."""
    for (gathered, _), (left, right) in zip(matrix.held, _spans(matrix, columns), strict=True):
        ax.barh(y, right - left, left=left, height=0.38, color=WHY_COLOURS[matrix.why], lw=0)
        if gathered >= columns[0]:  # an all-gather drawn: where the stretch starts
            ax.plot(left, y + 0.26, "v", color=GATHER, markersize=5)
    start = _x(columns, matrix.forward)
    for colour, end, dy in ((HORIZON, matrix.horizon, 0.27), (REACH, matrix.reach, -0.27)):
        if end > matrix.forward:
            ax.annotate(
                "", (_x(columns, end), y + dy), (start, y + dy),
                arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 1.1, "shrinkA": 0, "shrinkB": 0},
            )  # fmt: skip
    ax.plot(start, y, "o", color="black", markersize=5)
    ax.plot(_x(columns, matrix.backward), y, "o", mfc="white", mec="black", markersize=5)


def _dips(ax, look: Lookahead, places, edges: list[float], at: list[float], scale: float) -> None:
    """Each fall in the gathered count before the loss, labelled with the count it falls to, under its plateau
    or the fall's left half."""
    for k, p in enumerate(places):
        if 0 < k and p < look.loss and look.starts[p] < look.totals[p - 1]:
            dip = look.starts[p] / scale
            plateau = look.totals[p] == look.starts[p]  # a wide fall: labelled inside its notch
            x = edges[k] if plateau else (edges[k] + at[k]) / 2
            ax.annotate(
                f"{dip:,.0f}",
                (x, dip),
                (2, 2) if plateau else (0, -3),
                textcoords="offset points",
                ha="left" if plateau else "center",
                va="bottom" if plateau else "top",
                fontsize=8,
                bbox={"fc": "white", "ec": "none", "pad": 0.5, "alpha": 0.85},  # readable on the cap's line
            )


def _totals(ax, look: Lookahead, columns: list[int], label_dips: bool = False) -> None:
    """The weight elements gathered (every module; in millions where the cap is 10⁷ or more) while each drawn
    place runs, the live cap, and the count as the loss runs; with `label_dips`, each fall before the loss
    labelled with the count it falls to."""
    scale, unit = (1e6, " M") if look.cap >= 10**7 else (1, "")
    counts = [look.totals[c] / scale for c in columns]
    places = range(columns[0], columns[-1] + 1)  # every place, those between columns too, at its fraction
    at = [_x(columns, p) for p in places]
    edges = [at[0] - 0.5, *((a + b) / 2 for a, b in zip(at, at[1:], strict=False)), at[-1] + 0.5]
    xs = [x for k in range(len(at)) for x in (edges[k], at[k], at[k], edges[k + 1])]
    ys = [y for p in places for y in (look.starts[p] / scale,) * 2 + (look.totals[p] / scale,) * 2]
    ax.plot(
        xs,
        ys,
        color="black",
        lw=1.4,
        label="weights gathered (all), at the columns below: as a module starts (after any frees),"
        " then after its prefetch",
    )
    for k in range(len(columns) + 1):  # each drawn column's edges, faint, so each half can be placed
        ax.axvline(k - 0.5, color="0.88", lw=0.6, zorder=0)
    cap = f"{look.cap / scale:,.0f}{unit}"  # the line labelled with its value
    ax.axhline(look.cap / scale, color="0.35", ls="--", lw=1, label=f"max_live_parameters: {cap}")
    if label_dips:
        _dips(ax, look, places, edges, at, scale)
    loss = columns.index(look.loss)
    text = f"{look.totals[look.loss] / scale:,.0f}{unit} as the loss runs"
    floor = _floor(min(ys), look.cap / scale)
    top = max(ys + [look.cap / scale])
    where = (loss + 0.6, floor + 0.35 * (counts[loss] - floor))
    ax.annotate(text, (loss, counts[loss]), where, fontsize=8, arrowprops={"arrowstyle": "->", "lw": 0.8})
    ax.set_ylabel(f"gathered\n({unit.strip() or 'elements'}{' elements' if unit else ''})", fontsize=9)
    ax.set_ylim(floor, top + 0.25 * (top - floor))
    if floor:  # a cut axis: marked on it, and said in words
        mark_cut(ax, f"y axis cut: it starts at {floor:,.0f}{unit}")
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1), fontsize=8, ncol=2, frameon=False)


def _floor(lowest: float, cap: float) -> float:
    """Where the strip's y axis starts: 0, or where every count stays above half the cap, a round number
    below the lowest, so that the moves near the cap show."""
    if lowest <= cap / 2:
        return 0.0
    step = 10 ** (len(str(int(cap))) - 2)  # cap 1,000 -> 100
    return (lowest - (cap - lowest) - step) // step * step


def _legend(fig, shown: set[str]) -> None:
    """The reasons drawn, the uses and the two lines, under the rows."""
    handles = [plt.Rectangle((0, 0), 1, 1, color=WHY_COLOURS[w], lw=0) for w in WHY if w in shown]
    names = [WHY_NAMES[w] for w in WHY if w in shown]
    handles += [
        plt.Line2D([], [], marker="o", color="black", ls=""),
        plt.Line2D([], [], marker="o", mfc="white", mec="black", ls=""),
        plt.Line2D([], [], marker="v", color=GATHER, ls=""),
        plt.Line2D([], [], color=HORIZON, lw=1.1),
        plt.Line2D([], [], color=REACH, lw=1.1),
    ]
    names += [
        "its forward use",
        "its backward use",
        "all-gathered here (a bar's start)",
        "how far stage3_max_reuse_distance reaches from its forward use",
        "how far the prefetcher's walk had gone at its forward use (before the tensor is freed)",
    ]
    fig.legend(handles, names, loc="lower center", ncol=2, fontsize=8, frameon=False)


def _mark(top, ax, labels: list[str], mark: str) -> None:
    """The first column labelled `mark` shaded on both panels and named on the strip: "<mark> here"; none
    when `mark` is empty."""
    if not mark:
        return
    x = labels.index(checks.choice("mark", mark, list(dict.fromkeys(labels))))
    for axis in (top, ax):
        axis.axvspan(x - 0.45, x + 0.45, color=MARK_COLOUR, zorder=0)
    top.text(x, 0.04, f"{mark} here", transform=top.get_xaxis_transform(), ha="center", fontsize=8)


def _labels(look: Lookahead, columns: list[int], between: Sequence[str]) -> tuple[list[str], list[str]]:
    """Each row's label (its module's name, with "weight" or "bias" where the module has both) and each
    column's: the module used there, the loss, the step's start, a step named in `between` (those after
    each module but the last, in forward order), or "·" for another step without weights; names after the
    loss start "bwd "."""
    rows, place = [], {0: "start", look.loss: "the loss"}
    count = look.loss // 2  # modules with weights: `trace` puts the loss after their 2·count places
    for k, name in enumerate(between[: count - 1]):
        place |= {ds_traffic.forward_entry(k) + 1: name, ds_traffic.backward_entry(count, k) - 1: name}
    for m in look.matrices:
        both = [n for n in look.matrices if n.module == m.module]
        part = f" {('weight', 'bias')[both.index(m)]}" if len(both) == 2 else ""
        rows.append(look.name(m.module) + part)
        place |= {m.forward: look.name(m.module), m.backward: look.name(m.module)}
    return rows, [("bwd " if c > look.loss and c in place else "") + place.get(c, "·") for c in columns]


def plot_lookahead(
    look: Lookahead,
    every_place: bool = False,
    between: Sequence[str] = (),
    label_dips: bool = False,
    mark: str = "",
) -> Figure:
    """`look` drawn, each module named by `look.name`: a column per use of its matrices and the loss, or with
    `every_place` (for a small model) per place of the step from its start, steps without weights too, those
    between modules named by `between` (e.g. "relu 1"; "·" where it names none). With `label_dips`, the strip
    labels each fall in the gathered count before the loss with the count it falls to. `mark`, a column's
    label (e.g. "relu 3"), shades its first such column on both panels, e.g. where a peak falls."""
    checks.instance(
        "look", look, Lookahead, "a ds_lookahead.Lookahead, e.g. from run.stage3_plan.lookahead()"
    )
    columns = _columns(look, checks.flag("every_place", every_place))
    row_names, labels = _labels(look, columns, list(between))
    rows = len(row_names)
    height = 2.6 + 0.3 * rows + LEGEND_INCHES
    fig, (top, ax) = plt.subplots(
        2, 1, figsize=(11, height), sharex=True, gridspec_kw={"height_ratios": [1, rows / 6]}
    )
    _totals(top, look, columns, checks.flag("label_dips", label_dips))
    for k, matrix in enumerate(look.matrices):
        _row(ax, rows - 1 - k, matrix, columns)
    middle = columns.index(look.loss)
    for axis in (top, ax):
        axis.axvspan(middle + 0.5, len(columns) - 0.5, color="0.94", zorder=0)
        axis.axvline(middle, color="black", lw=0.8, ls=":")
    ax.set_yticks(range(rows), list(reversed(row_names)), fontsize=8)
    ax.set_ylim(-0.7, rows - 0.3)
    ax.set_xlim(-0.6, len(columns) - 0.4)
    ax.set_xticks(range(len(columns)), labels, rotation=90, fontsize=8)
    ax.set_xlabel(PLACES[every_place] + (UNNAMED if "·" in labels else ""))
    ax.set_title(RULE, fontsize=9, loc="left")
    _mark(top, ax, labels, mark)
    _legend(fig, {m.why for m in look.matrices})
    fig.tight_layout(rect=(0, LEGEND_INCHES / height, 1, 1))
    plt.close(fig)
    return fig
