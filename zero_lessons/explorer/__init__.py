"""The explorer: every view of the model for one set of controls.

The parts: `views`, pure functions from `Settings` to every view's content (tested without a
browser), then `widgets`, the ipywidgets controls that read text through `inputs.FIELDS` and show
what `views.compute_view` returns.
"""

from .views import PRESETS, Settings, View, compute_view
from .widgets import Explorer

__all__ = ["PRESETS", "Explorer", "Settings", "View", "compute_view"]
