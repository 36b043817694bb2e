"""HTML for the explorer's advice and traffic views: markup lives here, not in the model or the planner."""

from __future__ import annotations

from html import escape

from .. import checks, units
from ..communication import StepTraffic
from ..planning.advice import Advice
from .table import StageTable

#: Inline styles: a table reads the same in JupyterLab, Voila, the book and on GitHub, with no stylesheet.
_TABLE = "border-collapse:collapse;margin:0.4em 0;font-variant-numeric:tabular-nums"
_CAPTION = "caption-side:top;text-align:left;font-style:italic;padding:0 0 4px;white-space:normal"
_CELL = "padding:3px 10px;white-space:nowrap;text-align:{};border-bottom:{}"


def table_start(css_class: str, caption: str | None = None) -> str:
    """The opening tag of a styled table of class `css_class`, with its caption if one is given."""
    checks.instance("css_class", css_class, str, "text")
    if caption is not None:
        checks.instance("caption", caption, str, "text or None")
    head = f"<table class='{escape(css_class)}' style='{_TABLE}'>"
    return head + (f"<caption style='{_CAPTION}'>{escape(caption)}</caption>" if caption else "")


def table_row(cells: list[str], *, left: int, header: bool = False, attrs: str = "") -> str:
    """One table row: the first `left` (text) columns aligned left, numbers right, cells padded apart."""
    checks.instance("cells", cells, (list, tuple), "a list of text")
    for cell in cells:
        checks.instance("cells", cell, str, "a list of text")
    checks.whole("left", left, low=0, high=len(cells))
    checks.flag("header", header)
    checks.instance("attrs", attrs, str, "text")
    tag, rule = ("th", "2px solid #999") if header else ("td", "1px solid #ddd")
    return (
        f"<tr{attrs}>"
        + "".join(
            f"<{tag} style='{_CELL.format('left' if i < left else 'right', rule)}'>{escape(c)}</{tag}>"
            for i, c in enumerate(cells)
        )
        + "</tr>"
    )


def advice_html(advice: Advice) -> str:
    """The advice as HTML: the choice and its rule, then its reasons, warnings and ranking line as a list."""
    checks.instance("advice", advice, Advice, "an advice.Advice")
    items = [*advice.reasons, *(f"warning: {w}" for w in advice.warnings), advice.ranking_line]
    return (
        f"<div class='zero-advice'><b>{escape(advice.headline)}</b>. {escape(advice.explanation)}"
        f"<ul>{''.join(f'<li>{escape(item)}</li>' for item in items)}</ul></div>"
    )


def comm_html(rows: tuple[StepTraffic, ...], table: StageTable) -> str:
    """HTML table: each stage's traffic per GPU and step, set against its memory per GPU from `table`."""
    checks.instance("table", table, StageTable, "a StageTable")
    checks.instance("rows", rows, tuple, "a tuple of communication.StepTraffic, one per stage")
    for row in rows:
        checks.instance("rows", row, StepTraffic, "one communication.StepTraffic per stage")
    unit = table.unit
    head = ["stage", "sent per GPU", "bytes", "time", "memory per GPU"]
    body = [
        [
            r.stage.label,
            f"{units.format_number(r.elements / table.params)}Ψ",
            units.format_bytes(r.nbytes, unit),
            units.format_duration(r.seconds),
            units.format_bytes(row.held.total, unit),
        ]
        for r, row in zip(rows, table.rows, strict=True)
    ]
    rows_html = [table_row(head, left=1, header=True), *(table_row(cells, left=1) for cells in body)]
    return "\n".join([table_start("zero-comm"), *rows_html, "</table>"])
