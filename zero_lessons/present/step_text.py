"""A step's timeline as text: a table of phases, even runs folded, then the peak and each part's reason.

`zero-lessons step` prints this. A 32-layer model has 71 phases; most are layers that each add
the same bytes (one more layer's activations in forward, one fewer in backward; under ZeRO-3 a
bucket that fills every other layer), so a run whose changes repeat every two phases is shown by
its first two and last two rows and one line saying what the phases in between add. In such a
run the even and the odd phases each rise or fall evenly, so its highest point is among the rows
shown; the step's peak row is never folded (`every=True` shows all rows).
"""

from __future__ import annotations

from .. import checks, units
from ..planning.step_choices import paper_bytes, paper_stage
from ..planning.step_parts import AT_THE_LOSS, KINDS, Timeline

#: Column headings for the transient kinds of part; the three model states share one column.
HEADINGS = {
    "activations": "activations",
    "gathered parameters": "gathered",
    "unreduced gradients": "unreduced",
    "gradient buckets": "buckets",
    "fp32 gradients": "fp32 grads",
    "optimizer temporaries": "opt temps",
}
#: Fewest phases folded into one line (folding fewer would save no room).
MIN_FOLDED = 3


def timeline_text(line: Timeline, unit: str = "GB", *, every: bool = False, loss: tuple | None = None) -> str:
    """The timeline as text: a heading, the phases (even runs folded unless `every`), the peak's parts; with
    `loss`, (fp32 copies of the logits, their bytes), the loss counted after the forward pass and the peak it
    leaves."""
    checks.instance("line", line, Timeline, "a planning.step Timeline")
    unit, every = units.unit_name(unit), checks.flag("every", every)
    show = lambda b: fixed(units.in_unit(b, unit))  # noqa: E731
    paper = paper_bytes(line.model.params, line.gpus, line.framework, line.recipe)
    kept = "every layer checkpointed" if line.checkpointing else "no activation checkpointing"
    head = [
        f"{line.framework.label} · {line.model.name} (Ψ = {units.format_count(line.model.params)}) · "
        f"{line.gpus:,} GPUs · {line.recipe.name} · {kept}",
        f"one rank's memory at each phase of one step, in {unit}; "
        f"the paper's table ({paper_stage(line.framework).label}): {show(paper)} {unit}",
        "",
    ]
    tail = [] if loss is None else ["", *loss_lines(line, *loss, show, unit)]
    return "\n".join([*head, phase_table(line, show, every), "", *peak_lines(line, show, unit, paper), *tail])


def loss_lines(line: Timeline, copies: int, loss: int, show, unit: str) -> list[str]:
    """The loss, held beside all that the last forward phase holds, and the step's peak once it is counted."""
    end = line.as_loss_runs
    held = end.total + checks.byte_count("loss", loss)
    counted = f"{show(end.total)} + {show(loss)} = {show(held)} {unit}"
    name = line.peak_name_with_loss(loss)
    still = "" if name == AT_THE_LOSS else "still "
    verdict = f"peak, loss counted: {still}{name}, {show(line.peak_with_loss(loss))} {unit} per rank"
    return [f"the loss: {copies:,} fp32 copies of the logits, held after {end.name}: {counted}", verdict]


def fixed(value) -> str:
    """`value` with exactly three decimals (rounded half away from 0), or "-" for nothing at all."""
    if value == 0:
        return "-"
    whole, _, part = units.format_number(value, 3).partition(".")
    return f"{whole}.{part:0<3}"


def peak_lines(line: Timeline, show, unit: str, paper) -> list[str]:
    """The peak's name and total, then each of its parts with its reason, one line each."""
    peak = line.peak
    above = peak.total - paper
    compared = f"{show(abs(above))} {unit} {'above' if above >= 0 else 'below'} the paper's table"
    return [
        f"peak: {peak.name}, {show(peak.total)} {unit} per rank ({compared}), made of:",
        *(f"  {p.kind:<22} {show(p.nbytes):>9}  {p.reason}" for p in peak.parts),
    ]


def phase_table(line: Timeline, show, every: bool) -> str:
    """Phases as rows: total, model state, then each transient kind held somewhere in the step."""
    kinds = [k for k in HEADINGS if any(phase.bytes_of(k) for phase in line.phases)]
    heads = ["phase", "total", "model state", *(HEADINGS[k] for k in kinds)]
    rows = [
        [
            phase.name,
            show(phase.total),
            show(phase.model_state),
            *(show(phase.bytes_of(k)) for k in kinds),
            "← peak" if i == line.peak_index else "",
        ]
        for i, phase in enumerate(line.phases)
    ]
    shown = rows if every else fold(line, rows, show)
    width = [max(len(row[c]) for row in [heads, *rows]) for c in range(len(heads))]
    out = []
    for row in [heads, *shown]:
        if isinstance(row, str):  # a folded run's line
            out.append(row)
            continue
        cells = [
            row[0].ljust(width[0]),
            *(cell.rjust(w) for cell, w in zip(row[1:], width[1:], strict=False)),
        ]
        out.append("  ".join([*cells, *row[len(heads) :]]).rstrip())
    return "\n".join(out)


def fold(line: Timeline, rows: list, show) -> list:
    """`rows` with the middle of each run of one phase kind whose changes repeat every two phases folded.

    In such a run, phase k + 2 holds the same bytes more (or less) than phase k, for every k: the
    even and the odd phases each rise or fall evenly, so the run's highest point is among its first
    two or last two rows, which stay shown. The peak's row is never folded.
    """
    phases, out, i = line.phases, [], 0

    def change(a: int) -> tuple:
        return tuple(phases[a + 1].bytes_of(k) - phases[a].bytes_of(k) for k in KINDS)

    while i < len(phases):
        j = i
        while (
            j + 1 < len(phases)
            and phases[j + 1].kind == phases[i].kind
            and line.peak_index not in (j, j + 1)
            and (j - i < 2 or change(j) == change(j - 2))
        ):
            j += 1
        if j - i - 3 >= MIN_FOLDED:
            out += [*rows[i : i + 2], folded_line(phases, i + 1, j - 1, change, show), *rows[j - 1 : j + 1]]
        else:
            out += rows[i : j + 1]
        i = j + 1
    return out


def folded_line(phases, first: int, last: int, change, show) -> str:
    """One line for the phases strictly between `first` and `last`: how many, and what each one adds."""

    def said(a: int) -> str:
        moved = [
            f"{'+' if d > 0 else '−'}{show(abs(d))} {k}" for k, d in zip(KINDS, change(a), strict=True) if d
        ]
        return ", ".join(moved) or "no change"

    each = (
        f"each {said(first)}"
        if change(first) == change(first + 1)
        else f"in turn {said(first)}; {said(first + 1)}"
    )
    return f"  ⋮ {last - first - 1} phases, {phases[first + 1].name} to {phases[last - 1].name}: {each}"
