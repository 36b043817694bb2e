"""Where values come in: the checked `Setup`, and the one table of typed fields the CLI and the widgets read.

Parse and check once, at the edge; then the model's functions take a `Setup` and trust it. The
command line builds its flags from `FIELDS`, and the explorer reads its text boxes through the
same table, so "80GB" means the same thing, with the same error, wherever it is typed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from . import checks, recipes, units
from .recipes import MIXED_ADAM, Recipe


@dataclass(frozen=True)
class Setup:
    """One model on one cluster, every value checked once: what the model's functions take."""

    params: int  #: Ψ, the parameter count (1 to 10**15)
    gpus: int  #: N_d, the data-parallel degree (1 to a million)
    recipe: Recipe = MIXED_ADAM  #: bytes per parameter; a preset's name such as "megatron-18" is read too
    gpu_memory: Fraction | None = None  #: bytes each GPU holds, if known; text such as "80GB" is read too

    def __post_init__(self):
        object.__setattr__(self, "params", checks.params(self.params))
        object.__setattr__(self, "gpus", checks.gpus(self.gpus))
        object.__setattr__(self, "recipe", recipes.get(self.recipe))
        if self.gpu_memory is not None:
            object.__setattr__(self, "gpu_memory", units.as_bytes("gpu_memory", self.gpu_memory))


@dataclass(frozen=True)
class Field:
    """One value a learner types: what it means, and how its text becomes a checked value."""

    name: str  #: the model's name for it, e.g. "gpu_memory"
    help: str  #: what it is, with an example and its range
    read: Callable[[str, str], object]  #: (text, the name its errors use) -> the checked value

    @property
    def flag(self) -> str:
        """The command-line flag: "--gpu-memory"."""
        return "--" + self.name.replace("_", "-")

    def __call__(self, text: str, name: str | None = None):
        """`text` read as this field; errors name `name`, or the field."""
        return self.read(text, self.name if name is None else name)


def _params(text: str, name: str) -> int:
    return checks.whole(name, units.parse_count(text, field=name), high=checks.MAX_PARAMS)


def _gpus(text: str, name: str) -> int:
    return units.parse_whole(text, field=name, high=checks.MAX_GPUS)


def _gpus_per_node(text: str, name: str) -> int:
    return units.parse_whole(text, field=name, high=checks.MAX_GPUS_PER_NODE)


def _memory(text: str, name: str) -> Fraction:
    return units.as_bytes(name, text)


def _size_or_zero(text: str, name: str) -> Fraction:
    return units.as_bytes(name, text, zero=True)


def _unit(text: str, name: str) -> str:
    return units.unit_name(text)


def _bandwidth(text: str, name: str) -> Fraction:
    return units.parse_bandwidth(text, field=name)


def _bytes_per_param(text: str, name: str) -> Fraction:
    return checks.bytes_per_param(name, units.read_ratio(text, field=name, need="a number ≥ 0"))


#: The most of each GPU the advice can be asked to leave free: 90%.
MAX_HEADROOM = Fraction(9, 10)
_SHARE = "a share of each GPU from 0 to 0.9 (0% to 90%), such as 0.1, or text such as '10%'"


def _percent(text: str, name: str) -> Fraction:
    """Text such as "10%", "12.5%" or "0" as a share of a GPU: 1/10, 1/8 or 0."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be text such as '10%' or '0', got {checks.kind(text)}")
    number = text.strip().removesuffix("%").rstrip()
    try:
        share = units.read_decimal(number, field=name, forms="10%") / 100
    except ValueError:
        share = None
    bare = share is not None and share and not text.strip().endswith("%")
    if share is None or share > MAX_HEADROOM or bare:
        typed = 100 * share if bare else 0  # a bare 10 means 10%; a bare 0.1 likely meant a share of 10%
        hint = f" (write {number}%)" if 1 <= typed <= 100 * MAX_HEADROOM else ""
        hint += f" (as a share, {number} is {units.format_number(100 * typed)}%)" if 0 < typed < 1 else ""
        raise ValueError(
            f"{name} must be a percentage from 0% to 90%, such as 10% or 0, got {checks.shown(text)}{hint}"
        )
    return share


def headroom(value: object, name: str = "headroom") -> Fraction:
    """A share of each GPU to leave free, from 0 to 0.9: a number such as 0.1, or text such as "10%"."""
    if isinstance(value, str):
        return _percent(value, name)
    share = checks.exact(name, value, _SHARE)
    if not 0 <= share <= MAX_HEADROOM:
        raise ValueError(f"{name} must be {_SHARE}, got {checks.shown(share)}")
    return share


#: The three byte counts of a custom recipe, in the order `recipes.custom` takes them.
CUSTOM = ("weight_bytes", "grad_bytes", "optimizer_bytes")
_CUSTOM_HELP = {
    "weight_bytes": "weights",
    "grad_bytes": "gradients",
    "optimizer_bytes": "optimizer state (K)",
}

#: Every typed input, by name: what it means and how it is read.
FIELDS: dict[str, Field] = {
    field.name: field
    for field in (
        Field("params", 'parameter count Ψ, e.g. "7.5B" or "175 billion" (up to 10**15)', _params),
        Field("gpus", f"data-parallel GPUs N_d, typed as digits (1 to {checks.MAX_GPUS:,})", _gpus),
        Field("gpu_memory", 'memory per GPU, e.g. "80GB" (10**9 bytes) or "80GiB" (2**30 bytes)', _memory),
        Field(
            "activations",
            'activation memory per GPU, e.g. "12GB" (default 0: model state only)',
            _size_or_zero,
        ),
        Field("cpu_memory", 'host memory per node, to consider offload, e.g. "512GB"', _memory),
        Field(
            "gpus_per_node",
            f"GPUs sharing a node's host memory (1 to {checks.MAX_GPUS_PER_NODE:,}; default 8)",
            _gpus_per_node,
        ),
        Field("unit", "GB (10**9, default) or GiB (2**30)", _unit),
        Field(
            "headroom",
            'share of each GPU to leave free, as a percentage from 0 to 90: "10%" (default) or "0" '
            "(the article's bare rule)",
            _percent,
        ),
        Field("bandwidth", 'link speed per GPU, e.g. "100 Gb/s" (bits) or "25 GB/s" (bytes)', _bandwidth),
        *(
            Field(key, f"custom bytes per parameter for {what} (0 to 1,024)", _bytes_per_param)
            for key, what in _CUSTOM_HELP.items()
        ),
    )
}
