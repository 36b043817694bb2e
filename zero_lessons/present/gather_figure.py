"""Stage 3's gathers over one steady-state step, drawn: for each setting, when each tensor is all-gathered,
how long it stays whole, and when it is released, module by module along `ds_traffic.trace`."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from .. import checks, tables
from ..planning import ds_traffic
from .lab_figures import RANK_COLOURS

GATHER = "#c44e52"  #: the colour of an all-gather marker
HELD = RANK_COLOURS[0]  #: the colour of a tensor held whole


@dataclass(frozen=True)
class Hold:
    """One stretch in which a tensor is whole on every rank: from the module whose walk (or use) gathered it
    to the module after which it was released, both places in `ds_traffic.trace`."""

    tensor: int  #: flat tensor index, in forward order
    gathered: int  #: the module at which it was all-gathered
    released: int  #: the module after which it was freed
    ahead: bool  #: gathered by the prefetcher ahead of its use, not as its module ran


def holds(modules, prefetch: int, max_live: int, reuse: int) -> list[Hold]:
    """Every tensor's held stretches in one steady-state step, by `ds_traffic.stage3_walk`'s rules."""
    walk = ds_traffic.stage3_walk(modules, prefetch, max_live, reuse)
    return sorted((Hold(*s) for s in ds_traffic.stage3_stretches(walk)), key=lambda h: (h.tensor, h.gathered))


def module_labels(modules) -> list[str]:
    """A short name for each module of `ds_traffic.trace`: the layer ("L0"), "act" between layers, the model
    start ("start") and the loss ("loss")."""
    first = {m[0]: f"L{k}" for k, m in enumerate(_layer_tensors(modules))}
    loss = ds_traffic.loss_entry(len(modules))
    return [
        first[u[0]] if u else "start" if s == 0 else "loss" if s == loss else "act"
        for s, u in enumerate(ds_traffic.trace(modules))
    ]


def _layer_tensors(modules) -> list[tuple[int, ...]]:
    """Each layer's flat tensor indices."""
    out, start = [], 0
    for m in modules:
        out.append(tuple(range(start, start + len(m))))
        start += len(m)
    return out


def _panel(ax, spans: list[Hold], names: list[str], labels: list[str]) -> None:
    """One setting: a row per tensor, a bar per held stretch, a marker per all-gather, the count at right."""
    rows = len(names)
    for h in spans:
        y = rows - 1 - h.tensor
        # gathered as its module starts (on its tick); freed after module `released` runs (half a slot on)
        ax.barh(y, h.released - h.gathered + 0.5, left=h.gathered, height=0.55, color=HELD, alpha=0.75)
        ax.plot(h.gathered, y, marker="v" if h.ahead else "o", color=GATHER, markersize=7)
    for t in range(rows):
        count = sum(1 for h in spans if h.tensor == t)
        ax.text(len(labels) - 0.3, rows - 1 - t, f"gathered {count}×", va="center", fontsize=9)
    # the loss ends the forward pass: the divider runs just after its tick, before backward's first module
    ax.axvline(len(labels) // 2 + 0.5, color="black", linewidth=0.8, linestyle="--")
    ax.grid(axis="x", color="0.85", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_yticks(range(rows))
    ax.set_yticklabels(list(reversed(names)), fontsize=9)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylim(-0.6, rows - 0.4)


def plot_gathers(modules, settings: dict[str, tuple[int, int, int]], names: list[str]) -> Figure:
    """One panel per setting (title: prefetch bucket, live limit, max reuse distance): each tensor's held
    stretches along the step's modules, forward then backward, so a tensor gathered twice shows two bars."""
    tensors = sum(len(m) for m in modules)
    if not settings or len(names) != tensors:
        raise ValueError(
            f"settings must name 1 or more settings and names {tensors} tensors, got {settings!r}, {names!r}"
        )
    labels = module_labels(modules)
    fig, _ = plt.subplots(len(settings), 1, figsize=(10, 0.8 + 1.55 * len(settings)), sharex=True)
    for ax, (title, knobs) in zip(list(fig.axes), settings.items(), strict=True):
        _panel(ax, holds(modules, *knobs), names, labels)
        ax.set_title(title, fontsize=10, loc="left")
    axes_list = list(fig.axes)
    axes_list[-1].set_xticks(range(len(labels)))
    axes_list[-1].set_xticklabels(labels)
    axes_list[-1].set_xlabel(
        "the step's modules: forward ← dashed line → backward\n"
        "on a module's tick: ▼ all-gathered ahead by the prefetcher, ● gathered for that module;"
        " bar: whole until released after a module"
    )
    fig.tight_layout()
    plt.close(fig)
    return fig


WALK_HEAD = (
    "module",
    "gathered",
    "room",
    "prefetched",
    "gathered after the prefetch",
    "farthest use the walk passed",
    "after the module runs",
)


@dataclass(frozen=True, repr=False)
class ForwardWalk:
    """Stage 3's forward pass (or whole step), module by module: the elements gathered as its walk starts, the
    prefetcher's room, what it gathers and the elements gathered then, the farthest use its walk has reached,
    and which used tensors are released or kept."""

    rows: tuple[tuple[str, ...], ...]  #: one per module, as `WALK_HEAD` names the columns

    def grid(self) -> list[list[str]]:
        """Header and one line per forward module."""
        return [list(WALK_HEAD), *map(list, self.rows)]

    def _repr_markdown_(self) -> str:
        return tables.markdown(self.grid(), ["---", "--:", "--:", "---", "--:", "---", "---"])

    def __repr__(self) -> str:
        return "\n".join("  ".join(line) for line in self.grid())


def forward_walk(modules, knobs: tuple[int, int, int], names: list[str], whole: bool = False) -> ForwardWalk:
    """`ds_traffic.stage3_walk` over the forward pass (with `whole`, the whole step), for a table: with
    `knobs` (prefetch bucket, live limit, max reuse distance), which tensors each module's walk gathers and
    how far it has looked ahead."""
    labels = module_labels(modules)
    middle = ds_traffic.loss_entry(len(modules))  # the loss; backward follows it
    reached = -1

    def listed(verb: str, indices) -> list[str]:
        return [f"{verb}{', '.join(names[i] for i in indices)}"] if indices else []

    rows = []
    for v in ds_traffic.stage3_walk(modules, *knobs)[: None if checks.flag("whole", whole) else middle]:
        reached = max([reached, *(step for _, step in v.looked)])
        kept = [i for i in v.used if i not in v.released]
        gathers = listed("", v.prefetched) + listed("on demand: ", v.on_demand)
        after = listed("releases ", v.released) + listed("keeps ", kept)
        side = "forward" if reached < middle else "backward"
        rows.append(
            (
                labels[v.step],
                f"{v.gathered:,}",
                f"{v.room:,}",
                "; ".join(gathers) or "—",
                f"{v.prefetch_done:,}",
                f"{labels[reached]} ({side})" if reached >= 0 else "—",
                "; ".join(after) or "—",
            )
        )
    return ForwardWalk(tuple(rows))
