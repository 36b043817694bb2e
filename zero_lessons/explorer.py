"""The explorer's pure side: settings in, every view's content out. No widgets here.

`widgets.py` only reads controls into `Settings`, calls `compute_view`, and shows the result,
so everything a reader sees can be tested without a browser or a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from . import checks, communication, memory, svg, units
from .advice import Advice, advise
from .recipes import MIXED_ADAM, STATES, Recipe, get
from .stages import Stage
from .table import StageTable, stage_table

COLOURS = {"weights": "#4c72b0", "gradients": "#dd8452", "optimizer": "#55a868",
           "data parallel": "#4c72b0", "ZeRO-1": "#dd8452", "ZeRO-2": "#55a868", "ZeRO-3": "#c44e52",
           "seconds": "#8172b3"}
#: GPU counts the scaling view plots: 1 to 4,096 in steps of about 1.19×.
SCALING_GPUS = tuple(sorted({round(2 ** (k / 4)) for k in range(49)}))
#: GPU counts the slider stops at: powers of two and three times powers of two, 1 to 4,096.
GPU_STEPS = tuple(sorted({m * 2**k for k in range(13) for m in (1, 3) if m * 2**k <= 4096}))


@dataclass(frozen=True)
class Settings:
    """Everything the explorer's controls choose."""

    params: int = 7_500_000_000  #: Ψ
    gpus: int = 8  #: N_d
    recipe: Recipe = MIXED_ADAM  #: bytes per parameter
    budget: Fraction = field(default=Fraction(80 * units.GB))  #: memory per GPU, bytes
    unit: str = "GB"  #: "GB" or "GiB"
    dtype: str = "bf16"  #: dtype the collectives send
    bandwidth: Fraction = field(default=Fraction(100 * 10**9, 8))  #: bytes/s per GPU

    def __post_init__(self):
        object.__setattr__(self, "params", checks.params(self.params))
        object.__setattr__(self, "gpus", checks.gpus(self.gpus))
        object.__setattr__(self, "recipe", get(self.recipe))
        object.__setattr__(self, "budget", units.as_bytes("budget", self.budget))
        object.__setattr__(self, "unit", units.unit_name(self.unit))
        communication.dtype_bytes(self.dtype)
        object.__setattr__(self, "bandwidth", units.as_rate("bandwidth", self.bandwidth))


@dataclass(frozen=True)
class CommRow:
    """One stage's traffic per GPU and step, with the ring factor, and its time at the chosen bandwidth."""

    stage: Stage  #: which stage
    elements: Fraction  #: elements sent
    nbytes: Fraction  #: bytes sent, in the chosen dtype
    seconds: Fraction  #: time at the chosen bandwidth, with no overlap


@dataclass(frozen=True)
class View:
    """All the content of the explorer's views for one `Settings`."""

    settings: Settings  #: what produced it
    table: StageTable  #: per-stage breakdown with fits marked
    verdict: str  #: one sentence: the lowest stage that fits, or why nothing does
    comm: tuple[CommRow, ...]  #: one per stage
    advice: Advice  #: the article's rules applied to these settings (model state only)


def verdict(table: StageTable) -> str:
    """"lowest stage that fits: ZeRO-2 (28.1 GB of 80 GB)", or why nothing fits."""
    checks.instance("table", table, StageTable, "a StageTable with a budget")
    if table.budget is None:
        raise ValueError("table must have a budget: make it with stage_table(..., budget=...)")
    show = lambda b: f"{units.format_number(units.in_unit(b, table.unit), 1)} {table.unit}"  # noqa: E731
    fit = next((row for row in table.rows if row.fits), None)
    if fit is not None:
        return f"lowest stage that fits: {fit.stage.label} ({show(fit.held.total)} of {show(table.budget)})"
    fewest = memory.min_gpus(table.params, table.budget, Stage.ZERO3, table.recipe)
    return (f"nothing fits: even ZeRO-3 needs {show(table.rows[-1].held.total)} of {show(table.budget)} per GPU; "
            f"ZeRO-3 would fit on {fewest:,} GPUs")


def compute_view(settings: Settings) -> View:
    """Compute the table, verdict and traffic for `settings`."""
    checks.instance("settings", settings, Settings, "an explorer.Settings")
    s = settings
    table = stage_table(s.params, s.gpus, s.recipe, s.unit, budget=s.budget)
    comm = tuple(CommRow(stage, communication.volume_elements(s.params, s.gpus, stage, ring=True),
                         communication.volume_bytes(s.params, s.gpus, stage, s.dtype, ring=True),
                         communication.step_time(s.params, s.gpus, stage, s.bandwidth, s.dtype, ring=True))
                 for stage in Stage)
    return View(s, table, verdict(table), comm, advise(s.params, s.gpus, s.budget, recipe=s.recipe, unit=s.unit))


def plot_memory_bars(view: View) -> str:
    """SVG: stacked per-GPU bars for each stage, with the budget line."""
    t = _view(view).table
    series = {state: [float(units.in_unit(getattr(row.held, state), t.unit)) for row in t.rows] for state in STATES[::-1]}
    return svg.bar_chart([row.stage.label for row in t.rows], series, COLOURS,
                         title=f"model state per GPU ({t.unit})", ylabel=t.unit,
                         line=float(units.in_unit(t.budget, t.unit)), line_label="budget",
                         labels=[units.format_number(units.in_unit(row.held.total, t.unit)) for row in t.rows])


def plot_scaling(view: View) -> str:
    """SVG: per-GPU memory against GPU count, log-log, one curve per stage, budget and current N marked."""
    s = _view(view).settings
    size = units.unit_size(s.unit)
    series = {}
    for stage in Stage:  # kept + split/N per parameter: exact per stage, then floats for the 49 points drawn
        kept, split = (float(b * s.params / size) for b in memory.kept_and_split(stage, s.recipe))
        series[stage.label] = [kept + split / n for n in SCALING_GPUS]
    return svg.line_chart(list(SCALING_GPUS), series, COLOURS, title="per-GPU model state as GPUs are added",
                          xlabel="GPUs", ylabel=s.unit, line=float(units.in_unit(s.budget, s.unit)), marker=s.gpus)


def plot_comm(view: View) -> str:
    """SVG: seconds per step spent communicating, per stage, at the chosen bandwidth."""
    s = _view(view).settings
    return svg.bar_chart([row.stage.label for row in view.comm], {"seconds": [float(r.seconds) for r in view.comm]},
                         COLOURS, labels=[f"{units.format_number(r.seconds)} s" for r in view.comm],
                         title=f"communication per step at {units.format_rate(s.bandwidth)} "
                               f"({s.dtype}, ring)",
                         ylabel="seconds")


def comm_html(view: View) -> str:
    """HTML table: per-stage traffic set against per-GPU memory."""
    unit = _view(view).settings.unit
    rows = "".join(f"<tr><td>{r.stage.label}</td><td>{units.format_number(r.elements / view.settings.params)}Ψ</td>"
                   f"<td>{units.format_bytes(r.nbytes, unit)}</td><td>{units.format_number(r.seconds)} s</td>"
                   f"<td>{units.format_bytes(row.held.total, unit)}</td></tr>"
                   for r, row in zip(view.comm, view.table.rows))
    return ("<table class='zero-comm'><tr><th>stage</th><th>sent per GPU</th><th>bytes</th><th>time</th>"
            f"<th>memory per GPU</th></tr>{rows}</table>")


def _view(view: View) -> View:
    """`view`, checked: every chart and table takes a `View` from `compute_view`."""
    checks.instance("view", view, View, "an explorer.View from compute_view")
    return view


#: Cases a workshop can jump to: label -> the settings that differ from the defaults.
PRESETS: dict[str, dict] = {
    "The article: 7.5 B on 8 × 80 GB": {"params": 7_500_000_000, "gpus": 8, "budget": "80GB"},
    "GPT-2 XL (1.56 B) on 4 × 16 GB": {"params": 1_557_611_200, "gpus": 4, "budget": "16GB"},
    "Llama 2 7B on 8 × 80 GB": {"params": 6_738_415_616, "gpus": 8, "budget": "80GB"},
    "Llama 2 70B on 64 × 80 GB": {"params": 68_976_648_192, "gpus": 64, "budget": "80GB"},
    "GPT-3 (175 B) on 1,024 × 80 GB": {"params": 175_000_000_000, "gpus": 1024, "budget": "80GB"},
}
