"""Running it for real: train with DeepSpeed from a config file on CPU ranks, started by torchrun.

The parts:
- `train`: the training script a learner reads and copies (torch and DeepSpeed are imported only there,
  inside the ranks, and in `loopback`);
- `loopback`: torchrun with its rendezvous store on 127.0.0.1 only;
- `launcher`: `launch` starts the script under torchrun from Python and returns every rank's report, typed;
- `predict`: what each rank should hold (the lab's rules on the script's model, plus offload's buffers);
  `summary`: measured beside predicted, per config, for the command line and the lesson;
- for lesson 16: `precision` (bf16 against fp16), `fsdp` (ZeRO's stages against PyTorch's equivalents),
  `source` (the script's functions as a listing);
- for lesson 17: `keys` (the config keys that matter, with numbers), `baseline` (the example those numbers
  start from), both on `example` (the 7.5 B GPT on 8 GPUs, one step per knob setting, built once), and
  `spelled` (the example's config with every priced key written out), `stage3_plan` (stage 3 as the loss
  runs, by the step model and by DeepSpeed's rules, and the peak to plan with).
"""

from .launcher import RankReport, RunError, RunReport, launch

__all__ = ["RankReport", "RunError", "RunReport", "launch"]
