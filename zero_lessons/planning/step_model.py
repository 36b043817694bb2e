"""What a training step walks through: a model as layers, with their parameter tensors and activations.

The step's timeline needs two facts per layer and nothing else: how many elements each parameter
tensor holds (frameworks gather, bucket and keep tensors whole or split them one tensor at a time)
and how many activation bytes the layer's forward leaves for its backward.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import checks
from . import activations

#: Most activation bytes one layer may save: an exabyte, far past any card.
MAX_ACTIVATION_BYTES = 10**18


@dataclass(frozen=True)
class Layer:
    """One layer the step visits in turn: its parameter tensors and the activations it saves."""

    name: str  #: what a learner calls it, e.g. "block 3"
    tensors: tuple[int, ...]  #: elements of each parameter tensor, in the order the model creates them
    activations: int = 0  #: bytes its forward saves for its backward, without checkpointing
    checkpointed: int = 0  #: bytes it keeps when checkpointed (its input); its backward reruns its forward

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"layer name must be non-empty text such as 'block 3', got {self.name!r}")
        if not isinstance(self.tensors, (tuple, list)):
            raise TypeError(
                f"tensors of {self.name} must be a tuple of element counts, got {type(self.tensors).__name__}"
            )
        sizes = tuple(
            checks.whole(f"tensors of {self.name}", n, high=checks.MAX_PARAMS) for n in self.tensors
        )
        object.__setattr__(self, "tensors", sizes)
        for field in ("activations", "checkpointed"):
            value = checks.whole(
                f"{field} of {self.name}", getattr(self, field), low=0, high=MAX_ACTIVATION_BYTES
            )
            object.__setattr__(self, field, value)

    @property
    def params(self) -> int:
        """Parameters in this layer."""
        return sum(self.tensors)

    @property
    def largest(self) -> int:
        """Elements of its largest tensor (0 for a layer without parameters)."""
        return max(self.tensors, default=0)


@dataclass(frozen=True)
class Model:
    """A model as the step sees it: its layers in forward order."""

    name: str  #: e.g. "GPT 32×4096"
    layers: tuple[Layer, ...]  #: in the order the forward pass runs them
    #: Elements of the first layer's largest tensor that an output layer after the last one reuses (a tied
    #: embedding), 0 for none. The output layer's backward makes a gradient for it, which autograd holds until
    #: the first layer's backward adds its own: one more unreduced gradient through the whole backward pass.
    tied: int = 0

    def __post_init__(self):
        if not isinstance(self.layers, (tuple, list)) or not self.layers:
            raise ValueError(f"layers must be a non-empty tuple of Layer, got {self.layers!r}")
        for layer in self.layers:
            if not isinstance(layer, Layer):
                raise TypeError(f"layers must hold Layer objects, got {type(layer).__name__}")
        object.__setattr__(self, "layers", tuple(self.layers))
        checks.params(self.params)  # at least one parameter, at most the exact model's bound
        tied = checks.whole("tied", self.tied, low=0, high=self.layers[0].largest)
        if tied and tied not in self.layers[0].tensors:
            raise ValueError(
                f"tied must be 0 or the size of one of {self.layers[0].name}'s tensors, got {tied:,}"
            )
        object.__setattr__(self, "tied", tied)

    @property
    def params(self) -> int:
        """Ψ: parameters in all layers."""
        return sum(layer.params for layer in self.layers)


def block_tensors(hidden: int) -> tuple[int, ...]:
    """A GPT-2 block's tensors in creation order: norm, attention (qkv, out), norm, MLP (up, down)."""
    h = hidden
    return (h, h, 3 * h * h, 3 * h, h * h, h, h, h, 4 * h * h, 4 * h, 4 * h * h, h)


def transformer_model(
    shape: activations.Transformer, *, attention: str = "unfused", head: bool = False
) -> Model:
    """A decoder-only transformer: a tied embedding, then blocks saving what Korthikanti et al. count.

    Each block saves `activations.layer_bytes(shape, attention=attention)`: 34·s·b·h + 5·a·s²·b with
    "unfused" attention, which stores the s × s matrices; 34·s·b·h with "flash" (FlashAttention), which
    never does. Checkpointed, a block keeps only its 2·s·b·h input. Ψ here is `shape.params` plus 13·h
    per block for biases and norms, which `Transformer.params` rounds away; the final norm and the logits
    are left out. `head` counts the tied output layer's gradient for the embedding's weight (`Model.tied`).
    """
    if not isinstance(shape, activations.Transformer):
        raise TypeError(f"shape must be an activations.Transformer, got {type(shape).__name__}")
    tied = shape.vocab * shape.hidden if checks.flag("head", head) else 0
    saved = activations.layer_bytes(shape, attention=attention)
    s, b, h = shape.seq_len, shape.micro_batch, shape.hidden
    block = block_tensors(h)
    blocks = tuple(Layer(f"block {i}", block, saved, 2 * s * b * h) for i in range(1, shape.layers + 1))
    name = f"GPT {shape.layers}×{h}" + (" with its tied output layer" if head else "")
    return Model(name, (Layer("embedding", (shape.vocab * h,)), *blocks), tied)


def layered_model(tensors, saved=None, checkpointed=None, *, name: str = "custom") -> Model:
    """A model from plain lists: each layer's tensor sizes and the activation bytes each saves (default 0)."""
    if not isinstance(tensors, (tuple, list)) or not tensors:
        raise ValueError(
            f"tensors must be a non-empty list with one tuple of sizes per layer, got {tensors!r}"
        )
    count = len(tensors)
    saved = [0] * count if saved is None else list(saved)
    kept = [0] * count if checkpointed is None else list(checkpointed)
    for field, values in (("saved", saved), ("checkpointed", kept)):
        if len(values) != count:
            raise ValueError(f"{field} must give one value per layer ({count}), got {len(values)}")
    layers = tuple(
        Layer(f"layer {i + 1}", tuple(sizes) if isinstance(sizes, (tuple, list)) else sizes, a, c)
        for i, (sizes, a, c) in enumerate(zip(tensors, saved, kept, strict=True))
    )
    return Model(name, layers)
