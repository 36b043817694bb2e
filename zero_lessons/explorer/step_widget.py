"""The explorer's step view as ipywidgets: framework, stage, GPUs, model and knobs, wired to the chart.

Thin by design: `read` turns the controls into `step_view.StepSettings` (knob text read by
`step_choices.read_knob`, the same reader and errors as `zero-lessons step`), and `refresh` shows
what `compute_step_view` returns. All or nothing: the chart and the peak's table are computed
first and only then shown; on a bad input one line says what is wrong and both keep the last good view.
"""

from __future__ import annotations

from html import escape

import ipywidgets as w

from .. import checks, recipes, units
from ..inputs import FIELDS
from ..planning.step_choices import KNOBS, MODEL_ABOUT, NAMED_FRAMEWORKS, make_framework, read_knob
from ..stages import Stage
from . import step_view

_ERROR = "<span class='zero-error' style='color:#b00020'>{}</span>"
#: The stage each framework starts at when the learner switches to it.
_STAGES = {"paper": 3, "deepspeed": 3}
_OVERLAP = [("stage default", None), ("on", True), ("off", False)]


def _knob_control(name: str) -> w.Widget:
    """A control for one knob, its help as the tooltip; `_set_knobs` gives it its value."""
    knob = KNOBS[name]
    label = name.replace("_", " ")
    if name == "overlap_comm":
        return w.Dropdown(options=_OVERLAP, value=None, description=label, tooltip=knob.help)
    if knob.kind == "switch":
        return w.Checkbox(value=False, description=label, indent=False, tooltip=knob.help)
    return w.Text("", description=label, continuous_update=False, tooltip=knob.help)


class StepExplorer:
    """Controls for one training step's memory; the timeline chart and the peak's parts follow them."""

    def __init__(self, settings: step_view.StepSettings | None = None):
        s = step_view.StepSettings() if settings is None else settings
        checks.instance("settings", s, step_view.StepSettings, "a step_view.StepSettings")
        checks.choice(
            "settings.recipe (the view offers the named recipes)", s.recipe.name, tuple(recipes.PRESETS)
        )
        name = next(k for k, cls in NAMED_FRAMEWORKS.items() if isinstance(s.framework, cls))
        self.framework = w.ToggleButtons(options=list(NAMED_FRAMEWORKS), value=name, description="framework")
        stage = int(getattr(s.framework, "stage", _STAGES.get(name, 3)))
        self.stage = w.ToggleButtons(options=[0, 1, 2, 3], value=stage, description="stage")
        self.gpus = w.Text(str(s.gpus), description="GPUs", continuous_update=False)
        self.model = w.Dropdown(options=list(MODEL_ABOUT), value=s.model, description="model")
        self.recipe = w.Dropdown(options=list(recipes.PRESETS), value=s.recipe.name, description="recipe")
        self.checkpointing = w.Checkbox(value=s.checkpointing, description="activation checkpointing")
        self.unit = w.ToggleButtons(options=["GB", "GiB"], value=s.unit, description="unit")
        self.knobs = {k: _knob_control(k) for k in KNOBS}
        self._set_knobs(s.framework)
        self.status, self.chart, self.peak = w.HTML(), w.HTML(), w.HTML()
        self.view: step_view.StepView | None = None
        for control in (*self._controls(), *self.knobs.values()):
            control.observe(self.refresh, "value")
        self.widget = self._layout()
        self.refresh()

    def _controls(self) -> tuple[w.Widget, ...]:
        """The controls besides the knobs."""
        return (self.framework, self.stage, self.gpus, self.model, self.recipe, self.checkpointing, self.unit)

    def _set_knobs(self, framework) -> None:
        """Put each knob control at `framework`'s value, or its own framework's default (before observing)."""
        defaults = {name: cls() for name, cls in NAMED_FRAMEWORKS.items()}
        for name, knob in KNOBS.items():
            source = framework if hasattr(framework, name) else defaults[knob.framework]
            value = getattr(source, name)
            if name == "overlap_comm" and value == (source.stage == Stage.ZERO3):
                value = None  # the stage's own default: it follows the stage control
            if knob.kind == "switch":
                self.knobs[name].value = value is not False if name == "reshard_after_forward" else value
            else:
                shown = units.format_count(value) if knob.kind == "elements" else units.format_number(value)
                self.knobs[name].value = shown

    def _layout(self) -> w.Widget:
        """Run controls and the knobs side by side; under them the chart, then the peak's parts."""
        for control in (*self._controls(), *self.knobs.values()):
            control.style.description_width = "170px"
        run = w.VBox([*self._controls(), self.status])
        knobs = w.VBox(list(self.knobs.values()))
        app = w.VBox([w.HBox([run, knobs]), self.chart, self.peak])
        app.add_class("zero-step-explorer")
        return app

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def read(self) -> step_view.StepSettings:
        """Settings from the controls; a ValueError or TypeError names the control it cannot read."""
        name = self.framework.value
        applies = [
            k
            for k, knob in KNOBS.items()
            if knob.framework == name and (not knob.stage3 or self.stage.value == Stage.ZERO3)
        ]
        knobs = {}
        for k in applies:
            value = self.knobs[k].value
            knobs[k] = value if KNOBS[k].kind == "switch" else read_knob(k, value)
        stage = self.stage.value if name in _STAGES else None
        return step_view.StepSettings(
            make_framework(name, stage, knobs),
            FIELDS["gpus"](self.gpus.value),
            self.model.value,
            recipes.get(self.recipe.value),
            self.checkpointing.value,
            self.unit.value,
        )

    def refresh(self, change=None) -> None:
        """Redraw from the controls, all or nothing; never raise into the notebook."""
        self._show_knobs()
        try:
            view = step_view.compute_step_view(self.read())
            shown = (step_view.plot_step(view), step_view.peak_html(view))
        except (ValueError, TypeError) as err:
            self.status.value = _ERROR.format(
                escape(f"{err} (the chart still shows the last valid settings)", quote=False)
            )
            return
        except Exception as err:  # a callback must not raise into the notebook: say what happened instead
            self.status.value = _ERROR.format(
                escape(f"could not update: {type(err).__name__}: {err}", quote=False)
            )
            return
        self.chart.value, self.peak.value = shown
        self.status.value = ""
        self.view = view

    def _show_knobs(self) -> None:
        """Show the chosen framework's knobs only (stage 3's at stage 3 only); the stage where it has one."""
        name = self.framework.value
        self.stage.disabled = name not in _STAGES
        for k, control in self.knobs.items():
            knob = KNOBS[k]
            visible = knob.framework == name and (not knob.stage3 or self.stage.value == Stage.ZERO3)
            control.layout.display = None if visible else "none"
