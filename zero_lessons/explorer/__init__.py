"""The explorer: every view of the model for one set of controls.

The parts: `views`, pure functions from `Settings` to every view's content (tested without a
browser), then `widgets`, the ipywidgets controls that read text through `inputs.FIELDS` and show
what `views.compute_view` returns. The step view is the same pair for one rank's memory over a
training step: `step_view` (`StepSettings` → `compute_step_view`) and `step_widget` (`StepExplorer`).
"""

from .step_view import StepSettings, compute_step_view
from .step_widget import StepExplorer
from .views import PRESETS, Settings, View, compute_view
from .widgets import Explorer

__all__ = [
    "PRESETS",
    "Explorer",
    "Settings",
    "StepExplorer",
    "StepSettings",
    "View",
    "compute_step_view",
    "compute_view",
]
