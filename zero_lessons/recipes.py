"""Recipes: how many bytes each parameter costs in weights, gradients and optimizer state."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from . import checks, units
from .stages import STATES

Bytes = int | Fraction  # bytes per parameter; a Fraction for 4-bit or other odd widths


@dataclass(frozen=True)
class Part:
    """One array kept per parameter, such as "fp32 momentum"."""

    label: str  #: what the array is, e.g. "fp16 weights"
    state: str  #: which state it belongs to: "weights", "gradients" or "optimizer"
    nbytes: Bytes  #: bytes it stores per parameter

    def __post_init__(self):
        checks.instance("label", self.label, str, "text such as 'fp16 weights'")
        checks.choice("state", self.state, STATES)
        nbytes = checks.bytes_per_param(f"{self.label} bytes", self.nbytes)
        object.__setattr__(self, "nbytes", units.tidy(nbytes))


@dataclass(frozen=True)
class Recipe:
    """Bytes per parameter for each kind of training state, built from named parts."""

    name: str  #: short key, e.g. "mixed-adam"
    parts: tuple[Part, ...]  #: the arrays one parameter costs, each tagged with its state
    source: str = ""  #: where this convention comes from

    def __post_init__(self):
        checks.instance("name", self.name, str, "text such as 'mixed-adam'")
        checks.instance("parts", self.parts, (tuple, list), "a tuple of Part")
        if not self.parts:
            raise ValueError(f"parts must hold at least one Part, for recipe {checks.shown(self.name)}")
        for part in self.parts:
            checks.instance("each of parts", part, Part, "a Part")
        object.__setattr__(self, "parts", tuple(self.parts))
        by_state = {
            s: sum((Fraction(p.nbytes) for p in self.parts if p.state == s), Fraction(0)) for s in STATES
        }
        for state, total in by_state.items():  # many small parts must not add up past the bound either
            checks.bytes_per_param(f"{state} bytes", total)
        # Kept, not recomputed: the explorer asks for these on every redraw.
        object.__setattr__(self, "_by_state", {s: units.tidy(total) for s, total in by_state.items()})
        object.__setattr__(self, "_total", units.tidy(sum(by_state.values(), Fraction(0))))

    def bytes_for(self, state: str) -> Bytes:
        """Bytes per parameter that `state` costs."""
        return self._by_state[checks.choice("state", state, STATES)]

    @property
    def weight_bytes(self) -> Bytes:
        """Bytes per parameter of the weights the forward pass reads (2 for fp16)."""
        return self.bytes_for("weights")

    @property
    def grad_bytes(self) -> Bytes:
        """Bytes per parameter of the gradients the backward pass writes."""
        return self.bytes_for("gradients")

    @property
    def optimizer_bytes(self) -> Bytes:
        """Bytes per parameter of optimizer state: the paper's K."""
        return self.bytes_for("optimizer")

    @property
    def total_bytes(self) -> Bytes:
        """Bytes per parameter of all model state, the 16 in "16Ψ"."""
        return self._total

    def summary(self) -> str:
        """One line such as "mixed-adam: 2 + 2 + 12 = 16 B/param"."""
        return (
            f"{self.name}: {self.weight_bytes} + {self.grad_bytes} + {self.optimizer_bytes} "
            f"= {self.total_bytes} B/param"
        )


#: What the model's functions accept as a recipe: a Recipe, or a preset's name such as "mixed-adam".
RecipeLike = Recipe | str


def custom(weight_bytes, grad_bytes, optimizer_bytes, name: str = "custom") -> Recipe:
    """A recipe from three byte counts; each must be a finite number from 0 to 1,024."""
    values = {"weight_bytes": weight_bytes, "grad_bytes": grad_bytes, "optimizer_bytes": optimizer_bytes}
    exact = {key: units.tidy(checks.bytes_per_param(key, value)) for key, value in values.items()}
    return Recipe(
        name,
        (
            Part("weights", "weights", exact["weight_bytes"]),
            Part("gradients", "gradients", exact["grad_bytes"]),
            Part("optimizer state", "optimizer", exact["optimizer_bytes"]),
        ),
        source="user supplied",
    )


_MASTER = Part("fp32 master weights", "optimizer", 4)
_MOMENTUM = Part("fp32 momentum", "optimizer", 4)
_VARIANCE = Part("fp32 variance", "optimizer", 4)
_FP16_W = Part("fp16 weights", "weights", 2)
_FP16_G = Part("fp16 gradients", "gradients", 2)
_FP32_W = Part("fp32 weights", "weights", 4)
_FP32_G = Part("fp32 gradients", "gradients", 4)

#: The article's and the ZeRO paper's mixed-precision Adam: 2 + 2 + 12 = 16 B.
MIXED_ADAM = Recipe(
    "mixed-adam",
    (_FP16_W, _FP16_G, _MASTER, _MOMENTUM, _VARIANCE),
    "ZeRO paper (Rajbhandari et al. 2019, sec. 3.1), K = 12; the article's worked example",
)
#: Megatron-LM's accounting: gradients accumulate in fp32, so 2 + 4 + 12 = 18 B.
MEGATRON_18 = Recipe(
    "megatron-18",
    (
        Part("bf16 weights", "weights", 2),
        Part("fp32 main gradients", "gradients", 4),
        _MASTER,
        _MOMENTUM,
        _VARIANCE,
    ),
    "Megatron-LM distributed optimizer and guides that follow it",
)
#: ZeRO-Infinity's count: an fp32 gradient copy kept with the optimizer, 2 + 2 + 16 = 20 B.
INFINITY_20 = Recipe(
    "infinity-20",
    (_FP16_W, _FP16_G, _MASTER, _MOMENTUM, _VARIANCE, Part("fp32 gradients", "optimizer", 4)),
    "ZeRO-Infinity paper (Rajbhandari et al. 2021, sec. 3)",
)
#: Plain fp32 training with Adam: 4 + 4 + 8 = 16 B, no separate master copy.
FP32_ADAM = Recipe(
    "fp32-adam",
    (_FP32_W, _FP32_G, _MOMENTUM, _VARIANCE),
    "torch.optim.Adam on fp32 weights",
)
#: DeepSpeed's ZeRO stages 1 and 2 training in fp32: stage_1_and_2.py still clones an fp32 master partition
#: beside the fp32 weights, so 4 + 4 + 12 = 20 B (not a preset: the lessons' recipes are the paper's counts).
DEEPSPEED_FP32 = Recipe(
    "deepspeed-fp32",
    (_FP32_W, _FP32_G, _MASTER, _MOMENTUM, _VARIANCE),
    "DeepSpeed 0.19.8, runtime/zero/stage_1_and_2.py: single_partition_of_fp32_groups is a clone",
)
#: Mixed precision with 8-bit Adam moments: 2 + 2 + (4 + 1 + 1) = 10 B.
MIXED_ADAM_8BIT = Recipe(
    "mixed-adam-8bit",
    (_FP16_W, _FP16_G, _MASTER, Part("int8 momentum", "optimizer", 1), Part("int8 variance", "optimizer", 1)),
    "8-bit optimizers (Dettmers et al. 2021); block-wise scales left out",
)
#: Mixed precision with SGD and momentum: 2 + 2 + (4 + 4) = 12 B.
MIXED_SGD = Recipe(
    "mixed-sgd-momentum", (_FP16_W, _FP16_G, _MASTER, _MOMENTUM), "SGD with momentum under mixed precision"
)

#: Every named recipe, by key.
PRESETS: dict[str, Recipe] = {
    r.name: r for r in (MIXED_ADAM, MEGATRON_18, INFINITY_20, FP32_ADAM, MIXED_ADAM_8BIT, MIXED_SGD)
}


def get(name: RecipeLike) -> Recipe:
    """The preset called `name` (a Recipe passes through unchanged)."""
    if isinstance(name, Recipe):
        return name
    return PRESETS[checks.choice("recipe", name, PRESETS)]
