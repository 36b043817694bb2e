"""Reading an attendee's answer and saying, part by part, "right" or "not yet", and why.

An answer is a dict from part name to value. Numbers may be ints, floats or text with a unit
("41.25 GB", "38.4 GiB", "15B", "0.15 s"); stages may be 0-3 or "ZeRO-2"; yes/no parts take
True/False or "yes"/"no". Nothing is evaluated: text is matched against fixed forms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from .. import units
from ..stages import as_stage
from .model import Part, Question, canonical

#: Words for a part's mark; the sheet and the grader use the same two.
RIGHT, NOT_YET = "right", "not yet"
_YES = {"yes", "y", "true"}
_NO = {"no", "n", "false"}
_SUFFIX = {
    "x": ("x", "×", "psi", "ψ"),
    "s": ("s", "sec", "seconds"),
    "GPUs": ("gpus", "gpu"),
    "$/h": ("$/h", "/h"),
    "B": ("bytes", "b"),
}


def _number(part: Part, raw) -> Fraction:
    """A number in the part's unit, from a number or text."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, Fraction, str)):
        raise ValueError(f"give a number{' in ' + part.unit if part.unit else ''}, not {type(raw).__name__}")
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise ValueError(f"give a finite number, got {raw}")
        return Fraction(repr(raw))
    if not isinstance(raw, str):
        return Fraction(raw)
    text = raw.strip().replace(",", "").replace("_", "").removeprefix("$")
    if part.unit in ("params", "elements", "tokens"):
        return Fraction(units.parse_count(text.removesuffix(part.unit).strip(), field=part.name))
    if part.unit in ("GB", "GiB") and text[-1:].isalpha():
        return units.in_unit(units.parse_size(text, field=part.name), part.unit)
    for suffix in sorted(_SUFFIX.get(part.unit, ()), key=len, reverse=True):
        if text.lower().endswith(suffix):
            text = text[: -len(suffix)].strip()
            break
    try:  # the package's one bounded reader of signed decimals and fractions
        return units.read_ratio(text, field=part.name)
    except ValueError:
        raise ValueError(
            f"cannot read {_shown(raw)} as a number{' in ' + part.unit if part.unit else ''}"
        ) from None


def _shown(raw) -> str:
    """`raw` as a message quotes it: its repr, cut to 40 characters."""
    text = repr(raw)
    return text if len(text) <= 40 else text[:40] + "…"


def read(part: Part, raw):
    """The attendee's value for `part`, in the form the part compares; ValueError says what to give."""
    if part.kind == "number":
        return _number(part, raw)
    if part.kind == "stage":
        return as_stage(raw.strip() if isinstance(raw, str) else raw)
    if part.kind == "yes/no":
        if isinstance(raw, bool):
            return raw
        word = raw.strip().lower() if isinstance(raw, str) else None
        if word in _YES | _NO:
            return word in _YES
        raise ValueError(f"give yes or no (True or False), got {_shown(raw)}")
    if not isinstance(raw, str):
        raise ValueError(f"give one of the listed choices as text, got {_shown(raw)}")
    return canonical("choice", raw)


@dataclass(frozen=True)
class Mark:
    """What `assess` says about one part."""

    part: str  #: the part's name
    right: bool  #: whether it is right
    message: str  #: the sentence for the learner
    slip: str | None = None  #: the key of the recognised slip, if any
    answered: bool = True  #: False when the part was left as None or missing


@dataclass(frozen=True, repr=False)
class Feedback:
    """Every part's mark for one answer to one variant."""

    question: str  #: the question's id
    seed: int  #: the variant's seed
    marks: tuple[Mark, ...]  #: one per part, in order
    working: str | None = None  #: the worked solution, when asked for
    problem: str | None = None  #: why the answer could not be read at all, if it could not
    note: str | None = None  #: anything else worth saying, such as keys that match no part

    @property
    def correct(self) -> bool:
        """Whether every part is right."""
        return self.problem is None and all(m.right for m in self.marks)

    @property
    def score(self) -> tuple[int, int]:
        """(parts right, parts in all)."""
        return sum(m.right for m in self.marks), len(self.marks)

    @property
    def slips(self) -> tuple[str, ...]:
        """The recognised slips, as "part: slip-key"."""
        return tuple(f"{m.part}: {m.slip}" for m in self.marks if m.slip)

    def lines(self) -> list[str]:
        """The feedback as lines of text: a headline, then one line per part."""
        right, total = self.score
        head = f"{self.question} (seed {self.seed}): " + (
            RIGHT + f", all {total} parts." if self.correct else f"{NOT_YET}, {right} of {total} parts right."
        )
        body = [f"  {self.problem}"] if self.problem else [f"  {m.part}: {m.message}" for m in self.marks]
        tail = [f"  Note: {self.note}"] if self.note else []
        return [head, *body, *tail, *([f"Working: {self.working}"] if self.working else [])]

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_markdown_(self) -> str:
        head, *rest = self.lines()
        return "\n".join([f"**{head}**", "", *(f"- {line.strip()}" for line in rest)])


def _mark(part: Part, raw) -> Mark:
    """One part's mark: right, a recognised slip, or the rule it rests on."""
    if raw is None:
        return Mark(
            part.name, False, f"{NOT_YET}: no answer yet (replace None). Give {part.ask}.", answered=False
        )
    try:
        value = read(part, raw)
    except (ValueError, TypeError) as err:
        return Mark(part.name, False, f"{NOT_YET}: could not read it: {err}.")
    if part.accepts(value):
        return Mark(part.name, True, f"{RIGHT}.")
    for s in part.slips:
        if part.resembles(value, s.value):
            return Mark(part.name, False, f"{NOT_YET}: {s.why}.", s.key)
    return Mark(part.name, False, f"{NOT_YET}: it matches no common slip. This part rests on: {part.rule}.")


def assess(question: Question, answer, *, show_working: bool = False) -> Feedback:
    """Mark every part of `answer` (a dict of part name to value) against `question`."""
    working = question.working if show_working else None
    if not isinstance(answer, dict):
        example = ", ".join(f"{p.name!r}: ..." for p in question.parts)
        return Feedback(
            question.id,
            question.seed,
            (),
            working,
            f"{NOT_YET}: the answer must be a dict such as {{{example}}}, got {type(answer).__name__}.",
        )
    marks = tuple(_mark(part, answer.get(part.name)) for part in question.parts)
    extra = sorted(str(k) for k in answer if k not in {p.name for p in question.parts})
    note = f"ignored {', '.join(extra)}: this question has no such part." if extra else None
    return Feedback(question.id, question.seed, marks, working, note=note)
