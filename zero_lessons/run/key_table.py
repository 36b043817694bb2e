"""The key table's Markdown: some of its columns as a table, and a helper that writes rows as Markdown."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, repr=False)
class Table:
    """Some of the key table's columns, shown as a Markdown table."""

    head: tuple[str, ...]  #: the column names
    rows: tuple[tuple[str, ...], ...]  #: the cells, one tuple per key

    def __repr__(self) -> str:
        return "\n".join(" | ".join(row) for row in [self.head, *self.rows])

    def _repr_markdown_(self) -> str:
        return markdown([list(self.head), *map(list, self.rows)])


def markdown(lines: list[list[str]]) -> str:
    """Rows as a Markdown table, the first row its head; a "|" inside a cell is escaped."""
    lines = [lines[0], ["---"] * len(lines[0]), *lines[1:]]
    return "\n".join("| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |" for line in lines)
