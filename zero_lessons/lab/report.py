"""The lab's measured-versus-predicted table, as text, HTML and plain data. No torch."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from .. import memory
from ..recipes import FP32_ADAM
from . import FIELDS, MODE_NAMES, Row, ds_predict, predict

HEAD = ("framework", "N", "weights B", "gradients B", "optimizer B", "Adam steps B", "other B", "paper formula B",
        "sent (paper count)", "as predicted")


def paper_total(row: Row) -> str:
    """The paper's per-GPU bytes (even split, no padding) for the mode's nearest stage and its recipe:
    fp32 Adam for the PyTorch modes, bf16 mixed precision (2 + 2 + 12) for DeepSpeed."""
    if row.mode in ds_predict.ZERO_CONFIG:
        stage, recipe = ds_predict.paper_stage(row.mode), ds_predict.RECIPE
    else:
        stage, recipe = predict.paper_stage(row.mode), FP32_ADAM
    return f"{float(memory.per_gpu(predict.param_count(), row.gpus, stage, recipe).total):g}"


def sent(row: Row) -> str:
    """Elements sent in the step, by the paper's count (all-reduce counted twice), as a multiple of Ψ."""
    psi = predict.param_count()
    elements = predict.paper_elements(row.measured["traffic"])
    return f"{elements} = {elements / psi:.3f}Ψ"


def per_rank(values: list) -> str:
    """One value when every rank agrees, else each rank's, in rank order: "7200 / 3120 / 1200 / 520"."""
    return str(values[0]) if len(set(values)) == 1 else " / ".join(map(str, values))


def cells(rows: list[Row]) -> list[list[str]]:
    """The table as strings, one line per framework and world size, ranks side by side where they differ."""
    groups: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.mode, row.gpus), []).append(row)
    return [[MODE_NAMES[mode], str(gpus), *(per_rank([r.measured[f] for r in ranks]) for f in FIELDS),
             paper_total(ranks[0]), per_rank([sent(r) for r in ranks]),
             "yes" if all(r.matches for r in ranks) else "NO"] for (mode, gpus), ranks in groups.items()]


def to_text(rows: list[Row]) -> str:
    """Aligned plain text."""
    grid = [list(HEAD), *cells(rows)]  # one line per framework and N
    widths = [max(len(line[i]) for line in grid) for i in range(len(HEAD))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
                     .rstrip() for line in grid)


def to_html(rows: list[Row]) -> str:
    """An HTML table for the notebook."""
    head = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in line) + "</tr>" for line in cells(rows))
    return f"<div style='overflow-x:auto'><table class='zero-lab'><tr>{head}</tr>{body}</table></div>"


def to_dict(rows: list[Row]) -> list[dict]:
    """Plain data for JSON."""
    return [{"framework": MODE_NAMES[r.mode], "mode": r.mode, "gpus": r.gpus, "rank": r.rank,
             "measured": r.measured, "predicted": r.predicted, "matches": r.matches} for r in rows]


@dataclass(frozen=True, repr=False)
class Report:
    """A lab run's rows, shown as a table in a notebook."""

    rows: tuple[Row, ...]  #: one per framework, world size and rank

    @classmethod
    def of(cls, rows, modes) -> "Report":
        """The report for just these modes (e.g. `lab.DEEPSPEED_NAMES`), in the lab's order."""
        return cls(tuple(r for r in rows if r.mode in modes))

    def __repr__(self) -> str:
        return to_text(list(self.rows))

    def _repr_html_(self) -> str:
        return to_html(list(self.rows))
