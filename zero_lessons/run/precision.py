"""bf16 against fp16 in numbers, read from torch.finfo: range, precision, and what loss scaling is for.
Imports torch inside its functions only."""

from __future__ import annotations

from dataclasses import dataclass

#: The formats compared, by torch's dtype name, with their exponent and mantissa bits (IEEE and Google Brain).
BITS = {"float32": (8, 23), "bfloat16": (8, 7), "float16": (5, 10)}


def largest(name: str) -> int:
    """The largest finite value of the format `name`, from its bits alone: (2 - 2**-m) * 2**(2**(e-1) - 1)."""
    exponent, mantissa = BITS[name]
    return (2 ** (mantissa + 1) - 1) * 2 ** (2 ** (exponent - 1) - 1 - mantissa)


@dataclass(frozen=True)
class Format:
    """One floating-point format's range and precision."""

    name: str  #: torch's dtype name
    exponent_bits: int  #: sets the range
    mantissa_bits: int  #: sets the precision
    largest: float  #: the largest finite value
    smallest_normal: float  #: the smallest positive normal value: full precision down to here
    smallest_subnormal: float  #: the smallest positive value at all, with one bit of precision left
    epsilon: float  #: the gap between 1 and the next value


@dataclass(frozen=True, repr=False)
class Formats:
    """The formats as a table."""

    rows: tuple[Format, ...]  #: float32, bfloat16, float16

    def get(self, name: str) -> Format:
        """The format called `name` ("float16", ...)."""
        return next(f for f in self.rows if f.name == name)

    def cells(self) -> list[list[str]]:
        """The table as strings, values to 5 significant digits."""
        return [
            [f.name, str(f.exponent_bits), str(f.mantissa_bits)]
            + [f"{v:.5g}" for v in (f.largest, f.smallest_normal, f.smallest_subnormal, f.epsilon)]
            for f in self.rows
        ]

    def __repr__(self) -> str:
        return "\n".join("  ".join(row) for row in self.cells())

    def _repr_markdown_(self) -> str:
        head = [
            "format",
            "exponent bits",
            "mantissa bits",
            "largest",
            "smallest normal",
            "smallest subnormal",
        ]
        head.append("epsilon")
        lines = [head, ["---"] * len(head), *self.cells()]
        return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def formats() -> Formats:
    """float32, bfloat16 and float16, each read from torch.finfo."""
    import torch

    rows = []
    for name, (exponent, mantissa) in BITS.items():
        info = torch.finfo(getattr(torch, name))
        # Below the smallest normal, subnormals drop one bit of precision per halving, down to tiny * eps.
        rows.append(Format(name, exponent, mantissa, info.max, info.tiny, info.tiny * info.eps, info.eps))
    return Formats(tuple(rows))


def fp16_on_cpu() -> bool:
    """Whether this CPU has oneDNN's fp16 kernels, which DeepSpeed's CPU accelerator needs for fp16."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())


def as_dtype(value: float, name: str) -> float:
    """`value` rounded to the format `name`: 0.0 when it underflows, inf when it overflows."""
    import torch

    return torch.tensor(value, dtype=getattr(torch, name)).item()
