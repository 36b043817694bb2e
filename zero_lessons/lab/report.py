"""The lab's measured-versus-predicted table, as text, HTML and plain data. No torch."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from html import escape

from .. import memory
from . import modes
from .model import MODEL
from .results import FIELDS, Results, Row

HEAD = (
    "framework",
    "N",
    "weights B",
    "gradients B",
    "optimizer B",
    "Adam steps B",
    "other B",
    "paper formula B",
    "sent (paper count)",
    "as predicted",
)


def paper_total(row: Row) -> str:
    """The paper's per-GPU bytes (even split, no padding) for the mode's nearest stage and its recipe:
    fp32 Adam for the PyTorch modes, bf16 mixed precision (2 + 2 + 12) for DeepSpeed."""
    mode = modes.get(row.mode)
    return f"{float(memory.per_gpu(MODEL.param_count, row.gpus, mode.stage, mode.recipe).total):g}"


def sent(row: Row) -> str:
    """Elements sent in the step, by the paper's count (all-reduce counted twice), as a multiple of Ψ."""
    elements = row.measured.traffic.paper_elements
    return f"{elements} = {elements / MODEL.param_count:.3f}Ψ"


def per_rank(values: list) -> str:
    """One value when every rank agrees, else each rank's, in rank order: "7200 / 3120 / 1200 / 520"."""
    return str(values[0]) if len(set(values)) == 1 else " / ".join(map(str, values))


def cells(rows: Iterable[Row]) -> list[list[str]]:
    """The table as strings, one line per framework and world size, ranks side by side where they differ."""
    groups: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.mode, row.gpus), []).append(row)
    return [
        [
            modes.get(mode).name,
            str(gpus),
            *(per_rank([getattr(r.measured.held, f) for r in ranks]) for f in FIELDS),
            paper_total(ranks[0]),
            per_rank([sent(r) for r in ranks]),
            "yes" if all(r.matches for r in ranks) else "NO",
        ]
        for (mode, gpus), ranks in groups.items()
    ]


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


def to_html(rows: Iterable[Row]) -> str:
    """An HTML table for the notebook."""
    head = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in line) + "</tr>" for line in cells(rows))
    return f"<div style='overflow-x:auto'><table class='zero-lab'><tr>{head}</tr>{body}</table></div>"


def to_dict(rows: Iterable[Row]) -> list[dict]:
    """Plain data for JSON: every row, measured and predicted, with the mode's name and whether they match."""
    return [{"framework": modes.get(r.mode).name, **asdict(r), "matches": r.matches} for r in rows]


@dataclass(frozen=True, repr=False)
class Report:
    """A lab run's results, shown as a table in a notebook."""

    results: Results  #: one row per framework, world size and rank

    @classmethod
    def of(cls, results: Results, keys: Iterable[str]) -> Report:
        """The report for just these modes (e.g. `lab.DEEPSPEED_NAMES`), in the lab's order."""
        return cls(results.of(keys))

    def __repr__(self) -> str:
        return to_text(self.results)

    def _repr_html_(self) -> str:
        return to_html(self.results)
