"""A worked answer to a predict-then-measure question: a table of the lab model's tensors, a formula per part.

`derivation` fills one in for each framework's rules; this module holds only its shape and the lab model's
tensors, so that every rule reads its numbers from the same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from .lab_link import COLLECTIVES, lab_model

Shape = tuple[int, ...]


@dataclass(frozen=True, repr=False)
class ByHand:
    """One rank's bytes and elements worked by hand: a table of the tensors, a formula per part, reasons."""

    head: tuple[str, ...]  #: the table's column names
    rows: tuple[tuple[str, ...], ...]  #: one per tensor (and padding), then the total
    held: dict[str, int]  #: bytes by kind of state: weights, gradients, optimizer
    sent: dict[str, int]  #: elements per collective in one step, 0 when it does not run
    #: each asked part's arithmetic, e.g. "4 B × 768 = 3,072 B", or "0 (…)" with why it does not run
    formulas: dict[str, str]
    steps: tuple[str, ...]  #: the reasons, as sentences with this case's numbers

    def values(self) -> dict[str, int]:
        """Every number a predict-then-measure question asks for, by part name."""
        return self.held | self.sent

    def working(self) -> str:
        """The reasons as one paragraph: the worked solution's text."""
        return " ".join(self.steps)

    def markdown(self) -> str:
        """The table of tensors, then one line per part with its arithmetic."""
        table = [
            "| " + " | ".join(self.head) + " |",
            "|" + "---|" * len(self.head),
            *("| " + " | ".join(row) + " |" for row in self.rows),
        ]
        return "\n".join(table) + "\n\n" + "\n".join(f"- `{k}` = {v}" for k, v in self.formulas.items())

    def __repr__(self) -> str:
        return self.markdown()

    def _repr_markdown_(self) -> str:
        return self.markdown()


def tensors() -> list[tuple[str, Shape]]:
    """The lab model's parameters in forward order, named as lesson 11 names them: W0, b0, W1, b1, ..."""
    out: list[tuple[str, Shape]] = []
    for n, (a, b) in enumerate(pairwise(lab_model()[0])):
        out += [(f"W{n}", (b, a)), (f"b{n}", (b,))]
    return out


def shape_text(shape: Shape) -> str:
    """A shape as the table writes it: "30 × 13" or "30"."""
    return " × ".join(map(str, shape))


def worked(head: tuple, rows: list, held: dict, sent: dict, steps: tuple) -> ByHand:
    """A ByHand from `held` (part: (bytes per element, elements)) and `sent` (collective: (elements, sum)).

    `sent` names every collective the question asks about, those that do not run with 0 and the reason."""
    ordered = {op: sent[op] for op in COLLECTIVES if op in sent}
    return ByHand(
        head,
        tuple(rows),
        {k: b * n for k, (b, n) in held.items()},
        {op: 0 for op in COLLECTIVES} | {op: n for op, (n, _) in ordered.items()},
        {k: f"{b} B × {n:,} = {b * n:,} B" for k, (b, n) in held.items()}
        | {op: text for op, (_, text) in ordered.items()},
        steps,
    )
