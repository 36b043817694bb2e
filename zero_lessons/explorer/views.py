"""The explorer's pure side: settings in, every view's content out. No widgets here.

`widgets.py` only reads controls into `Settings`, calls `compute_view`, and shows the result,
so everything a reader sees can be tested without a browser or a kernel. One update checks each
input once (in `Settings`) and computes each stage's memory once (`memory.per_stage`): the
table, the verdict and the advice all read those same four breakdowns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from .. import checks, communication, memory, units
from ..communication import StepTraffic
from ..inputs import Setup
from ..planning import headroom
from ..planning.advice import Advice, choose
from ..present import figures, html, svg
from ..present.table import StageTable, table_of
from ..recipes import MIXED_ADAM, Recipe
from ..stages import Stage

#: GPU counts the slider stops at: powers of two and three times powers of two, 1 to 4,096.
GPU_STEPS = tuple(sorted({m * 2**k for k in range(13) for m in (1, 3) if m * 2**k <= 4096}))

#: Shown only where the page has no kernel: the book's stylesheet turns it on (book/zero.css).
STATIC_NOTE = (
    "<div class='zero-static-note' style='display:none'><b>Static snapshot</b>: these controls are "
    "saved, not live, so changing them does nothing here. Run the lesson with <code>make lab</code> "
    "or <code>make voila</code> to use them.</div>"
)
#: What a page that cannot draw the widgets shows instead of the widget's repr (text/plain).
SUMMARY = (
    "The ZeRO explorer: live controls for model size, GPUs, recipe, memory per GPU, activations and link, "
    "with the table, charts and advice they drive. Its controls need a running Python kernel: "
    "run the notebook (make lab) or serve the dashboard (make voila)."
)


@dataclass(frozen=True)
class Settings:
    """Everything the explorer's controls choose; the model's part is checked once, into `setup`."""

    params: int = 7_500_000_000  #: Ψ
    gpus: int = 8  #: N_d
    recipe: Recipe = MIXED_ADAM  #: bytes per parameter
    gpu_memory: Fraction = field(default=Fraction(80 * units.GB))  #: memory per GPU, bytes
    unit: str = "GB"  #: "GB" or "GiB"
    dtype: str = "bf16"  #: dtype the collectives send
    bandwidth: Fraction = field(default=Fraction(100 * 10**9, 8))  #: bytes/s per GPU
    activations: Fraction = Fraction(0)  #: activation bytes per GPU, the same under every stage (0: none)
    setup: Setup = field(init=False, repr=False, compare=False)  #: params, gpus, recipe, gpu_memory: checked

    def __post_init__(self):
        if self.gpu_memory is None:
            raise TypeError("gpu_memory must be a memory size such as '80GB', got None")
        setup = Setup(self.params, self.gpus, self.recipe, self.gpu_memory)
        for name in ("params", "gpus", "recipe", "gpu_memory"):
            object.__setattr__(self, name, getattr(setup, name))
        object.__setattr__(self, "setup", setup)
        object.__setattr__(self, "unit", units.unit_name(self.unit))
        communication.dtype_bytes(self.dtype)
        object.__setattr__(self, "bandwidth", units.as_rate("bandwidth", self.bandwidth))
        object.__setattr__(self, "activations", units.as_bytes("activations", self.activations, zero=True))


@dataclass(frozen=True)
class View:
    """All the content of the explorer's views for one `Settings`."""

    settings: Settings  #: what produced it
    table: StageTable  #: per-stage breakdown with fits marked
    verdict: str  #: one sentence: the lowest stage that fits, or why nothing does
    comm: tuple[StepTraffic, ...]  #: one per stage, with the ring factor, at the chosen dtype and bandwidth
    advice: Advice  #: the article's rules applied to these settings (model state plus activations)


def round3(value: float) -> int:
    """A log-slider position as a parameter count with three significant figures."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= 10**15:
        raise ValueError(f"value must be a slider position from 1 to 10**15, got {checks.shown(value)}")
    return int(float(f"{value:.3g}"))


def nearest_step(gpus: int) -> int:
    """The slider stop closest to `gpus` on a log scale (the slider shows position, the text the value)."""
    gpus = checks.gpus(gpus)
    return min(GPU_STEPS, key=lambda step: abs(math.log(step) - math.log(gpus)))


def verdict(table: StageTable, activations: Fraction = Fraction(0)) -> str:
    """ "lowest stage that fits: ZeRO-2 (28.125 GB of 80 GB)", or why nothing fits; counting `activations`."""
    checks.instance("table", table, StageTable, "a StageTable with gpu_memory")
    if table.gpu_memory is None:
        raise ValueError("table must have gpu_memory: make it with stage_table(..., gpu_memory=...)")
    act, limit = checks.byte_count("activations", activations), table.gpu_memory
    show = lambda b: units.format_bytes(b, table.unit)  # noqa: E731

    def needs(held: Fraction) -> str:
        return (
            show(held)
            if act == 0
            else f"{show(held)} model state + {show(act)} activations = {show(held + act)}"
        )

    fit = memory.lowest_fitting(tuple(row.held for row in table.rows), limit, act)
    if fit is not None:
        held = table.rows[fit].held.total
        free = 1 - (held + act) / limit
        thin = f", only {headroom.percent(free)}% free" if free < headroom.HEADROOM else ""
        return f"lowest stage that fits: {fit.label} ({needs(held)} of {show(limit)}{thin})"
    fewest = None if act >= limit else memory.min_gpus(table.params, limit - act, Stage.ZERO3, table.recipe)
    more = (
        f"ZeRO-3 would fit on {fewest:,} GPUs"
        if fewest is not None
        else "no GPU count helps: checkpoint the activations or use a smaller batch (rule 3)"
    )
    return (
        f"nothing fits: even ZeRO-3 needs {needs(table.rows[-1].held.total)} of {show(limit)} per GPU; {more}"
    )


def compute_view(settings: Settings) -> View:
    """Compute the table, verdict, traffic and advice for `settings`, each stage's memory once."""
    checks.instance("settings", settings, Settings, "an explorer.Settings")
    s, held = settings, memory.per_stage(settings.setup)
    table = table_of(s.setup, held, s.unit, s.activations)
    comm = tuple(communication.traffic(s.setup, stage, s.dtype, s.bandwidth) for stage in Stage)
    advice = choose(s.setup, held, activations=s.activations, unit=s.unit)
    return View(s, table, verdict(table, s.activations), comm, advice)


def plot_memory_bars(view: View) -> str:
    """SVG: stacked per-GPU bars for each stage, the activations on top, with the memory per GPU as a line
    and, under it, the card less the advice's 10% headroom."""
    view = _view(view)
    return svg.draw(figures.stage_bars(view.table, view.settings.activations, headroom.HEADROOM))


def plot_scaling(view: View) -> str:
    """SVG: per-GPU memory against GPU count, log-log, one curve per stage; the memory and N marked."""
    s = _view(view).settings
    return svg.draw(figures.scaling(s.setup, s.unit, marker=s.gpus))


def plot_comm(view: View) -> str:
    """SVG: seconds per step spent communicating, per stage, at the chosen bandwidth."""
    s = _view(view).settings
    title = f"communication per step at {units.format_rate(s.bandwidth)} ({s.dtype}, ring)"
    return svg.draw(figures.comm_seconds(view.comm, title))


def comm_html(view: View) -> str:
    """HTML table: per-stage traffic set against per-GPU memory."""
    return html.comm_html(_view(view).comm, view.table)


def advice_html(view: View) -> str:
    """HTML: the advice for these settings, with its reasons, warnings and ranking."""
    return html.advice_html(_view(view).advice)


def _view(view: View) -> View:
    """`view`, checked: every chart and table takes a `View` from `compute_view`."""
    checks.instance("view", view, View, "an explorer.View from compute_view")
    return view


#: Cases a workshop can jump to: label -> the settings that differ from the defaults.
PRESETS: dict[str, dict] = {
    "The article: 7.5 B on 8 × 80 GB": {"params": 7_500_000_000, "gpus": 8, "gpu_memory": "80GB"},
    "GPT-2 XL (1.56 B) on 4 × 16 GB": {"params": 1_557_611_200, "gpus": 4, "gpu_memory": "16GB"},
    "Llama 2 7B on 8 × 80 GB": {"params": 6_738_415_616, "gpus": 8, "gpu_memory": "80GB"},
    "Llama 2 70B on 64 × 80 GB": {"params": 68_976_648_192, "gpus": 64, "gpu_memory": "80GB"},
    "GPT-3 (175 B) on 1,024 × 80 GB": {"params": 175_000_000_000, "gpus": 1024, "gpu_memory": "80GB"},
}
