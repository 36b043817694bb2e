"""The interactive explorer: ipywidgets controls wired to `views.compute_view` and its plots.

Thin by design: each callback reads the controls through `inputs.FIELDS` into `views.Settings`
(the same readers and errors as the command line), and either shows an
inline message next to the control it cannot read, or redraws every view from `compute_view`.
The redraw is all or nothing: every view is computed first, and only then are they all shown,
so the views never disagree with each other; on any error they all keep the last good state.
"""

from __future__ import annotations

import math
from html import escape

import ipywidgets as w

from .. import checks, communication, recipes, units
from ..inputs import CUSTOM, FIELDS
from . import views

_ERROR = "<div class='zero-error' style='color:#b00020;white-space:normal;line-height:1.3'>{}</div>"
#: Every control, and the error area under it, has this width: an error never widens a column.
_WIDTH = "360px"
_NARROW = "calc(100% - 4px)"  #: on a phone: the column's width less a control's 2 px margins
#: The text boxes read through `inputs.FIELDS`, by field name, besides the three custom byte counts.
_TYPED = ("params", "gpus", "gpu_memory", "bandwidth", "activations")
_PICK = "choose a case…"


def _label(text: str) -> w.HTML:
    """A control's name in the 110 px column where every description sits, aligned right as theirs are."""
    html = f"<div style='text-align:right;padding-right:8px'>{escape(text)}</div>"
    return w.HTML(html, layout=w.Layout(width="110px", min_width="110px"))


class Explorer:
    """Controls for model, cluster, recipe, memory, activations, unit, dtype and link; the views follow."""

    def __init__(self, settings: views.Settings = views.Settings()):
        checks.instance("settings", settings, views.Settings, "an views.Settings")
        self._syncing = False
        self._make_model_controls(settings)
        self._make_training_controls(settings)
        self.errors = {
            k: w.HTML(layout=w.Layout(width=_WIDTH, max_width=_NARROW)) for k in (*_TYPED, *CUSTOM)
        }
        self.note = w.HTML(views.STATIC_NOTE)
        scroll = w.Layout(overflow="auto", max_width="100%")  # a table wider than a phone scrolls in its box
        self.table, self.comm_table = w.HTML(layout=scroll), w.HTML(layout=scroll)
        self.status, self.verdict, self.advice = w.HTML(), w.HTML(), w.HTML()
        self.bars, self.scaling, self.comm_chart = w.HTML(), w.HTML(), w.HTML()
        self.view: views.View | None = None
        self.params_slider.observe(self._slid_params, "value")
        self.gpus_slider.observe(self._slid_gpus, "value")
        self.preset.observe(self._chose_preset, "value")
        for control in self._read_controls():
            control.observe(self.refresh, "value")
        self.widget = self._layout()
        self.refresh()

    def _make_model_controls(self, s: views.Settings) -> None:
        """The case, model size, GPU count and memory per GPU controls, set from `s`."""
        self.preset = w.Dropdown(options=[_PICK, *views.PRESETS], description="case")
        self.params_slider = w.FloatLogSlider(
            value=s.params, base=10, min=8, max=15, step=0.01, readout=False, description="model size"
        )
        self.params_text = w.Text(
            units.format_count_exact(s.params), description="params", continuous_update=False
        )
        self.gpus_slider = w.SelectionSlider(
            options=views.GPU_STEPS, value=views.nearest_step(s.gpus), readout=False, description="GPUs"
        )
        self.gpus_text = w.Text(str(s.gpus), description="GPU count", continuous_update=False)
        self.gpu_memory = w.Text(
            f"{units.format_number(units.in_unit(s.gpu_memory, s.unit), 12)} {s.unit}",
            description="memory/GPU",
            continuous_update=False,
        )

    def _make_training_controls(self, s: views.Settings) -> None:
        """The recipe (with its custom byte counts), activations, unit, dtype and link controls, from `s`."""
        custom = s.recipe.name not in recipes.PRESETS
        self.recipe = w.Dropdown(
            options=[*recipes.PRESETS, "custom"],
            value="custom" if custom else s.recipe.name,
            description="recipe",
        )
        self.custom = {
            k: w.Text(str(getattr(s.recipe, k)), description=k.replace("_", " "), continuous_update=False)
            for k in CUSTOM
        }
        self.activations = w.Text(
            f"{units.format_number(units.in_unit(s.activations, s.unit), 12)} {s.unit}",
            description="activations",
            continuous_update=False,
        )
        # its label is a separate box: a ToggleButtons' own description sits above its buttons
        self.unit = w.ToggleButtons(options=["GB", "GiB"], value=s.unit, tooltips=["10**9 B", "2**30 B"])
        self.unit.style.button_width = "70px"
        self.dtype = w.Dropdown(options=list(communication.DTYPES), value=s.dtype, description="sent as")
        self.bandwidth = w.Text(
            f"{units.format_number(s.bandwidth * 8 / 10**9, 12)} Gb/s",
            description="link",
            continuous_update=False,
        )

    def _read_controls(self) -> tuple[w.Widget, ...]:
        """The controls `read` takes values from; a change to any of them redraws every view."""
        return (
            self.params_text,
            self.gpus_text,
            self.recipe,
            *self.custom.values(),
            self.gpu_memory,
            self.activations,
            self.unit,
            self.dtype,
            self.bandwidth,
        )

    def _layout(self) -> w.Widget:
        """The static-page note, two columns of controls, then the views."""
        wrap = w.Layout(flex_flow="row wrap")  # columns and charts side by side where there is room
        views = w.VBox(
            [
                self.verdict,
                self.status,
                self.table,
                self.advice,
                w.HBox([self.bars, self.scaling], layout=wrap),
                w.HBox([self.comm_chart, self.comm_table], layout=wrap),
            ]
        )
        app = w.VBox([self.note, w.HBox(self._columns(), layout=wrap), views], layout=w.Layout(width="100%"))
        app.add_class("zero-explorer")
        return app

    def _columns(self) -> list[w.Widget]:
        """Two fixed-width columns of controls, each text box with its error area under it."""
        for control in (self.preset, self.params_slider, self.gpus_slider, *self._read_controls()):
            control.style.description_width = "110px"
            control.layout.width, control.layout.max_width = _WIDTH, _NARROW  # narrower only on a phone
        self.unit.layout.width = "240px"
        row = lambda control, key: w.VBox([control, self.errors[key]])  # noqa: E731
        column = w.Layout(width="380px", max_width="100%")
        model = w.VBox(
            [
                self.preset,
                self.params_slider,
                row(self.params_text, "params"),
                self.gpus_slider,
                row(self.gpus_text, "gpus"),
                row(self.gpu_memory, "gpu_memory"),
            ],
            layout=column,
        )
        training = w.VBox(
            [
                self.recipe,
                *(row(self.custom[k], k) for k in CUSTOM),
                row(self.activations, "activations"),
                w.HBox([_label("unit"), self.unit]),
                self.dtype,
                row(self.bandwidth, "bandwidth"),
            ],
            layout=column,
        )
        model.add_class("zero-model-controls")
        training.add_class("zero-training-controls")
        return [model, training]

    def _repr_mimebundle_(self, **kwargs):
        """The widget for a live page; for any page that cannot draw it, a summary instead of the repr."""
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = views.SUMMARY
        return bundle

    def _set_quietly(self, control: w.Widget, value) -> None:
        """Move a paired control without it triggering another update."""
        self._syncing = True
        try:
            control.value = value
        finally:
            self._syncing = False

    def _slid_params(self, change) -> None:
        if self._syncing:
            return
        shown = self.view.settings.params if self.view else None
        if shown and abs(math.log10(change["new"]) - math.log10(shown)) < self.params_slider.step:
            return  # the browser only snapped the slider to its grid: keep the exact typed size
        self.params_text.value = units.format_count(views.round3(change["new"]))

    def _slid_gpus(self, change) -> None:
        if not self._syncing:
            self.gpus_text.value = str(change["new"])

    def _chose_preset(self, change) -> None:
        """Jump to a named case: set its controls, then redraw once."""
        case = views.PRESETS.get(change["new"])
        if case is None:
            return
        self._syncing = True
        try:
            self.params_text.value = units.format_count_exact(case["params"])
            self.gpus_text.value = str(case["gpus"])
            self.gpu_memory.value = case["gpu_memory"]
        finally:
            self._syncing = False
        self.refresh()

    def read(self) -> tuple[views.Settings | None, dict[str, str]]:
        """Settings from the controls, read through `inputs.FIELDS`; or None and a message per bad control."""
        texts = {
            "params": self.params_text,
            "gpus": self.gpus_text,
            "gpu_memory": self.gpu_memory,
            "bandwidth": self.bandwidth,
            "activations": self.activations,
        } | (self.custom if self.recipe.value == "custom" else {})
        errors, got = {}, {}
        for key, control in texts.items():
            try:
                got[key] = FIELDS[key](control.value)
            except (ValueError, TypeError) as err:
                errors[key] = str(err)
        if errors:
            return None, errors
        recipe = (
            recipes.custom(*(got[k] for k in CUSTOM))
            if self.recipe.value == "custom"
            else recipes.get(self.recipe.value)
        )
        return views.Settings(
            got["params"],
            got["gpus"],
            recipe,
            got["gpu_memory"],
            self.unit.value,
            self.dtype.value,
            got["bandwidth"],
            got["activations"],
        ), {}

    def refresh(self, change=None) -> None:
        """Redraw every view from the controls; never raise into the notebook."""
        if self._syncing:
            return
        try:
            self._redraw()
        except Exception as err:  # a callback must not raise into the notebook: say what happened instead
            self.status.value = _ERROR.format(escape(f"could not update: {err}", quote=False))

    def _redraw(self) -> None:
        """Compute every view, then show them all; or mark what is wrong and change no view."""
        for k in CUSTOM:
            self.custom[k].disabled = self.recipe.value != "custom"
        settings, errors = self.read()
        if settings is not None:
            try:
                view, shown = self._views(settings)
            except (ValueError, TypeError) as err:  # a limit no one control knows: mark the one it names
                key = next((k for k in self.errors if str(err).startswith(k)), None)
                if key is None:
                    raise
                errors = {key: str(err)}
        for key, label in self.errors.items():
            label.value = _ERROR.format(escape(errors[key], quote=False)) if key in errors else ""
        if errors:
            self.status.value = _ERROR.format(
                "fix the marked input; the views still show the last valid settings"
            )
            return
        self._sync_sliders(settings)
        for widget, value in shown:
            widget.value = value
        self.status.value = ""
        self.view = view

    def _views(self, settings: views.Settings) -> tuple[views.View, list[tuple[w.HTML, str]]]:
        """Every view's content for `settings`, computed before any widget changes."""
        view = views.compute_view(settings)
        verdict = f"<b class='zero-verdict'>{escape(view.verdict, quote=False)}</b>"
        return view, [
            (self.verdict, verdict),
            (self.table, view.table.to_html()),
            (self.advice, views.advice_html(view)),  # in display order: the top of the page settles first
            (self.bars, views.plot_memory_bars(view)),
            (self.scaling, views.plot_scaling(view)),
            (self.comm_chart, views.plot_comm(view)),
            (self.comm_table, views.comm_html(view)),
        ]

    def _sync_sliders(self, settings: views.Settings) -> None:
        """Put the sliders where the typed values are (they show position only; the text is the value)."""
        if views.round3(self.params_slider.value) != settings.params:
            self._set_quietly(self.params_slider, min(max(settings.params, 10**8), 10**15))
        if self.gpus_slider.value != views.nearest_step(settings.gpus):
            self._set_quietly(self.gpus_slider, views.nearest_step(settings.gpus))
