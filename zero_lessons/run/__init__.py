"""Running it for real: train with DeepSpeed from a config file on CPU ranks, started by torchrun.

The parts:
- `train`: the training script a learner reads and copies (torch and DeepSpeed are imported only there,
  inside the ranks, and in `loopback`);
- `loopback`: torchrun with its rendezvous store on 127.0.0.1 only;
- `launcher`: `launch` starts the script under torchrun from Python and returns every rank's report, typed.
"""

from .launcher import RankReport, RunError, RunReport, launch

__all__ = ["RankReport", "RunError", "RunReport", "launch"]
