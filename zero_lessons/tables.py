"""Small tables of text for a notebook: the same rows as Markdown and as HTML, every cell escaped in HTML."""

from __future__ import annotations

from html import escape

from . import checks


def _text_rows(rows: object) -> list[list[str]]:
    """`rows` checked: a header row, then body rows, all of text and all the same width."""
    if (
        not isinstance(rows, (list, tuple))
        or not rows
        or not all(
            isinstance(r, (list, tuple)) and len(r) == len(rows[0]) and all(isinstance(c, str) for c in r)
            for r in rows
        )
    ):
        raise TypeError(
            f"rows must be a header row and body rows of text, all as wide, got {checks.kind(rows)}"
        )
    return [list(row) for row in rows]


def markdown(rows: list[list[str]], align: list[str]) -> str:
    """A Markdown table: the first row is the header; `align` gives each column's rule, "---" or "--:"."""
    head, *body = _text_rows(rows)
    if (
        not isinstance(align, (list, tuple))
        or len(align) != len(head)
        or any(a not in ("---", "--:") for a in align)
    ):
        raise ValueError(f'align must be {len(head)} rules, each "---" or "--:", got {checks.shown(align)}')
    return "\n".join("| " + " | ".join(r) + " |" for r in [head, list(align), *body])


def html(rows: list[list[str]], css_class: str = "") -> str:
    """An HTML table: the first row in `th` cells, the others in `td`; `css_class` on the table if given."""
    head, *body = _text_rows(rows)
    checks.instance("css_class", css_class, str, "text")
    cells = [f"<tr>{''.join(f'<th>{escape(c)}</th>' for c in head)}</tr>"]
    cells += [f"<tr>{''.join(f'<td>{escape(c)}</td>' for c in r)}</tr>" for r in body]
    return (f"<table class='{escape(css_class)}'>" if css_class else "<table>") + "".join(cells) + "</table>"
