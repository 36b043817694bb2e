"""The lab: train a small model on 1, 2 and 4 CPU ranks (gloo, 127.0.0.1) and set what each rank really
holds and sends beside what the package predicts.

The parts, in the order data flows:
- `modes`: the table of framework setups; `model`: the lab's model and training run;
- `predict_torch`, `predict_deepspeed`: what the package predicts, one module per framework;
- `runner`: starts the ranks and collects what they measure; `ranks`, `rank_torch`, `rank_deepspeed`
  and `counting` run inside the ranks, and only there is torch (or DeepSpeed) imported;
- `results`: typed measurements and predictions; `report`: the table;
- `reuse`: one run shared by a test session;
- the step's timeline, measured in the same ranks: `timeline_setup` (what runs), `live_bytes` and
  `timeline` (in the ranks), `timeline_compare` (measured beside the planning model).
"""

from .modes import DEEPSPEED_NAMES, MODE_NAMES, TORCH_NAMES
from .runner import LabError, run
from .timeline_setup import STEP_NAMES

__all__ = ["DEEPSPEED_NAMES", "MODE_NAMES", "STEP_NAMES", "TORCH_NAMES", "LabError", "run"]
