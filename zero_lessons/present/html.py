"""HTML for the explorer's advice and traffic views: markup lives here, not in the model or the planner."""

from __future__ import annotations

from html import escape

from .. import checks, units
from ..communication import StepTraffic
from ..planning.advice import RULES, Advice
from .table import StageTable


def advice_html(advice: Advice) -> str:
    """The advice as HTML: the choice and its rule, then its reasons, warnings and ranking as a list."""
    checks.instance("advice", advice, Advice, "an advice.Advice")
    items = [*advice.reasons, *(f"warning: {w}" for w in advice.warnings), advice.ranking]
    return (
        f"<div class='zero-advice'><b>{escape(advice.headline)}</b>. {escape(RULES[advice.rule])}"
        f"<ul>{''.join(f'<li>{escape(item)}</li>' for item in items)}</ul></div>"
    )


def comm_html(rows: tuple[StepTraffic, ...], table: StageTable) -> str:
    """HTML table: each stage's traffic per GPU and step, set against its memory per GPU from `table`."""
    checks.instance("table", table, StageTable, "a StageTable")
    checks.instance("rows", rows, tuple, "a tuple of communication.StepTraffic, one per stage")
    for row in rows:
        checks.instance("rows", row, StepTraffic, "one communication.StepTraffic per stage")
    unit = table.unit
    cells = "".join(
        f"<tr><td>{r.stage.label}</td><td>{units.format_number(r.elements / table.params)}Ψ</td>"
        f"<td>{units.format_bytes(r.nbytes, unit)}</td>"
        f"<td>{units.format_number(r.seconds)} s</td>"
        f"<td>{units.format_bytes(row.held.total, unit)}</td></tr>"
        for r, row in zip(rows, table.rows, strict=True)
    )
    return (
        "<table class='zero-comm'><tr><th>stage</th><th>sent per GPU</th><th>bytes</th><th>time</th>"
        f"<th>memory per GPU</th></tr>{cells}</table>"
    )
