"""Reading an attendee's answer and saying, part by part, "right" or "not yet", and why.

An answer is a dict from part name to value. Numbers may be ints, floats or text with a unit
("41.25 GB", "38.4 GiB", "15B", "0.15 s"); stages may be 0-3 or "ZeRO-2"; yes/no parts take
True/False or "yes"/"no". Nothing is evaluated: text is matched against fixed forms.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from html import escape

from .. import checks, units
from ..stages import as_stage
from .model import Part, Question, canonical

#: Words for a part's mark; the sheet and the grader use the same two.
RIGHT, NOT_YET = "right", "not yet"
#: A part left as None: greeted neutrally, neither right nor wrong.
UNANSWERED = "not answered yet"
#: The headline's first words and its colour, by state: words and colour both, never an emoji alone.
HEADS = {
    "correct": ("Correct.", "#1a7f37"),
    "not yet": ("Not yet:", "#b42318"),
    "unanswered": ("Not answered yet:", "#57606a"),
}
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
    if not isinstance(raw, str):  # int, float, Fraction, Decimal or a numpy scalar, read exactly
        try:
            return checks.exact(part.name, raw)
        except (TypeError, ValueError):
            raise ValueError(
                f"give a finite number{' in ' + part.unit if part.unit else ''}, got {_shown(raw)}"
            ) from None
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


def plain(question: Question, answer) -> dict:
    """`answer`'s parts, each read as `assess` reads it, as plain data in the form `answers()` gives."""
    if not isinstance(answer, dict) or not {p.name for p in question.parts} <= answer.keys():
        names = ", ".join(p.name for p in question.parts)
        raise ValueError(f"answer must be a dict with every part, {names}, got {_shown(answer)}")
    shown = {}
    for p in question.parts:
        try:
            shown[p.name] = replace(p, value=canonical(p.kind, read(p, answer[p.name]))).plain()
        except (ValueError, TypeError) as err:
            raise ValueError(f"{p.name}: {err}") from None
    return shown


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
    def state(self) -> str:
        """ "correct", "unanswered" (no part answered yet) or "not yet"."""
        if self.correct:
            return "correct"
        if self.problem is None and not any(m.answered for m in self.marks):
            return "unanswered"
        return "not yet"

    @property
    def slips(self) -> tuple[str, ...]:
        """The recognised slips, as "part: slip-key"."""
        return tuple(f"{m.part}: {m.slip}" for m in self.marks if m.slip)

    def headline(self) -> str:
        """One sentence that says, in words, where the answer stands: "Correct. ...", "Not yet: ..." or
        "Not answered yet: ..."."""
        right, total = self.score
        blank = sum(not m.answered for m in self.marks)
        said = {
            "correct": f"All {total} parts are right",
            "unanswered": "replace each None in the answer cell with your answer, then run it and this cell",
            "not yet": f"{right} of {total} parts right" + (f", {blank} not answered yet" if blank else ""),
        }[self.state]
        return f"{HEADS[self.state][0]} {said} ({self.question}, seed {self.seed})."

    def lines(self) -> list[str]:
        """The feedback as lines of text: a headline, then one line per part."""
        body = [f"  {self.problem}"] if self.problem else [f"  {m.part}: {m.message}" for m in self.marks]
        body = [] if self.state == "unanswered" else body  # the sheet already lists what to give
        tail = [f"  Note: {self.note}"] if self.note else []
        return [self.headline(), *body, *tail, *([f"Working: {self.working}"] if self.working else [])]

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_markdown_(self) -> str:
        head, *rest = self.lines()
        return "\n".join([f"**{head}**", "", *(f"- {line.strip()}" for line in rest)])

    def _repr_html_(self) -> str:
        """The headline in its state's colour beside a bar of that colour, and each part's mark in words."""
        return box(self.state, self.headline(), [line.strip() for line in self.lines()[1:]])


def box(state: str, text: str, items=()) -> str:
    """HTML for feedback: `text`, whose first words (HEADS) are bold in `state`'s colour beside a bar of
    that colour, then `items` as a list. Words and colour both say the state, so neither is needed alone."""
    words, colour = HEADS[state]
    rest = escape(text.removeprefix(words))
    listed = "".join(f"<li>{escape(item)}</li>" for item in items)
    return (
        f'<div class="zero-feedback zero-feedback-{state.replace(" ", "-")}" '
        f'style="border-left: 4px solid {colour}; padding: 0.2em 0.8em">'
        f'<p style="margin: 0.2em 0"><strong style="color: {colour}">{escape(words)}</strong>{rest}</p>'
        + (f'<ul style="margin: 0.2em 0">{listed}</ul>' if listed else "")
        + "</div>"
    )


def _mark(part: Part, raw) -> Mark:
    """One part's mark: right, a recognised slip, or the rule it rests on."""
    if raw is None:
        return Mark(part.name, False, f"{UNANSWERED}: give {part.ask}.", answered=False)
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
