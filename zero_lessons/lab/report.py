"""The lab's measured-versus-predicted table, as text, HTML and plain data. No torch."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from html import escape

from .. import communication, memory, tables
from ..planning import ds_scale, ds_traffic
from . import modes, predict_deepspeed
from .model import MODEL
from .results import FIELDS, Results, Row

HEAD = (
    "setting",
    "N",
    "weights B",
    "gradients B",
    "optimizer B",
    "Adam steps B",
    "other B",
    "paper formula B",
    "sent (all-reduce counted twice)",
    "matches the package's prediction",
)


def paper_total(row: Row) -> str:
    """The paper's per-GPU bytes (even split, no padding) for the mode's nearest stage and its recipe:
    fp32 Adam for the PyTorch modes, bf16 mixed precision (2 + 2 + 12) for DeepSpeed."""
    mode = modes.get(row.mode)
    return f"{float(memory.per_gpu(MODEL.param_count, row.gpus, mode.stage, mode.recipe).total):,g}"


def sent(row: Row) -> str:
    """Elements sent in the step, by the paper's count (all-reduce counted twice), as a multiple of Ψ."""
    elements = row.measured.traffic.paper_elements
    return f"{elements:,} = {elements / MODEL.param_count:.3f}Ψ"


def _span(values: list[int]) -> str:
    """One number when all agree, else "least–most"."""
    return f"{min(values):,}" if len(set(values)) == 1 else f"{min(values):,}–{max(values):,}"


def held_range(rows: list[Row]) -> str:
    """Bytes of model state (weights, gradients, optimizer) one rank holds: one number, or "least–most"."""
    return _span([r.measured.held.states for r in rows])


def held_cell(rows: list[Row]) -> str:
    """`held_range`, and beside it, for DeepSpeed's stage 1, the bytes as its gradient reduction started
    (every gradient still whole: its peak on more than one rank)."""
    before = [r.measured.before_reduction for r in rows]
    if any(b is None for b in before):
        return held_range(rows)
    return f"{held_range(rows)} (before its reduction: {_span([b.states for b in before])})"


def per_rank(values: list) -> str:
    """One value when every rank agrees, else each rank's, in rank order: "7,200 / 3,120 / 1,200 / 520"."""
    shown = [f"{v:,}" if isinstance(v, int) else str(v) for v in values]
    return shown[0] if len(set(shown)) == 1 else " / ".join(shown)


def cells(rows: Iterable[Row]) -> list[list[str]]:
    """The table as strings, one line per framework and world size, ranks side by side where they differ."""
    return [
        [
            modes.get(mode).name,
            str(gpus),
            *(per_rank([getattr(r.measured.held, f) for r in ranks]) for f in FIELDS),
            paper_total(ranks[0]),
            per_rank([sent(r) for r in ranks]),
            "yes" if all(r.matches for r in ranks) else "NO",
        ]
        for (mode, gpus), ranks in _groups(rows).items()
    ]


BRIEF_HEAD = (
    "setting",
    "N",
    "paper: B per rank",
    "measured: B per rank",
    "paper: sent (all-reduce counted twice)",
    "measured: sent (all-reduce counted twice)",
    "matches the package's prediction (not the paper)",
)


def _groups(rows: Iterable[Row]) -> dict[tuple[str, int], list[Row]]:
    """Rows by (mode, world size), in order."""
    groups: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.mode, row.gpus), []).append(row)
    return groups


NO_WIRE = "0: no wire"  #: what a one-rank row sends, shown when only traffic between ranks counts


def brief_cells(rows: Iterable[Row], wire: bool = False) -> list[list[str]]:
    """The short table: per setting and N, model-state bytes and elements sent, paper beside measured.
    With `wire`, a one-rank row sends 0 in both columns: nothing crosses a wire, whatever is called."""
    out = []
    for (mode, gpus), ranks in _groups(rows).items():
        setting = modes.get(mode)
        paper_sent = communication.multiple_of_psi(communication.collectives(setting.stage))
        measured = ranks[0].measured.traffic.paper_elements / MODEL.param_count
        alone = wire and communication.ring_factor(gpus) == 0  # (N − 1)/N: one rank sends nothing
        sent = [NO_WIRE, NO_WIRE] if alone else [f"{paper_sent}Ψ", f"{measured:.2f}Ψ"]
        out.append(
            [
                setting.name,
                str(gpus),
                f"{float(memory.per_gpu(MODEL.param_count, gpus, setting.stage, setting.recipe).total):,g}",
                held_cell(ranks),
                *sent,
                "yes" if all(r.matches for r in ranks) else "NO",
            ]
        )
    return out


def to_text(rows: Iterable[Row]) -> str:
    """Aligned plain text."""
    grid = [list(HEAD), *cells(rows)]  # one line per framework and N
    widths = [max(len(line[i]) for line in grid) for i in range(len(HEAD))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in grid
    )


def to_html(rows: Iterable[Row], head: tuple[str, ...] = HEAD, grid=cells) -> str:
    """An HTML table for the notebook: every rank's detail, or with `brief_cells` the short one."""
    rows = list(rows)
    top = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in line) + "</tr>" for line in grid(rows))
    return f"<div style='overflow-x:auto'><table class='zero-lab'><tr>{top}</tr>{body}</table></div>"


def to_dict(rows: Iterable[Row]) -> list[dict]:
    """Plain data for JSON: every row, measured and predicted, with the mode's name and whether they match."""
    return [{"framework": modes.get(r.mode).name, **asdict(r), "matches": r.matches} for r in rows]


@dataclass(frozen=True, repr=False)
class Report:
    """A lab run's results, shown as a table in a notebook."""

    results: Results  #: one row per framework, world size and rank
    folded: bool = False  #: shown folded away under "Every rank's numbers", to open on demand

    @classmethod
    def of(cls, results: Results, keys: Iterable[str], folded: bool = False) -> Report:
        """The report for just these modes (e.g. `lab.DEEPSPEED_NAMES`), in the lab's order."""
        return cls(results.of(keys), folded)

    def __repr__(self) -> str:
        return to_text(self.results)

    def _repr_html_(self) -> str:
        table = to_html(self.results)
        if not self.folded:
            return table
        summary = "<summary>Every rank's numbers, field by field (click to open)</summary>"
        return f"<details>{summary}{table}</details>"


@dataclass(frozen=True, repr=False)
class Brief:
    """The short table a beginner reads first: per setting and N, bytes per rank and traffic, paper beside
    measured; ranks that differ show as a range."""

    results: Results  #: one row per framework, world size and rank
    wire: bool = False  #: count only what crosses a wire, so one rank sends 0 (else the calls, as run)

    @classmethod
    def of(cls, results: Results, keys: Iterable[str], wire: bool = False) -> Brief:
        """The short table for just these modes, in the lab's order."""
        return cls(results.of(keys), wire)

    def grid(self) -> list[list[str]]:
        """The short table's cells, one line per setting and N."""
        return brief_cells(self.results, self.wire)

    def __repr__(self) -> str:
        grid = [list(BRIEF_HEAD), *self.grid()]
        widths = [max(len(line[i]) for line in grid) for i in range(len(BRIEF_HEAD))]
        return "\n".join(
            "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in grid
        )

    def _repr_html_(self) -> str:
        return to_html(self.results, BRIEF_HEAD, lambda _: self.grid())


def scale_check(results: Results, gpus: tuple[int, ...] = (2, 4)) -> dict[str, str]:
    """Per stage and N, `ds_scale.predict` on the lab's model with its mode's settings (`modes.ds_knobs`)
    beside the bf16 messages (gradients, weights; not the one-element norm and flag) the lab's ranks sent:
    "k messages, same" if they agree."""
    out = {}
    for n in gpus:
        for stage in range(4):
            mode = f"ds_zero{stage}"
            predicted = ds_scale.predict(MODEL.layers, n, modes.ds_knobs(mode))[stage]
            found = results.get(mode, n).measured.traffic.messages
            measured = sorted((m.op, m.elements) for m in found if m.dtype == "bfloat16")
            same = "same" if sorted(predicted.messages) == measured else "DIFFERENT"
            plural = "" if len(measured) == 1 else "s"
            out[f"ZeRO-{stage}, N = {n}"] = f"{len(measured)} message{plural}, {same}"
    return out


TRACE_HEAD = ("use", "pass", "tensor", "gathered or reused", "why")


def _after(visits, step: int) -> str:
    """Where a prefetch at `step` happened, in layer uses: "before use 1" or "after use k"."""
    done = sum(1 for v in visits[: step + 1] if v.used)
    return "before use 1" if done == 0 else f"after use {done}"


def _why(visits, sizes, reuse: int, v, index: int) -> tuple[str, str]:
    """Whether tensor `index` was gathered or reused for its use in visit `v`, and why."""
    before = [w for w in visits[: v.step] if index in w.used]
    last = before[-1].step if before else -1
    since = [w for w in visits[last + 1 : v.step] if index in w.prefetched]
    away = sum(sizes[i] for w in visits[last + 1 : v.step] for i in w.used)
    use = _after(visits, last)
    if index in v.on_demand:
        how = "gathered as the layer ran"
    elif since:
        how = f"prefetched {_after(visits, since[-1].step)} (room {since[-1].room:,})"
    elif index in before[-1].passed:
        walked = next(w for w in visits if (index, v.step) in w.looked)
        return "reused", f"kept {use}: the prefetcher walked past this use {_after(visits, walked.step)}"
    else:
        return "reused", f"kept {use}: next use {away:,} elements away < distance {reuse:,}"
    if not before:
        return "gathered", how
    return "gathered", f"dropped {use} (next use {away:,} elements away ≥ distance {reuse:,}); {how}"


def stage3_knobs(key: str) -> tuple[int, int, int]:
    """A stage 3 mode's prefetch bucket, live-parameter limit and max reuse distance, defaults filled in."""
    mode = modes.get(key)
    if mode.stage != 3:
        raise ValueError(f"key must name a stage 3 mode, got {key!r} (stage {int(mode.stage)})")
    names = ("stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance")
    prefetch, live, reuse = (predict_deepspeed.setting(mode, name) for name in names)
    return prefetch, live, reuse


def trace_cells(key: str, names: list[str], model=MODEL) -> list[list[str]]:
    """A stage 3 mode's steady-state step, one line per tensor and layer use: gathered or reused, and why."""
    knobs = stage3_knobs(key)
    reuse = knobs[2]
    visits = ds_traffic.stage3_walk(model.layers, *knobs)
    uses = [v for v in visits if v.used]
    return [
        [
            str(n),
            "forward" if n <= len(model.layers) else "backward",
            names[i],
            *_why(visits, model.sizes, reuse, v, i),
        ]
        for n, v in enumerate(uses, start=1)
        for i in v.used
    ]


@dataclass(frozen=True, repr=False)
class GatherTrace:
    """Stage 3's gathers in one steady-state step, use by use, by the rules the lab's ranks match."""

    key: str  #: a stage 3 mode, e.g. "ds_zero3_reuse0"
    names: tuple[str, ...]  #: the tensors' names, in forward order ("W0", "b0", ...)

    def grid(self) -> list[list[str]]:
        """Header and one line per tensor and layer use."""
        return [list(TRACE_HEAD), *trace_cells(self.key, list(self.names))]

    def _repr_markdown_(self) -> str:
        grid = self.grid()
        return tables.markdown(grid, ["---"] * len(grid[0]))

    def __repr__(self) -> str:
        return "\n".join("  ".join(line) for line in self.grid())
