"""Step timelines as lesson 12 shows them: one run, the figure's panels, the peaks with their gaps, and the
loss the step model leaves out, counted in the lab and sized for a GPT. No torch.

`measure` reuses the test session's lab run when one is kept (`reuse`), and otherwise runs the
timelines alone, without the lab's other modes, which the lesson does not need.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks, tables, units
from ..planning import activations
from ..planning.activations import Transformer
from ..planning.step_rules import FP32
from ..present.step_figure import Panel
from . import reuse
from .modes import MODE_NAMES
from .runner import run
from .timeline_compare import Compared, left_out, modelled
from .timeline_setup import BY_KEY, SPEC, STEP_NAMES, Measured

#: The world sizes of the lab's matrix, under which a test session keeps its run.
WORLDS = (1, 2, 4)
#: The world sizes the lesson shows.
SHOWN = (2, 4)
#: fp32 copies of the logits the lab's loss holds under DeepSpeed (bf16 ranks): four fp32 and a bf16 one, as
#: `loss_copies` measures them; lesson 12's run and tests/test_lab_timeline.py check that it still does.
DEEPSPEED_LOSS_COPIES = Fraction(9, 2)
#: `planning.activations.CROSS_ENTROPY_COPIES`, re-exported where the lessons have always read it.
CROSS_ENTROPY_COPIES = activations.CROSS_ENTROPY_COPIES


def measure() -> tuple[tuple[Measured, ...], float]:
    """Every rank's timeline of every setup on 2 and 4 ranks, and the run's wall time in seconds.

    The test session's kept run (1, 2 and 4 ranks, every mode) when there is one; else only the
    timelines, on 2 and 4 ranks. Either way the same measurements come back: they are exact.
    """
    if reuse.load(WORLDS, tuple(MODE_NAMES)) is not None:
        results, seconds = run(WORLDS, modes=tuple(MODE_NAMES), steps=tuple(STEP_NAMES))
    else:
        results, seconds = run(SHOWN, modes=(), steps=tuple(STEP_NAMES))
    return tuple(m for m in results.timelines if m.gpus in SHOWN), seconds


def rows_for(rows: tuple[Compared, ...], key: str, gpus: int) -> tuple[Compared, ...]:
    """The compared phases of one setup on `gpus` ranks, in step order."""
    if key not in STEP_NAMES:
        raise ValueError(f"key must be one of {', '.join(STEP_NAMES)}, got {key!r}")
    found = tuple(r for r in rows if r.key == key and r.gpus == gpus)
    if not found:
        raise ValueError(
            f"no measured timeline of {key} on {gpus} ranks; measured: {sorted({r.gpus for r in rows})}"
        )
    return found


def highest(rows: tuple[Compared, ...], key: str, gpus: int, phase: str | None = None) -> int:
    """The most the busiest rank measured at one model phase of a setup, or at any of them (`phase` None)."""
    mine = [r for r in rows_for(rows, key, gpus) if phase is None or r.phase == phase]
    if not mine:
        raise ValueError(
            f"phase must be one of {', '.join(r.phase for r in rows_for(rows, key, gpus))}, got {phase!r}"
        )
    return max(max(r.measured) for r in mine)


def loss_peak(timelines, key: str, gpus: int) -> int:
    """The busiest rank's highest point while the loss is computed, a stretch the model has no phase for,
    less the bytes the model leaves out all step (`timeline_compare.left_out`)."""
    setup = BY_KEY[key] if key in BY_KEY else None
    mine = [m for m in timelines if m.key == key and m.gpus == gpus]
    if setup is None or not mine:
        raise ValueError(f"no measured timeline of {key!r} on {gpus} ranks")
    return max(m.span("loss").peak - left_out(setup, gpus, m.boundaries[0]) for m in mine)


def peak_stretch(rows: tuple[Compared, ...], timelines, key: str, gpus: int) -> str:
    """Where the busiest rank measured the most of the step: a model phase's name, or "loss"."""
    top = max(rows_for(rows, key, gpus), key=lambda r: max(r.measured))
    return "loss" if loss_peak(timelines, key, gpus) > max(top.measured) else top.phase


def loss_copies(timelines) -> Fraction:
    """fp32 copies of the lab's outputs (its logits) that the loss's stretch rises by, in halves, the same in
    every timeline given: four in fp32; DeepSpeed's bf16 ranks also hold the cast's bf16 gradient, half an
    fp32 copy, so 9/2. The few scalars beyond them do not make another half."""
    half = SPEC.batch * SPEC.widths[-1] * 2
    found = {Fraction((m.span("loss").peak - m.span("loss").level) // half, 2) for m in timelines}
    if len(found) != 1:
        raise ValueError(f"timelines must agree on the loss's copies of the outputs, got {sorted(found)}")
    return found.pop()


def _check_copies(copies) -> None:
    """Raise a one-line error unless `copies` is a whole or half number from 1/2 to 1,000."""
    number = isinstance(copies, (int, Fraction)) and not isinstance(copies, bool)
    if not (number and 0 < copies <= 1_000 and (2 * copies).denominator == 1):
        raise ValueError(
            f"copies must be a whole or half number from 1/2 to 1,000, got {checks.shown(copies)}"
        )


def lab_loss(key: str, gpus: int, copies: int | Fraction) -> int:
    """Bytes the lab's loss holds on top of the forward pass's end, by the planning rule: the logits (layer
    4's output, in the setup's weight dtype) and `copies` fp32 copies of them. A setup's planned peak is then
    `modelled(...).peak_with_loss(lab_loss(...))`."""
    if key not in BY_KEY:
        raise ValueError(f"key must be one of {', '.join(BY_KEY)}, got {checks.shown(key)}")
    if gpus not in SHOWN:
        raise ValueError(f"gpus must be one of {', '.join(map(str, SHOWN))}, got {checks.shown(gpus)}")
    _check_copies(copies)
    outputs = SPEC.batch * SPEC.widths[-1]
    weight_bytes = BY_KEY[key].mode.recipe.weight_bytes  # the recipe `modelled` runs the setup with
    return int(outputs * weight_bytes + copies * outputs * FP32)


def at_size(shape: Transformer, copies: int | Fraction) -> dict[str, int]:
    """Bytes the step model leaves out that grow with a GPT's activations, at `shape`'s size: the loss holding
    `copies` fp32 copies of the logits (s·b·V × 4 B each; a half is a bf16 copy), a block's bf16 output
    (s·b·h × 2 B), and the activation gradients flowing into and out of a block (twice that).

    The step model leaves out the logits and the loss: it describes each layer by its weights and the
    activations it saves, and what a loss holds depends on the model's head and its loss function."""
    checks.instance("shape", shape, Transformer, "an activations.Transformer, e.g. MODELS['7.5b']")
    _check_copies(copies)
    output = 2 * shape.seq_len * shape.micro_batch * shape.hidden
    loss = int(copies * shape.logits_bytes)
    return {"loss": loss, "layer output": output, "activation gradients": 2 * output}


def _title(key: str, gpus: int) -> str:
    """A panel's title: the setup, N and the recipe ("DDP on 2 ranks, fp32-adam: 4 + 4 + 8 = 16 B/param")."""
    return f"{STEP_NAMES[key]} on {gpus} ranks, {modelled(BY_KEY[key], gpus).recipe.summary()}"


def panels(rows: tuple[Compared, ...], gpus: int, keys=tuple(STEP_NAMES), timelines=None) -> list[Panel]:
    """The figure's panels: each setup's model timeline on `gpus` ranks, with the busiest rank per phase,
    the tolerance above each bar, and (given the `timelines`) the busiest rank's loss."""
    shown = []
    for key in keys:
        mine = rows_for(rows, key, gpus)
        shown.append(
            Panel(
                _title(key, gpus),
                modelled(BY_KEY[key], gpus),
                tuple(max(r.measured) for r in mine),
                tolerance=tuple(r.tolerance for r in mine),
                loss=None if timelines is None else loss_peak(timelines, key, gpus),
            )
        )
    return shown


@dataclass(frozen=True)
class Peak:
    """One setup's model peak beside what its busiest rank measured at that phase."""

    key: str  #: the setup
    gpus: int  #: N
    phase: str  #: where the model peaks
    model: int | Fraction  #: the model's bytes there
    measured: int  #: the busiest rank's highest point there
    tolerance: int  #: the most the gap may be
    named: tuple[tuple[str, int], ...]  #: what the gap may hold, by name (`timeline_compare.WHY`), and bytes

    @property
    def gap(self) -> int | Fraction:
        """Measured minus modelled, at the peak."""
        return self.measured - self.model


def peaks(rows: tuple[Compared, ...], gpus: int) -> PeakTable:
    """Each setup's model peak on `gpus` ranks beside the measurement, the tolerance and what fills it."""
    found = []
    for key in STEP_NAMES:
        mine = rows_for(rows, key, gpus)
        top = max(mine, key=lambda r: r.model)  # the first of the highest, as Timeline.peak
        top = next(r for r in mine if r.model == top.model)
        found.append(Peak(key, gpus, top.phase, top.model, max(top.measured), top.tolerance, top.allowances))
    return PeakTable(tuple(found))


def _shown(nbytes) -> str:
    """Bytes with thousands separators, exact: "101,376" (a non-whole count keeps its decimals)."""
    return f"{int(nbytes):,}" if nbytes == int(nbytes) else units.format_number(nbytes)


@dataclass(frozen=True)
class PeakTable:
    """Each setup's model peak, its tolerance, and whether the busiest rank measured within it, as a table.

    The measured bytes themselves are not shown: off the boundaries they can differ between runs by a
    few bytes of scalars that gloo's thread frees a moment early or late (`timeline_compare.SCALARS`),
    and a committed lesson shows only what every run reproduces.
    """

    rows: tuple[Peak, ...]  #: one per setup

    def cells(self) -> list[list[str]]:
        """A header, then one row per setup, bytes exact."""
        head = [
            "setup",
            "N",
            "model peaks at",
            "model B",
            "tolerance B",
            "busiest rank within tolerance",
            "tolerance made of, B",
        ]
        body = [
            [
                STEP_NAMES[p.key],
                str(p.gpus),
                p.phase,
                _shown(p.model),
                f"{p.tolerance:,}",
                "yes" if 0 <= p.gap <= p.tolerance else "NO",
                " + ".join(f"{name} {n:,}" for name, n in p.named),
            ]
            for p in self.rows
        ]
        return [head, *body]

    def _repr_markdown_(self) -> str:
        return tables.markdown(self.cells(), ["---", "--:", "---", "--:", "--:", "---", "---"])

    def _repr_html_(self) -> str:
        return tables.html(self.cells())

    def __repr__(self) -> str:
        return "\n".join("  ".join(r) for r in self.cells())
