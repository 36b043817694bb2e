"""One offloaded step drawn against time: the GPU's passes, the PCIe trips and the CPU's Adam step, one lane
each, from `planning.offload_step.step`. A trip that hides is drawn faint across the part of its pass it can
run in (`Phase.window`: the whole pass, or at stages 1 and 2 the backward pass's last 1/N); one that outlasts
that part is drawn faint there, and solid for the time the step waits at the least (`Phase.adds`: a trip's
last buckets' copies end after its pass), then in outline up to the most (`Phase.most`).
The CPU's step starts once every gradient is down, and a trip after it starts when it ends, so the last bar
ends at `Step.total`, the least; the step ends from there up to `Step.most`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .. import checks, units
from ..planning.offload_step import Step, seconds_range

#: The lanes, top to bottom, and the colour of what runs in each.
LANES = ("GPU", "PCIe", "CPU")
COLOURS = {"forward": "#9ecae1", "backward": "#3182bd", "trip": "#e6842a", "cpu": "#8c564b"}
#: How the stretch from a step's least end to its most is shaded.
ENDS = {"color": "crimson", "alpha": 0.3, "lw": 0}
#: How a trip spread over its pass, hidden behind it, is drawn: faint and hatched.
FAINT = {"alpha": 0.35, "hatch": "//", "edgecolor": "#555", "lw": 0.5}
SOLID = {"edgecolor": "#555", "lw": 0.5}  #: how any other span is drawn: filled, thinly edged
#: How the part a trip may or may not add is drawn: an outline.
LAST = {"facecolor": "white", "edgecolor": COLOURS["trip"], "hatch": "..", "lw": 1.0, "ls": "--"}


@dataclass(frozen=True)
class Span:
    """What one lane does from `start` to `end` seconds into the step."""

    lane: str  #: one of LANES
    start: Fraction
    end: Fraction
    label: str  #: what runs, with its seconds
    colour: str  #: a key of COLOURS
    spread: bool = False  #: True for copies spread over a pass, hidden behind its compute
    last: bool = False  #: True for what a trip adds at the most beyond its least: drawn outlined


def spans(step: Step) -> tuple[Span, ...]:
    """Where each phase of `step` runs in time (see the module's docstring)."""
    checks.instance("step", step, Step, "planning.offload_step.step(...)")
    compute = step.phases[0].seconds
    forward = (1 - step.backward_share) * compute
    out = [
        Span("GPU", Fraction(0), forward, f"forward, {_s(forward)}", "forward"),
        Span("GPU", forward, compute, f"backward, {_s(compute - forward)}", "backward"),
    ]
    passes = {"forward": (Fraction(0), forward), "backward": (forward, compute)}
    cursor = compute
    for phase in step.phases[1:]:
        seconds = phase.seconds
        if phase.during in passes:
            end = passes[phase.during][1]
            start = end - phase.window  # the part of the pass the trip can run in, at the pass's end
            out += _trip_spans(phase, start, end)
            cursor = max(cursor, end + phase.adds)
        elif phase.during == "cpu":
            shown = f"at least {_s(seconds)}" if phase.floor is not None else _s(seconds)
            shown = f"about {_s(seconds)} (a guess)" if phase.estimated and phase.floor is None else shown
            out.append(Span("CPU", cursor, cursor + seconds, f"the CPU's Adam step, {shown}", "cpu"))
            cursor += seconds
        else:  # after the CPU's step
            out.append(Span("PCIe", cursor, cursor + seconds, _trip(phase), "trip"))
            cursor += seconds
    return tuple(out)


def _trip_spans(phase, start: Fraction, end: Fraction) -> list[Span]:
    """A trip during a pass: faint over the part it runs in; then, after the pass, solid for what it adds
    at the least and outlined up to the most (its last buckets' copies), labelled after the last piece."""
    after = phase.most > 0  # part of it ends after the pass
    whole = f"{phase.pcie} B, {_s(phase.seconds)}" + (" of copies, from here on" if after else "")
    out = [Span("PCIe", start, end, whole, "trip", True)]
    adds = f"{seconds_range(phase.adds, phase.most)} s"
    label = f"adds {adds}" + (" (its last buckets)" if phase.upto is not None else "")
    if phase.adds:
        out.append(Span("PCIe", end, end + phase.adds, "" if phase.most > phase.adds else label, "trip"))
    if phase.most > phase.adds:
        out.append(Span("PCIe", end + phase.adds, end + phase.most, label, "trip", last=True))
    return out


def _s(seconds: Fraction) -> str:
    return f"{units.format_number(seconds, 3)} s"


def _trip(phase) -> str:
    """A trip's label: what crosses ("weights back (16-bit)" -> "weights back"), its bytes per shard element,
    its seconds."""
    return f"{phase.name.split(' (')[0]}: {phase.pcie} B, {_s(phase.seconds)}"


def plot_offload_steps(steps: dict, title: str = "") -> Figure:
    """One panel per named `Step`, on one time axis: the lanes of `spans`, and the step's end marked."""
    if not isinstance(steps, dict) or not steps:
        raise TypeError(f"steps must be a non-empty dict of name -> Step, got {checks.shown(steps)}")
    drawn = {name: spans(step) for name, step in steps.items()}
    end = max(float(step.most) for step in steps.values())
    fig, axes = plt.subplots(
        len(steps), 1, figsize=(7.84, 1.55 * len(steps) + 0.7), sharex=True, squeeze=False
    )
    for ax, (name, step) in zip(axes[:, 0], steps.items(), strict=True):
        for span in drawn[name]:
            _draw(ax, span, end)
        _ends(ax, step)
        ax.set_yticks(range(len(LANES)), LANES[::-1], fontsize=7.5)
        ax.set_ylim(-0.5, len(LANES) - 0.2)
        ax.set_title(name, fontsize=8.5, loc="left", pad=2)
        ax.spines[["top", "right"]].set_visible(False)
        ax.tick_params(axis="x", labelsize=7)
    axes[-1, 0].set_xlim(0, end * 1.22)
    _legend(fig)
    axes[-1, 0].set_xlabel("seconds into the step", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.7 / fig.get_figheight()))
    plt.close(fig)
    return fig


def _draw(ax, span: Span, end: float) -> None:
    """One span as a bar in its lane, labelled inside it, or beside it when it is a short trip: a faint
    one's label before it, a solid or outlined one's after it."""
    y = len(LANES) - 1 - LANES.index(span.lane)
    width = float(span.end - span.start)
    # outlined: it may add nothing or all of this; faint: hidden behind its pass; else solid
    style = LAST if span.last else {"color": COLOURS[span.colour], **(FAINT if span.spread else SOLID)}
    ax.barh(y, width, left=float(span.start), height=0.62, **style)
    inside = span.lane != "PCIe" or (span.spread and width >= 0.1 * end)
    before = span.spread and not inside  # a short faint trip: its label ends where it starts
    x = float(span.start) + (width / 2 if inside else -0.01 * end if before else width + 0.01 * end)
    dark = span.colour in ("backward", "cpu") and not span.spread
    align = "center" if inside else "right" if before else "left"
    ax.text(x, y, span.label, fontsize=6.5, va="center", ha=align, color="white" if dark else "black")


def _ends(ax, step: Step) -> None:
    """Where the step ends: a dashed line at its least (`Step.total`), shaded on to its most, as two lines
    a few hundredths of a second apart cannot be told apart."""
    total, most = float(step.total), float(step.most)
    ax.axvline(total, color="crimson", ls="--", lw=0.9)
    if most > total:
        ax.axvspan(total, most, **ENDS)
    ends = f"{seconds_range(step.total, step.most)} s"
    ax.text(most, len(LANES) - 0.45, f" step ends: {ends}", fontsize=7, color="crimson")


def _legend(fig: Figure) -> None:
    """The three kinds of PCIe bar (solid, the step waits for it; faint, spread over its pass and hidden;
    outlined, what its last buckets may add beyond that) and the lines where a step ends."""
    handles = [
        Patch(color=COLOURS["trip"], label="PCIe copies the step waits for"),
        Patch(
            facecolor=COLOURS["trip"],
            label="PCIe copies hidden behind a pass, spread over where they run",
            **FAINT,
        ),
        Patch(label="what the last buckets' copies may add, as the buckets fall", **LAST),
        Line2D(
            [],
            [],
            color="crimson",
            ls="--",
            lw=0.9,
            label="the step ends, at the least (as drawn)",
        ),
        Patch(label="… and up to here, at the most", **ENDS),
    ]
    top = 1 - 0.27 / fig.get_figheight()  # just under the title
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, top), ncol=2, fontsize=6.5,
               frameon=False)  # fmt: skip
