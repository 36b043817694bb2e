"""The example that lesson 17's config keys are priced on, shared by `keys` and `baseline`: the package's
7.5 B GPT on 8 GPUs, one step of it per knob setting (built once), and the loss counted on top. No torch."""

from __future__ import annotations

from functools import lru_cache

from .. import checks
from ..planning.activations import CROSS_ENTROPY_COPIES, Transformer
from ..planning.step import DeepSpeed, Timeline, timeline, transformer_model
from ..planning.step_choices import MODELS

#: The example: the package's 7.5 B GPT (32 blocks of 4,352, Ψ = 7,493,452,032), 2,048 tokens, 8 GPUs.
SHAPE = MODELS["7.5b"]
GPUS = 8


@lru_cache(maxsize=64)
def example_step(shape: Transformer, framework: DeepSpeed, head: bool = False) -> Timeline:
    """One step of the example on its GPUS, built once per shape and framework: the key table's numbers, its
    loss column and `baseline`'s rows share it. With `head`, the tied output layer's gradient is counted
    (`transformer_model`'s `head`)."""
    return timeline(transformer_model(shape, head=head), framework, GPUS)


def loss_bytes(shape: Transformer, head: bool = False) -> int:
    """The loss counted on top of the forward pass, as lesson 14 counts it: a cross-entropy's fp32 copies of
    `shape`'s logits; with `head`, the output layer's bf16 logits beside them."""
    return CROSS_ENTROPY_COPIES * shape.logits_bytes + (
        shape.bf16_logits_bytes if checks.flag("head", head) else 0
    )
