"""The article's per-stage table as data, with text, Markdown and HTML renderers; and the `fit` table."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks, communication, memory, recipes, units
from ..inputs import Setup
from ..memory import Breakdown
from ..recipes import MIXED_ADAM, Recipe, RecipeLike
from ..stages import Stage

_AMOUNTS = ("weights", "gradients", "optimizer", "total")


@dataclass(frozen=True)
class Row:
    """One stage's line of the table."""

    stage: Stage  #: which stage
    held: Breakdown  #: bytes one GPU holds
    comm_elements: Fraction  #: elements one GPU sends per step (paper's count, no ring factor)
    fits: bool | None  #: whether `held.total` fits in the GPU's memory; None when none was given


@dataclass(frozen=True, repr=False)
class StageTable:
    """Per-GPU model state for every stage, for one model, cluster and recipe."""

    setup: Setup  #: Ψ, N_d, the recipe, and the memory per GPU if one was given
    unit: str  #: display unit, "GB" or "GiB"
    rows: tuple[Row, ...]  #: one per stage, 0 to 3

    @property
    def params(self) -> int:
        """Ψ, the parameter count."""
        return self.setup.params

    @property
    def gpus(self) -> int:
        """N_d, the data-parallel degree."""
        return self.setup.gpus

    @property
    def recipe(self) -> Recipe:
        """Bytes per parameter."""
        return self.setup.recipe

    @property
    def gpu_memory(self) -> Fraction | None:
        """Memory per GPU in bytes, or None when none was given."""
        return self.setup.gpu_memory

    def title(self) -> str:
        """One line that says what the table shows."""
        return (
            f"{units.format_count(self.params)} parameters on {self.gpus} GPUs, "
            f"{self.recipe.summary()}; model state per GPU in {units.unit_name(self.unit)}"
        )

    def cells(self) -> list[list[str]]:
        """The table as strings: a header row, then one row per stage."""
        head = ["stage", "partitions", *_AMOUNTS, "saved vs DP", "comm (paper, no ring)"]
        body = []
        for row in self.rows:
            amounts = row.held.in_unit(self.unit)
            body.append(
                [
                    row.stage.label,
                    ", ".join(row.stage.partitioned) or "nothing",
                    *(units.format_number(amounts[key]) for key in _AMOUNTS),
                    f"{units.format_number(100 * memory.saved(row.held, self.rows[0].held), 1)}%",
                    f"{units.format_number(row.comm_elements / self.params)}Ψ",
                ]
            )
        return [head, *body]

    def to_text(self) -> str:
        """Aligned plain text, as the CLI prints it."""
        return _text_table(self.title(), self.cells(), left=2)

    def to_markdown(self) -> str:
        """A GitHub-flavoured Markdown table."""
        head, *body = self.cells()
        rule = ["---", "---"] + ["--:"] * (len(head) - 2)
        return "\n".join(
            [f"*{self.title()}*", "", *("| " + " | ".join(r) + " |" for r in [head, rule, *body])]
        )

    def to_html(self) -> str:
        """A styled HTML table; rows that fit in the GPU's memory are shaded and have class "fits"."""
        from . import html  # only notebooks render HTML; the CLI never pays for this import

        head, *body = self.cells()
        out = [html.table_start("zero-table", self.title()), html.table_row(head, left=2, header=True)]
        for row, cells in zip(self.rows, body, strict=True):
            mark = {True: " class='fits' style='background:#d9f2d9'", False: " class='no-fit'", None: ""}
            out.append(html.table_row(cells, left=2, attrs=mark[row.fits]))
        return "\n".join(out + ["</table>"])

    _repr_html_ = to_html
    _repr_markdown_ = to_markdown
    __str__ = __repr__ = to_text

    def to_dict(self) -> dict:
        """Plain data for JSON: bytes exact (int when integral), amounts in the display unit."""
        number = units.json_number
        recipe = {
            "name": self.recipe.name,
            "weight_bytes": number(self.recipe.weight_bytes),
            "grad_bytes": number(self.recipe.grad_bytes),
            "optimizer_bytes": number(self.recipe.optimizer_bytes),
        }
        stages = [
            {
                "stage": int(r.stage),
                "name": r.stage.label,
                "partitioned": list(r.stage.partitioned),
                "bytes": {key: number(getattr(r.held, key)) for key in _AMOUNTS},
                "in_unit": {key: number(v) for key, v in r.held.in_unit(self.unit).items()},
                "communication_elements": number(r.comm_elements),
                "fits": r.fits,
            }
            for r in self.rows
        ]
        memory_bytes = None if self.gpu_memory is None else number(self.gpu_memory)
        return {
            "params": self.params,
            "gpus": self.gpus,
            "recipe": recipe,
            "unit": self.unit,
            "gpu_memory_bytes": memory_bytes,
            "stages": stages,
        }


def _text_table(title: str, grid: list[list[str]], left: int = 1) -> str:
    """`title`, then `grid` as aligned columns: the first `left` columns to the left, the rest right."""
    widths = [max(len(r[i]) for r in grid) for i in range(len(grid[0]))]
    lines = [
        "  ".join(
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in grid
    ]
    return "\n".join([title, *(line.rstrip() for line in lines)])


def table_of(
    setup: Setup, held: tuple[Breakdown, ...], unit: str = "GB", activations: Fraction = Fraction(0)
) -> StageTable:
    """The table for a checked `setup` and its `memory.per_stage`, with nothing recomputed; a row fits when
    its model state plus `activations` (bytes per GPU) fits the GPU."""
    checks.instance("setup", setup, Setup, "an inputs.Setup")
    activations = checks.byte_count("activations", activations)
    held, limit = memory.check_per_stage(held), setup.gpu_memory
    rows = tuple(
        Row(
            stage,
            held[stage],
            communication.elements_sent(setup, stage),
            None if limit is None else memory.fits(held[stage], limit, activations),
        )
        for stage in Stage
    )
    return StageTable(setup, unit, rows)


def stage_table(
    params: int,
    gpus: int,
    recipe: RecipeLike = MIXED_ADAM,
    unit: str = "GB",
    *,
    padded: bool = False,
    gpu_memory: units.Size | None = None,
) -> StageTable:
    """The article's table for any model: per-GPU bytes for data parallel and ZeRO-1 to 3."""
    setup = Setup(params, gpus, recipe, gpu_memory)
    unit, padded = units.unit_name(unit), checks.flag("padded", padded)  # check everything before any work
    return table_of(setup, memory.per_stage(setup, padded=padded), unit)


@dataclass(frozen=True, repr=False)
class FitTable:
    """The largest model whose model state fits, per stage, for one cluster and recipe: the CLI's `fit`."""

    gpus: int  #: N_d
    gpu_memory: Fraction  #: bytes per GPU
    recipe: Recipe  #: bytes per parameter
    largest: tuple[int | None, ...]  #: per stage, the largest Ψ that fits; None if the recipe stores nothing

    def to_text(self) -> str:
        """A heading, then one aligned line per stage."""
        head = (
            f"Largest model whose model state fits in {units.format_bytes(self.gpu_memory)} per GPU "
            f"on {self.gpus} GPUs ({self.recipe.summary()})"
        )
        lines = [
            f"  {s.label:<14} "
            + (
                "any size (recipe stores nothing)"
                if n is None
                else f"{units.format_count(n):>9}  ({n:,} parameters)"
            )
            for s, n in zip(Stage, self.largest, strict=True)
        ]
        return "\n".join([head, *lines])

    __str__ = __repr__ = to_text

    def to_dict(self) -> dict:
        """Plain data for JSON."""
        return {
            "gpu_memory_bytes": units.json_number(self.gpu_memory),
            "gpus": self.gpus,
            "recipe": self.recipe.summary(),
            "stages": [
                {"stage": int(s), "name": s.label, "max_params": n}
                for s, n in zip(Stage, self.largest, strict=True)
            ],
        }


def fit_table(gpus: int, gpu_memory: units.Size, recipe: RecipeLike = MIXED_ADAM) -> FitTable:
    """For each stage, the largest Ψ whose model state fits in `gpu_memory` on `gpus` GPUs."""
    gpus, recipe = checks.gpus(gpus), recipes.get(recipe)
    gpu_memory = units.as_bytes("gpu_memory", gpu_memory)
    largest = tuple(memory.max_params(gpus, gpu_memory, s, recipe) for s in Stage)
    return FitTable(gpus, gpu_memory, recipe, largest)
