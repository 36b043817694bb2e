"""The article's per-stage table as data, with plain-text, Markdown and HTML renderers."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from . import checks, communication, memory, units
from .recipes import MIXED_ADAM, Recipe, get
from .stages import Stage

_AMOUNTS = ("weights", "gradients", "optimizer", "total")


@dataclass(frozen=True)
class Row:
    """One stage's line of the table."""

    stage: Stage  #: which stage
    held: memory.Breakdown  #: bytes one GPU holds
    comm_elements: Fraction  #: elements one GPU sends per step (paper's count, no ring factor)
    fits: bool | None  #: whether `held.total` fits the budget; None when no budget was given


@dataclass(frozen=True, repr=False)
class StageTable:
    """Per-GPU model state for every stage, for one model, cluster and recipe."""

    params: int  #: Ψ, the parameter count
    gpus: int  #: N_d, the data-parallel degree
    recipe: Recipe  #: bytes per parameter
    unit: str  #: display unit, "GB" or "GiB"
    rows: tuple[Row, ...]  #: one per stage, 0 to 3
    budget: Fraction | None = None  #: per-GPU memory in bytes, if one was given

    def title(self) -> str:
        """One line that says what the table shows."""
        return (f"{units.format_count(self.params)} parameters on {self.gpus} GPUs, "
                f"{self.recipe.summary()}; model state per GPU in {units.unit_name(self.unit)}")

    def cells(self) -> list[list[str]]:
        """The table as strings: a header row, then one row per stage."""
        head = ["stage", "partitions", *_AMOUNTS, "saved vs DP", "comm / step"]
        body = []
        for row in self.rows:
            amounts = row.held.in_unit(self.unit)
            baseline = self.rows[0].held.total
            saved = 1 - row.held.total / baseline if baseline else Fraction(0)
            body.append([row.stage.label, ", ".join(row.stage.partitioned) or "nothing",
                         *(units.format_number(amounts[key]) for key in _AMOUNTS),
                         f"{units.format_number(100 * saved, 1)}%",
                         f"{units.format_number(row.comm_elements / self.params)}Ψ"])
        return [head, *body]

    def to_text(self) -> str:
        """Aligned plain text, as the CLI prints it."""
        grid = self.cells()
        widths = [max(len(r[i]) for r in grid) for i in range(len(grid[0]))]
        lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                 for r in grid]
        return "\n".join([self.title(), *(line.rstrip() for line in lines)])

    def to_markdown(self) -> str:
        """A GitHub-flavoured Markdown table."""
        head, *body = self.cells()
        rule = ["---", "---"] + ["--:"] * (len(head) - 2)
        return "\n".join([f"*{self.title()}*", "", *("| " + " | ".join(r) + " |" for r in [head, rule, *body])])

    def to_html(self) -> str:
        """An HTML table; rows that fit the budget are marked with class "fits"."""
        import html  # only notebooks render HTML; the CLI never pays for this import

        head, *body = self.cells()
        out = [f"<table class='zero-table'><caption>{html.escape(self.title())}</caption>",
               "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr>"]
        for row, cells in zip(self.rows, body):
            mark = {True: " class='fits' style='background:#d9f2d9'", False: " class='no-fit'", None: ""}[row.fits]
            out.append(f"<tr{mark}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        return "\n".join(out + ["</table>"])

    _repr_html_ = to_html
    _repr_markdown_ = to_markdown
    __str__ = __repr__ = to_text

    def to_dict(self) -> dict:
        """Plain data for JSON: bytes exact (int when integral), amounts in the display unit."""
        number = units.json_number
        recipe = {"name": self.recipe.name, "weight_bytes": number(self.recipe.weight_bytes),
                  "grad_bytes": number(self.recipe.grad_bytes),
                  "optimizer_bytes": number(self.recipe.optimizer_bytes)}
        stages = [{"stage": int(r.stage), "name": r.stage.label, "partitioned": list(r.stage.partitioned),
                   "bytes": {key: number(getattr(r.held, key)) for key in _AMOUNTS},
                   "in_unit": {key: number(v) for key, v in r.held.in_unit(self.unit).items()},
                   "communication_elements": number(r.comm_elements), "fits": r.fits}
                  for r in self.rows]
        return {"params": self.params, "gpus": self.gpus, "recipe": recipe, "unit": self.unit,
                "budget_bytes": None if self.budget is None else number(self.budget), "stages": stages}


def stage_table(params: int, gpus: int, recipe: Recipe | str = MIXED_ADAM, unit: str = "GB",
                *, padded: bool = False, budget=None) -> StageTable:
    """The article's table for any model: per-GPU bytes for data parallel and ZeRO-1 to 3."""
    params, gpus, recipe = checks.params(params), checks.gpus(gpus), get(recipe)
    unit, padded = units.unit_name(unit), checks.flag("padded", padded)  # check everything before any work
    limit = None if budget is None else units.as_bytes("budget", budget)
    rows = []
    for stage in Stage:
        held = memory.per_gpu(params, gpus, stage, recipe, padded=padded)
        rows.append(Row(stage, held, communication.volume_elements(params, gpus, stage),
                        None if limit is None else held.total <= limit))
    return StageTable(params, gpus, recipe, unit, tuple(rows), limit)
