"""Planning: what a run holds beyond the paper's table, and how to make it fit.

The parts:
- `activations`: the activation memory no stage touches, and how recomputation shrinks it;
- `offload`: the offload rules and their order, stated once, with the GPU, host and PCIe costs;
- `ds_estimator`: DeepSpeed's own model-state estimator, re-derived; `ds_config`: its config for a choice;
- `counts`: the four counts lessons 07 and 08 compare, named once; `offload_step`: an offload step in seconds;
- `advice`: the lowest stage that fits with `headroom` free, by the article's rules; `headroom`: that margin;
  `ranking`: the ranking it follows; `host_check`: its offload checked on the host by both counts, the
  paper's and DeepSpeed's estimator (with zero.Init, which it states);
- `step` (with `step_*`): what a training step holds moment by moment, per framework.
"""

from .advice import Advice, advise, advise_model
from .step import DDP, FSDP2, DeepSpeed, Model, Paper, layered_model, timeline, transformer_model

__all__ = [
    "DDP",
    "FSDP2",
    "Advice",
    "DeepSpeed",
    "Model",
    "Paper",
    "advise",
    "advise_model",
    "layered_model",
    "timeline",
    "transformer_model",
]
