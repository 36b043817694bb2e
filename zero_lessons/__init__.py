"""ZeRO Lessons: exact accounting of where DeepSpeed ZeRO keeps the training state.

The numeric modules load here; `symbolic`, `plots`, `simulate` and `widgets` pull in sympy,
numpy, matplotlib or ipywidgets, so import them by name when a lesson needs them.
"""

from .communication import collectives, step_time, volume_bytes, volume_elements
from .memory import Breakdown, cluster_total, max_params, min_gpus, per_gpu, saving
from .recipes import MIXED_ADAM, PRESETS, Recipe, custom
from .stages import Stage, as_stage
from .table import StageTable, stage_table
from .units import GB, GiB, format_bytes, parse_count, parse_size

__all__ = [
    "GB", "GiB", "MIXED_ADAM", "PRESETS", "Breakdown", "Recipe", "Stage", "StageTable",
    "as_stage", "cluster_total", "collectives", "custom", "format_bytes", "max_params", "min_gpus",
    "parse_count", "parse_size", "per_gpu", "saving", "stage_table", "step_time",
    "volume_bytes", "volume_elements",
]
