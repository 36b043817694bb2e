"""ZeRO Lessons: exact accounting of where DeepSpeed ZeRO keeps the training state.

Importing the package loads the core only: units, checks, stages, recipes, inputs, memory and
communication, with no third-party import. The other parts are sub-packages, imported by name
when a lesson needs them: `present` (tables and figures), `explorer` (the widgets), `planning`
(activations, offload, advice, DeepSpeed), `lab` (real ranks), `workshop` and `run`.
"""

from .communication import collectives, step_time, volume_bytes, volume_elements
from .inputs import Setup
from .memory import Breakdown, cluster_total, lowest_fitting, max_params, min_gpus, per_gpu, saving
from .recipes import MIXED_ADAM, PRESETS, Recipe, custom
from .stages import Stage, as_stage
from .units import GB, GiB, format_bytes, parse_count, parse_size

__all__ = [
    "GB",
    "GiB",
    "MIXED_ADAM",
    "PRESETS",
    "Breakdown",
    "Recipe",
    "Setup",
    "Stage",
    "as_stage",
    "cluster_total",
    "collectives",
    "custom",
    "format_bytes",
    "lowest_fitting",
    "max_params",
    "min_gpus",
    "parse_count",
    "parse_size",
    "per_gpu",
    "saving",
    "step_time",
    "volume_bytes",
    "volume_elements",
]
