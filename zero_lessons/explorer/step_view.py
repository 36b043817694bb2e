"""The explorer's step view, pure side: typed settings in; the timeline, its chart and the peak's parts out.

`step_widget` reads its controls into `StepSettings` and shows what `compute_step_view` returns,
so everything a reader sees is tested without a browser. Named models are built once and kept
(a 33-layer model takes about a millisecond to check), so a knob change costs one timeline.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from html import escape

from .. import checks, units
from ..planning.step import Model, Timeline, timeline, transformer_model
from ..planning.step_choices import MODELS, paper_bytes, paper_stage
from ..planning.step_knobs import FRAMEWORKS, DeepSpeed, Framework
from ..present import step_chart
from ..recipes import MIXED_ADAM, Recipe, get
from ..stages import Stage


@functools.cache
def named_model(name: str) -> Model:
    """The named transformer of `step_choices.MODELS` as the step sees it, built once."""
    return transformer_model(MODELS[checks.choice("model", name, tuple(MODELS))])


@dataclass(frozen=True)
class StepSettings:
    """Everything the step view's controls choose, each value checked once."""

    framework: Framework = field(default=DeepSpeed(stage=Stage.ZERO3))  #: with its knobs
    gpus: int = 8  #: N_d
    model: str = "7.5b"  #: a name in `step_choices.MODELS`
    recipe: Recipe = MIXED_ADAM  #: bytes per parameter
    checkpointing: bool = False  #: recompute every layer in backward
    unit: str = "GB"  #: "GB" or "GiB"

    def __post_init__(self):
        checks.instance("framework", self.framework, FRAMEWORKS, "a Paper, DDP, DeepSpeed or FSDP2")
        object.__setattr__(self, "gpus", checks.gpus(self.gpus))
        checks.choice("model", self.model, tuple(MODELS))
        object.__setattr__(self, "recipe", get(self.recipe))
        checks.flag("checkpointing", self.checkpointing)
        object.__setattr__(self, "unit", units.unit_name(self.unit))


@dataclass(frozen=True)
class StepView:
    """What the step view shows for one `StepSettings`."""

    settings: StepSettings  #: what produced it
    timeline: Timeline  #: the rank's memory at every phase
    paper: int  #: the paper's table for the framework's stage, bytes (int or Fraction)
    chart: step_chart.StepChart  #: the chart's content
    headline: str  #: one sentence: the peak, where, and how far above the paper's table
    peak_rows: tuple[tuple[str, str, str], ...]  #: the peak's parts: (kind, bytes shown, reason)


def compute_step_view(settings: StepSettings) -> StepView:
    """The timeline for `settings`, its chart, the peak's parts and a one-sentence headline."""
    checks.instance("settings", settings, StepSettings, "an explorer StepSettings")
    s = settings
    line = timeline(named_model(s.model), s.framework, s.gpus, s.recipe, checkpointing=s.checkpointing)
    paper = paper_bytes(line.model.params, s.gpus, s.framework, s.recipe)
    show = lambda b: units.format_bytes(b, s.unit)  # noqa: E731
    peak = line.peak
    times = f"{units.format_number(peak.total / paper, 2)}× " if paper else ""
    headline = (
        f"peak {show(peak.total)} per rank at {peak.name}: "
        f"{times}the paper's table for {paper_stage(s.framework).label} ({show(paper)})"
    )
    rows = tuple((p.kind, show(p.nbytes), p.reason) for p in peak.parts)
    return StepView(s, line, paper, step_chart.step_chart(line, s.unit, paper), headline, rows)


def plot_step(view: StepView) -> str:
    """SVG: one stacked bar per phase by kind of part, the peak marked, the paper's table dashed."""
    checks.instance("view", view, StepView, "a StepView from compute_step_view")
    return step_chart.draw(view.chart)


def peak_html(view: StepView) -> str:
    """HTML: the headline, then a table of the peak's parts, each with its reason."""
    checks.instance("view", view, StepView, "a StepView from compute_step_view")
    colours = step_chart.KIND_COLOURS
    rows = "".join(
        f"<tr><td style='white-space:nowrap'><span style='color:{colours[kind]}'>■</span> {escape(kind)}</td>"
        f"<td style='text-align:right;white-space:nowrap'>{escape(shown)}</td><td>{escape(reason)}</td></tr>"
        for kind, shown, reason in view.peak_rows
    )
    return (
        f"<b class='zero-step-headline'>{escape(view.headline)}</b>"
        f"<table class='zero-step-peak'><tr><th>part</th><th>bytes</th><th>why it is there</th></tr>"
        f"{rows}</table>"
    )
