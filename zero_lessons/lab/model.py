"""The lab's model and its training run, stated once: ranks train it, predictions count it. No torch."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from math import prod

Shape = tuple[int, ...]


@dataclass(frozen=True)
class LabModel:
    """A small MLP (Linear, ReLU, ..., Linear, with biases) and how each rank trains it."""

    widths: tuple[int, ...] = (
        13,
        30,
        30,
        5,
    )  #: layer widths; 2 and 4 ranks do not divide every tensor evenly
    batch: int = 8  #: samples per rank per step
    batch_seed: int = 100  #: rank r draws its batch with seed batch_seed + r, so ranks see different data
    init_seed: int = 0  #: every rank initialises the weights with this seed, so all start equal
    lr: float = 1e-3  #: Adam's learning rate
    steps: int = (
        3  #: steps per mode; the last is measured, when Adam's state exists and DeepSpeed knows the order
    )

    def __post_init__(self):
        if len(self.widths) < 2 or not all(isinstance(w, int) and w >= 1 for w in self.widths):
            raise ValueError(f"widths must be two or more whole numbers ≥ 1, got {self.widths!r}")

    @property
    def shapes(self) -> list[Shape]:
        """Parameter shapes in order: an (out, in) weight and an (out,) bias per layer."""
        out: list[Shape] = []
        for a, b in pairwise(self.widths):
            out += [(b, a), (b,)]
        return out

    @property
    def sizes(self) -> list[int]:
        """Elements of each parameter, in order."""
        return [prod(shape) for shape in self.shapes]

    @property
    def layers(self) -> list[list[int]]:
        """Parameter sizes grouped by layer: [weight, bias] for each Linear."""
        sizes = self.sizes
        return [sizes[i : i + 2] for i in range(0, len(sizes), 2)]

    @property
    def param_count(self) -> int:
        """Ψ, every parameter's elements (1,505 for the lab's model)."""
        return sum(self.sizes)

    def seed(self, rank: int) -> int:
        """The seed of `rank`'s batch."""
        return self.batch_seed + rank


#: The model every lab rank trains and every prediction counts.
MODEL = LabModel()
