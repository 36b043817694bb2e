"""How `ds_estimator.explain_zero2` and `explain_zero3` show DeepSpeed's printed lines taken apart: each
column's terms (`Term`), and the lines as a table (`Explained`), with or without the host column."""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING

from .. import units

if TYPE_CHECKING:
    from .ds_estimator import Estimate


@dataclass(frozen=True)
class Term:
    """One part of a column of DeepSpeed's estimate: what it counts, its arithmetic, and its bytes."""

    what: str  #: in words, e.g. "fp16 weights, whole on every GPU"
    formula: str  #: DeepSpeed's arithmetic with this setup's numbers, Ψ left as Ψ
    nbytes: Fraction  #: exact, before DeepSpeed's int()


@dataclass(frozen=True, repr=False)
class Explained:
    """A list of estimate lines, each with the terms that add up to its GPU and its host column."""

    lines: tuple[tuple[Estimate, tuple[Term, ...], tuple[Term, ...]], ...]  #: (line, GPU terms, host terms)
    host: bool = True  #: whether the host column is shown (`gpu_only` leaves it out)

    def cells(self, bold=lambda text: f"**{text}**") -> list[list[str]]:
        """A header row, then per line: its options, and each column's terms and total, one per text line."""
        body = [
            [
                est.options.replace(" ,", ","),
                _column(gpu, est.gpu_bytes, bold),
                *([_column(host, est.cpu_bytes, bold)] if self.host else []),
            ]
            for est, gpu, host in self.lines
        ]
        return [["options", "per GPU", *(["host memory per node"] if self.host else [])], *body]

    def only(self, options: str) -> Explained:
        """The lines whose options, as DeepSpeed prints them, contain `options` (e.g. "zero_init=1")."""
        return replace(self, lines=tuple(line for line in self.lines if options in line[0].options))

    def gpu_only(self) -> Explained:
        """The same lines with their GPU column alone, for a page that takes the host column up later."""
        return replace(self, host=False)

    def _repr_markdown_(self) -> str:
        head, *body = self.cells()
        table = [head, ["---"] * len(head), *body]
        return "\n".join("| " + " | ".join(c.replace("\n", "<br>") for c in r) + " |" for r in table)

    def _repr_html_(self) -> str:
        from html import escape  # only notebooks render HTML

        head, *body = self.cells(lambda text: f"\0{text}\1")  # marks kept through escape()

        def cell(tag: str, text: str) -> str:
            marked = (
                escape(text, quote=False).replace("\n", "<br>").replace("\0", "<b>").replace("\1", "</b>")
            )
            return f"<{tag}>{marked}</{tag}>"

        rows = ["<tr>" + "".join(cell("th", c) for c in head) + "</tr>"]
        rows += ["<tr>" + "".join(cell("td", c) for c in r) + "</tr>" for r in body]
        return f"<table class='zero-estimate'>{''.join(rows)}</table>"

    def __repr__(self) -> str:
        return "\n\n".join("\n".join(r) for r in self.cells())


def _column(terms: tuple[Term, ...], total: int, bold) -> str:
    """Terms one per line, then the total in GB (unless one term already gave it) and as DeepSpeed prints it
    (GiB, labelled "GB")."""
    parts = [f"{t.what}: {t.formula} = {units.format_bytes(t.nbytes)}" for t in terms]
    gib, whole = units.format_number(Fraction(total, units.GiB), 2), f"= {units.format_bytes(total)} "
    return "\n".join([*parts, (whole if len(parts) > 1 else "") + "= " + bold(f"{gib} GiB")])
