"""Per-rank memory over one training step, phase by phase: the paper's accounting, DDP, DeepSpeed ZeRO, FSDP2.

The paper's table counts model state at one moment. A real step walks through phases, and at each
one a rank also holds buffers that come and go. `timeline` lists the phases in order:

    start of step, forward <layer> (each layer), backward <layer> (each layer, last first),
    gradient reduction, before optimizer step, optimizer step, after optimizer step

and at each phase the bytes one rank holds, split into parts, each with a one-line reason. The
parts' kinds are the model states (weights, gradients, optimizer) and the transient buffers:
activations, gathered parameters, unreduced gradients, gradient buckets, fp32 gradients and
optimizer temporaries. "start of step" is after the last step's zero_grad(set_to_none=True);
"before optimizer step" is where the lab snapshots DeepSpeed, "after optimizer step" where it
snapshots PyTorch's frameworks. A phase's parts are those at its highest point.

Modelled: the rules each framework's code follows (see `step_rules`, `step_fsdp2`, `step_coordinator`,
`step_deepspeed`, `step_zero3`), activations per layer with and without checkpointing, one
micro-batch per step, the steady state from the second step on (Adam's moments exist; DeepSpeed's
trace is recorded), Adam as each framework runs it on GPU (torch.optim.Adam's foreach path for DDP
and FSDP2, FusedAdam for DeepSpeed), and states split evenly, Ψ/N per rank, as the paper splits them.
Left out: the caching allocator (reserved but free blocks, fragmentation), temporaries inside
an op or a collective (a matmul's workspace, NCCL's buffers), the gradient flowing between layers,
the logits and the loss, an output layer (but `transformer_model(..., head=True)` counts its tied weight's
gradient through the backward pass), padding of shards to whole elements (the lab's predictions count it),
CUDA context and library memory, the first step's lazy allocations, and offloading.

`Timeline.to_dict()` gives this JSON shape (bytes are exact: an int, or a float when Ψ/N is not
whole); the numbers are DeepSpeed ZeRO-3's defaults for `transformer_model` of a 32×4096 GPT on 8 GPUs:

    {"framework": "DeepSpeed ZeRO-3",
     "knobs": {"stage": 3, "reduce_bucket_size": 500000000, "overlap_comm": true, ...},  # defaults filled in
     "model": "GPT 32×4096", "params": 6650007552, "layers": 33,
     "gpus": 8, "recipe": "mixed-adam", "checkpointing": false,
     "peak": {"index": 34, "phase": "backward block 32", "total_bytes": 46649895424},
     "phases": [{"name": "start of step",
                 "kind": "boundary",          # or forward, backward, reduction, optimizer
                 "total_bytes": 14303422976,
                 "parts": [{"kind": "optimizer", "bytes": 9975011328, "reason": "fp32 master weights and
                            moments for the 1/8 partition: 12 B × 6.650B / 8"},   # one line in the output
                           ...]},
                ...]}
"""

from __future__ import annotations

from .. import checks
from ..recipes import MIXED_ADAM, RecipeLike, get
from .step_deepspeed import zero12
from .step_fsdp2 import fsdp2
from .step_knobs import DDP, FSDP2, DeepSpeed, Framework, Paper
from .step_model import Layer, Model, layered_model, transformer_model
from .step_parts import KINDS, Part, Phase, Timeline
from .step_rules import Moments, Setup, assemble, ddp, paper
from .step_zero3 import zero3

__all__ = [
    "DDP",
    "FSDP2",
    "KINDS",
    "DeepSpeed",
    "Layer",
    "Model",
    "Paper",
    "Part",
    "Phase",
    "Timeline",
    "layered_model",
    "timeline",
    "transformer_model",
]


def deepspeed(setup: Setup, fw: DeepSpeed) -> Moments:
    """DeepSpeed's moments at its stage."""
    return zero3(setup, fw) if fw.stage == 3 else zero12(setup, fw)


_RULES = {Paper: paper, DDP: ddp, DeepSpeed: deepspeed, FSDP2: fsdp2}


def timeline(
    model: Model,
    framework: Framework,
    gpus: int,
    recipe: RecipeLike = MIXED_ADAM,
    *,
    checkpointing: bool = False,
) -> Timeline:
    """Per-rank memory at every phase of one step of `model` on `gpus` ranks under `framework`."""
    if not isinstance(model, Model):
        raise TypeError(
            f"model must be a Model (see transformer_model, layered_model), got {type(model).__name__}"
        )
    rule = _RULES.get(type(framework))
    if rule is None:
        raise TypeError(f"framework must be Paper, DDP, DeepSpeed or FSDP2, got {type(framework).__name__}")
    if not isinstance(checkpointing, bool):
        raise TypeError(f"checkpointing must be True or False, got {checkpointing!r}")
    setup = Setup(model, checks.gpus(gpus), get(recipe), checkpointing)
    return Timeline(
        framework, model, setup.gpus, setup.recipe, checkpointing, assemble(setup, rule(setup, framework))
    )
