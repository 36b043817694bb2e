"""Activation memory of a transformer: the part of the footprint that no ZeRO stage touches.

Two estimates, both in bytes with 16-bit activations and no tensor or sequence parallelism:
- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
  eq. (1): s·b·h·(34 + 5·a·s/h) per layer, and how recomputation shrinks it. The 5·a·s/h term is
  attention's s × s matrices, stored by unfused attention and never by FlashAttention (`ATTENTION`).
- The ZeRO paper's rough rule (section 3.2): about 12·h·b·s·L values, 2 bytes each.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks, memory
from ..inputs import Setup
from ..stages import Stage


@dataclass(frozen=True)
class Transformer:
    """The shape of a decoder-only transformer and the batch it trains on."""

    layers: int  #: L, transformer blocks
    hidden: int  #: h, hidden size
    heads: int  #: a, attention heads
    seq_len: int  #: s, tokens per sequence
    micro_batch: int  #: b, sequences per GPU per step
    vocab: int = 50_257  #: V, vocabulary size (GPT-2's by default)

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "seq_len", "micro_batch", "vocab"):
            object.__setattr__(self, name, checks.whole(name, getattr(self, name), high=10**7))
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")

    @property
    def params(self) -> int:
        """Approximate parameter count: 12·L·h² in the blocks plus V·h in the embedding (biases and norms,
        13·h per block, left out; `step_model.transformer_model` counts them)."""
        return 12 * self.layers * self.hidden**2 + self.vocab * self.hidden

    @property
    def logits_bytes(self) -> int:
        """One fp32 copy of the logits, the head's output: s·b·V × 4 bytes (a loss holds a few)."""
        return 4 * self.seq_len * self.micro_batch * self.vocab

    @property
    def bf16_logits_bytes(self) -> int:
        """The logits as a bf16 head outputs them, before a loss casts them to fp32: half `logits_bytes`."""
        return self.logits_bytes // 2


#: Fp32 copies of the logits PyTorch's cross-entropy holds at its highest, on bf16 logits cast to fp32 (a
#: GPT's usual loss): log-softmax's saved output, the loss's gradient and log-softmax's gradient. Measured
#: with the lab's counter on one process (tests/test_lab_timeline.py); lessons 14 and 16 size a GPT's loss
#: by it.
CROSS_ENTROPY_COPIES = 3

#: How attention runs: "unfused" stores each head's s × s matrices; "flash" (FlashAttention) computes them
#: in tiles in on-chip memory and never stores them, in the forward pass or the backward.
ATTENTION = ("unfused", "flash")


def layer_bytes(model: Transformer, *, attention: str = "unfused") -> int:
    """Activation bytes one layer keeps for its backward pass, with no recomputation (Korthikanti eq. 1).

    Unfused: s·b·h·(34 + 5·a·s/h), kept in integers; "flash" keeps the 34·s·b·h alone.
    """
    checks.instance("model", model, Transformer, "an activations.Transformer")
    checks.choice("attention", attention, ATTENTION)
    s, b, h, a = model.seq_len, model.micro_batch, model.hidden, model.heads
    scores = 5 * a * s * s * b if attention == "unfused" else 0
    return 34 * s * b * h + scores


#: Recomputation choices: keep everything, recompute attention's s × s matrices only, or whole layers.
RECOMPUTE = ("none", "selective", "full")


def activation_bytes(model: Transformer, recompute: str = "none", *, attention: str = "unfused") -> int:
    """Peak activation bytes per GPU: what the layers keep plus what one layer rebuilds (Korthikanti et al.).

    "selective" keeps 34·s·b·h per layer and rebuilds one layer's s × s matrices (5·a·s²·b) at a time;
    "full" keeps each layer's 2·s·b·h input and rebuilds one whole layer at a time (the paper's table
    counts only what is kept). With attention="flash" no s × s matrix is ever stored, so "selective"
    keeps and rebuilds the same as "none".
    """
    checks.instance("model", model, Transformer, "an activations.Transformer")
    checks.choice("recompute", recompute, RECOMPUTE)
    one_layer = layer_bytes(model, attention=attention)
    kept = 34 * model.seq_len * model.micro_batch * model.hidden  # the part selective recomputation keeps
    if recompute == "selective":
        return model.layers * kept + (one_layer - kept)
    if recompute == "full":
        return model.layers * 2 * model.seq_len * model.micro_batch * model.hidden + one_layer
    return model.layers * one_layer


def zero_paper_estimate(model: Transformer) -> int:
    """The ZeRO paper's rule of thumb: 12·h·b·s·L activation values of 2 bytes each."""
    checks.instance("model", model, Transformer, "an activations.Transformer")
    return 2 * 12 * model.hidden * model.micro_batch * model.seq_len * model.layers


def least_recomputation(
    model: Transformer, setup: Setup, *, attention: str = "unfused"
) -> tuple[str, Stage, Fraction] | None:
    """The least recomputation (none, then selective, then full) that lets some stage fit
    `setup.gpu_memory`, the lowest stage that then fits, and the bytes per GPU it needs; None if none does."""
    checks.instance("model", model, Transformer, "an activations.Transformer")
    checks.choice("attention", attention, ATTENTION)
    held = memory.per_stage(setup)
    for recompute in RECOMPUTE:
        act = activation_bytes(model, recompute, attention=attention)
        stage = memory.lowest_fitting(held, setup.gpu_memory, act)
        if stage is not None:
            return recompute, stage, held[stage].total + act
    return None


#: GPT-2 XL (1.5 B), the ZeRO paper's activation example: sequence 1K, batch 32.
GPT2_XL = Transformer(layers=48, hidden=1600, heads=25, seq_len=1024, micro_batch=32)
