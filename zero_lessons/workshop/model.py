"""What a workshop question is: parts with exact answers, the slips that give wrong ones, and feedback.

A question asks for a decision and the numbers behind it, each as one named part. A part knows
its exact answer, the rule it tests, and the value each typical slip produces; `assess` reads an
answer (a dict of part name to value), marks every part "right" or "not yet", and names the slip
or the rule behind each miss. Everything here is plain data: no question is generated here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from fractions import Fraction

from .. import checks, units
from ..stages import as_stage

#: Numbers within 0.5% count as right ("41.3" for 41.25); parts marked `exact` must match exactly.
TOLERANCE = Fraction(1, 200)
#: The kinds of answer a part takes.
KINDS = ("number", "stage", "choice", "yes/no")
#: Seeds run from 0 to this.
MAX_SEED = 10**9

#: Slips that show up in many questions, by key.
COMMON = {
    "gib-for-gb": "that is the amount in GiB (2**30 bytes); this part asks for decimal GB (10**9 bytes)",
    "gb-for-gib": "that is the amount in decimal GB; this part asks for GiB (2**30 bytes)",
    "per-gpu-not-node": "that is one GPU's share; this part asks for the whole node",
    "node-not-per-gpu": "that adds up the whole node; each GPU has its own host link: count one GPU's share",
    "one-direction": "that counts one way only: gradients go down to the host, then the updated weights "
    "come back, one transfer after the other",
    "bytes-vs-elements": "that is off by the bytes per element: elements and bytes differ by the dtype",
    "forgot-gradients": "that leaves out the gradients: every parameter also has one",
    "ignored-activations": "that leaves out the activations, which every GPU keeps for its own micro-batch",
}


@dataclass(frozen=True)
class Slip:
    """A typical mistake and the answer it produces."""

    key: str  #: short name, the same in every variant, e.g. "gib-for-gb"
    value: object  #: the answer this mistake gives, in the part's unit or kind
    why: str  #: what went wrong, as the learner reads it


def slip(key: str, value, why: str | None = None) -> Slip:
    """A Slip, with the text from COMMON when `why` is left out."""
    return Slip(key, value, why if why is not None else COMMON[key])


@dataclass(frozen=True)
class Spec:
    """What a part asks, the same in every variant; the variant adds the answer and the slips."""

    name: str  #: key in the answer dict
    ask: str  #: what to give
    rule: str  #: the rule or number it tests
    kind: str = "number"  #: one of KINDS
    unit: str = ""  #: for numbers, the unit
    exact: bool = False  #: whole counts that must match exactly


def parts(specs: tuple[Spec, ...], values: dict, slips: dict, texts: dict, also: dict | None = None) -> tuple:
    """One variant's parts: each spec with its answer from `values` and its slips from `slips`.

    `slips` maps a part's name to (key, value) pairs, or (key, value, why) when the explanation
    names this variant's numbers; else each key's explanation comes from `texts`, else from COMMON.
    """
    also = also or {}
    return tuple(
        Part(
            s.name,
            s.ask,
            values[s.name],
            s.rule,
            s.kind,
            s.unit,
            exact=s.exact,
            also=also.get(s.name, ()),
            slips=tuple(
                slip(key, value, why[0] if why else texts.get(key))
                for key, value, *why in slips.get(s.name, ())
            ),
        )
        for s in specs
    )


@dataclass(frozen=True)
class Part:
    """One thing a question asks for: a decision or a number, with its exact answer."""

    name: str  #: key in the answer dict, e.g. "stage"
    ask: str  #: what to give, as the sheet prints it
    value: object  #: the answer: a Fraction, a Stage, a choice (lower-case text) or a bool
    rule: str  #: the rule or number this part tests, named when it is missed
    kind: str = "number"  #: one of KINDS
    unit: str = ""  #: for numbers: "GB", "GiB", "s", "B", "elements", "params", "GPUs", "$/h" or ""
    slips: tuple[Slip, ...] = ()  #: typical mistakes; one that cannot be told from the answer is dropped
    exact: bool = False  #: whole counts that must match exactly, such as bytes on a rank
    also: tuple[str, ...] = ()  #: other choices that are right too (two settings with the same trace)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        object.__setattr__(self, "value", canonical(self.kind, self.value))
        object.__setattr__(self, "also", tuple(canonical("choice", a) for a in self.also))
        kept: list[Slip] = []
        for s in self.slips:  # a slip is useful only when its value differs from the answer and earlier slips
            value = canonical(self.kind, s.value)
            known = (self.value, *self.also, *(k.value for k in kept))
            if not self.accepts(value) and not any(self.resembles(value, v) for v in known):
                kept.append(replace(s, value=value))
        object.__setattr__(self, "slips", tuple(kept))

    def resembles(self, value, target) -> bool:
        """Whether `value` is a slip's `target`: within the tolerance, or within 1 of an exact count."""
        if self.kind == "number" and self.exact:
            return abs(value - target) < 1
        return near(self.kind, value, target) or (self.kind == "number" and near(self.kind, target, value))

    def accepts(self, value) -> bool:
        """Whether `value` (already read) is right for this part."""
        if self.kind == "choice":
            return value == self.value or value in self.also
        if self.kind == "number" and self.exact:
            return value == self.value
        return near(self.kind, value, self.value)

    def plain(self):
        """The answer as plain JSON data, as the answer key stores it; `read` accepts it back."""
        if self.kind == "stage":
            return int(self.value)
        if self.kind == "number":
            return _plain_number(self.value)
        return self.value


def canonical(kind: str, value):
    """A part's value in the one form comparisons use."""
    if kind == "number":
        return units.tidy(Fraction(value)) if not isinstance(value, float) else Fraction(repr(value))
    if kind == "stage":
        return as_stage(value)
    if kind == "choice":
        return str(value).strip().lower().replace(" ", "")
    return bool(value)


def near(kind: str, value, target) -> bool:
    """Numbers within the tolerance (exactly equal when the target is 0); anything else equal."""
    if kind != "number":
        return value == target
    return abs(value - target) <= abs(target) * TOLERANCE


def _plain_number(value: Fraction) -> int | float:
    """An int when whole, else a float with six significant digits (well inside the tolerance)."""
    return int(value) if value.denominator == 1 else float(f"{float(value):.6g}")


@dataclass(frozen=True, repr=False)
class Question:
    """One variant of a question: the text an attendee reads, its parts, and the worked solution."""

    id: str  #: which question, e.g. "offload-pays"; the same in every variant
    title: str  #: a few words for the sheet's heading
    seed: int  #: the variant's seed
    prompt: str  #: the situation and the rule to apply, with this variant's numbers
    parts: tuple[Part, ...]  #: what to give, in order
    working: str  #: the worked solution for this variant
    point: str  #: the teaching point, the same in every variant
    given: tuple[tuple[str, object], ...] = ()  #: the variant's inputs as plain data

    def part(self, name: str) -> Part:
        """The part called `name`."""
        for part in self.parts:
            if part.name == name:
                return part
        raise ValueError(f"part must be one of {', '.join(p.name for p in self.parts)}, got {name!r}")

    def answers(self) -> dict:
        """The right answer to every part, as plain data."""
        return {p.name: p.plain() for p in self.parts}

    def blank(self) -> dict:
        """The answer dict an attendee starts from: every part None."""
        return {p.name: None for p in self.parts}

    def markdown(self) -> str:
        """The situation and one line per part to give, as Markdown (the sheet adds the title)."""
        return f"{self.prompt}\n\nGive:\n\n" + "\n".join(f"- `{p.name}`: {p.ask}" for p in self.parts)

    def __repr__(self) -> str:
        return self.markdown()

    def _repr_markdown_(self) -> str:
        return self.markdown()


def rng(question_id: str, seed: int) -> random.Random:
    """The random source of one variant: the same seed gives the same numbers on every machine."""
    checks.whole("seed", seed, low=0, high=MAX_SEED)
    return random.Random(f"{question_id}:{seed}")


def first(source: random.Random, draw, fits, tries: int = 1000):
    """The first draw that `fits`: a generator redraws until the variant teaches the intended point."""
    for _ in range(tries):
        values = draw(source)
        if fits(*values):
            return values
    raise RuntimeError(f"no fitting variant in {tries} draws: widen the ranges of this question")


def in_gb(nbytes) -> Fraction:
    """Bytes as an exact number of decimal GB."""
    return units.in_unit(nbytes, "GB")


def in_gib(nbytes) -> Fraction:
    """Bytes as an exact number of GiB."""
    return units.in_unit(nbytes, "GiB")


def gb(nbytes) -> str:
    """Bytes shown in decimal GB, e.g. "41.25 GB"."""
    return units.format_bytes(nbytes, "GB")


def billions(value) -> int:
    """A size such as 6.7 (billions of parameters) as an exact parameter count."""
    return int(Fraction(str(value)) * 10**9)
