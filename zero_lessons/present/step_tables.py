"""Memory over one step as tables for a lesson: what a rank holds at one phase, and each setup's peak.

Both show exact bytes rounded only here, in the unit asked for, and render as Markdown and HTML.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from .. import checks, units
from ..planning.step_parts import KINDS, Phase, Timeline


@dataclass(frozen=True, repr=False)
class Table:
    """A header and rows of text, shown as a Markdown or HTML table; numbers right-aligned."""

    head: tuple[str, ...]  #: the column names
    body: tuple[tuple[str, ...], ...]  #: one tuple per row, as wide as `head`
    numeric: tuple[bool, ...]  #: which columns hold numbers

    def _repr_markdown_(self) -> str:
        rule = tuple("--:" if n else "---" for n in self.numeric)
        return "\n".join("| " + " | ".join(r) + " |" for r in (self.head, rule, *self.body))

    def _repr_html_(self) -> str:
        def row(cells, tag):
            return "<tr>" + "".join(f"<{tag}>{escape(c)}</{tag}>" for c in cells) + "</tr>"

        return "<table>" + row(self.head, "th") + "".join(row(r, "td") for r in self.body) + "</table>"

    def __repr__(self) -> str:
        return "\n".join(" | ".join(r) for r in (self.head, *self.body))


def _shown(nbytes, unit: str, digits: int = 3) -> str:
    """Bytes in `unit` with thousands separators: whole bytes exact ("25,344"), any other unit to exactly
    `digits` decimals ("2.123", "1.000"), so a column's numbers line up."""
    value = units.in_unit(nbytes, unit)
    text = units.format_number(value, digits)
    whole, _, part = text.lstrip("-").partition(".")
    if unit != "B" or part:
        part = part.ljust(digits, "0")
    return ("-" if text.startswith("-") else "") + f"{int(whole):,}" + (f".{part}" if part else "")


def parts_table(phase: Phase, unit: str = "GB") -> Table:
    """Every part a rank holds at `phase`, grouped by kind (the kind named once, largest kind first, its parts
    largest first): its bytes and why it is there."""
    checks.instance("phase", phase, Phase, "a planning Phase, e.g. timeline(...).peak")
    unit = units.unit_name(unit)
    kinds = sorted({p.kind for p in phase.parts}, key=lambda k: (-phase.bytes_of(k), KINDS.index(k)))
    body = []
    for kind in kinds:
        parts = sorted((p for p in phase.parts if p.kind == kind), key=lambda p: -p.nbytes)
        body += [("" if i else kind, _shown(p.nbytes, unit), p.reason) for i, p in enumerate(parts)]
    total = ("total", _shown(phase.total, unit), f"at {phase.name}")
    return Table(("kind", unit, "why it is there"), (*body, total), (False, True, False))


def peak_table(timelines, unit: str = "GB") -> Table:
    """Per timeline: model state before the optimizer step, the peak, where, and the peak's bytes beyond the
    three model states (what the paper's table leaves out)."""
    if not isinstance(timelines, (tuple, list)) or not timelines:
        raise TypeError(f"timelines must be a non-empty list of Timeline, got {checks.shown(timelines)}")
    unit = units.unit_name(unit)

    body = []
    for t in timelines:
        checks.instance("each timeline", t, Timeline, "a planning Timeline")
        state = t.phase("before optimizer step").model_state
        peak = t.peak
        body.append(
            (
                t.framework.label,
                str(t.gpus),
                "on" if t.checkpointing else "off",
                _shown(state, unit, 2),
                _shown(peak.total, unit, 2),
                peak.name,
                _shown(peak.total - peak.model_state, unit, 2),
            )
        )
    head = (
        "setup",
        "N",
        "checkpointing",
        f"model state {unit}",
        f"peak {unit}",
        "peak at",
        f"beyond model state {unit}",
    )
    return Table(head, tuple(body), (False, True, False, True, True, False, True))
