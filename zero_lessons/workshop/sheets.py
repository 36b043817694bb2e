"""Sheets: every question's variant for one seed, the instructor's answer key, and a notebook to fill in.

`sheet(17)` is one attendee's sheet; `check(17, "offload-pays", answer)` grades an answer against
that attendee's own variant; `answer_key(30)` gives every attendee a seed and lists the right answers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache, partial

from .. import checks
from . import audit_bytes, audit_deepspeed, checkpointing, host_memory, measure, sizing, timing, traces
from .feedback import Feedback, assess, plain
from .model import MAX_SEED, Question

#: Every question, in the sheet's order: design questions, then the audit, then predict-then-measure.
QUESTIONS = {
    "stage-and-checkpointing": checkpointing.generate,
    "offload-and-host": host_memory.generate,
    "cheapest-cluster": sizing.cheapest_cluster,
    "stage3-above-stage2": sizing.stage3_above_stage2,
    "traffic-detective": traces.generate,
    "offload-pays": timing.offload_pays,
    "accumulation-traffic": timing.accumulation_traffic,
    "audit-deepspeed-formula": audit_deepspeed.deepspeed_formula,
    "audit-4x-rule": audit_bytes.four_times_rule,
    "audit-10-bytes": audit_bytes.ten_bytes,
    "audit-tp-sharding": audit_deepspeed.tp_sharding,
    **{family: partial(measure.measure_question, family) for family in measure.FAMILIES},
}
#: An attendee's id: letters, digits, "_", "-" and "." (it names files and CSV rows).
ATTENDEE = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,59}"
#: What an answer key says it is, so that the grader refuses any other JSON.
KEY_FORMAT, KEY_VERSION = "zero-lessons workshop key", 1
MAX_STUDENTS = 1000


def known(qid) -> str:
    """`qid` when it names a question; else an error that lists them."""
    if not isinstance(qid, str) or qid not in QUESTIONS:
        got = repr(qid) if len(repr(qid)) <= 60 else repr(qid)[:60] + "…"
        raise (ValueError if isinstance(qid, str) else TypeError)(
            f"question must be one of {', '.join(QUESTIONS)}, got {got}"
        )
    return qid


def question_ids(only=None) -> tuple[str, ...]:
    """The ids asked, in sheet order: all of them, or those in `only` (each must exist)."""
    if only is None:
        return tuple(QUESTIONS)
    if not isinstance(only, (list, tuple, set, frozenset)) or not only:
        raise TypeError(f"only must be a non-empty list of question ids, got {type(only).__name__}")
    chosen = {known(qid) for qid in only}
    return tuple(q for q in QUESTIONS if q in chosen)


def question(qid: str, seed: int) -> Question:
    """One question's variant for `seed` (made once, then remembered)."""
    return variant(known(qid), checks.whole("seed", seed, low=0, high=MAX_SEED))


@lru_cache(maxsize=4096)
def variant(qid: str, seed: int) -> Question:
    """The variant itself, cached: a sheet, its checks and the grader all ask for the same ones."""
    return QUESTIONS[qid](seed)


def check(seed: int, qid: str, answer, *, show_working: bool = False) -> Feedback:
    """Grade `answer` (a dict of part name to value) against the variant of `qid` for `seed`."""
    return assess(question(qid, seed), answer, show_working=show_working)


@dataclass(frozen=True, repr=False)
class Sheet:
    """One attendee's sheet: a variant of every question, all from one seed."""

    seed: int  #: the attendee's seed
    questions: tuple[Question, ...]  #: in order
    attendee: str = ""  #: the attendee's id, when the instructor gave one
    #: the lab's measurements of this sheet's predict-then-measure cases, by question id, once run
    measured: dict = field(default_factory=dict, compare=False, repr=False)

    def __getitem__(self, qid: str) -> Question:
        for q in self.questions:
            if q.id == qid:
                return q
        raise KeyError(f"question must be one of {', '.join(q.id for q in self.questions)}, got {qid!r}")

    def check(self, qid: str, answer, *, show_working: bool = False) -> Feedback:
        """Grade `answer` against this sheet's variant of `qid`."""
        return assess(self[qid], answer, show_working=show_working)

    def plain(self, qid: str, answer) -> dict:
        """`answer` to this sheet's `qid` as plain data, every part read as `check` reads it."""
        return plain(self[qid], answer)

    def measure(self, qid: str, answer, *, timeout: float = 120) -> Feedback:
        """Grade `answer` against the lab's measurement of this sheet's case `qid`. The first call runs the
        lab for all of the sheet's predict-then-measure cases, one set of ranks per rank count (so one set
        or two); later calls grade against those same measurements."""
        if qid not in measure.FAMILIES:
            raise ValueError(f"question must be one of {', '.join(measure.FAMILIES)}, got {qid!r}")
        if qid not in self.measured:
            cases = [q for q in self.questions if q.id in measure.FAMILIES]
            self.measured.update(measure.run_cases(cases, timeout))
        return measure.compare(self[qid], answer, self.measured[qid])

    def markdown(self) -> str:
        """The whole sheet as Markdown: each question's situation and what to give."""
        head = f"# Workshop sheet, seed {self.seed}" + (f" ({self.attendee})" if self.attendee else "")
        return "\n\n".join([head, *(question_markdown(q, n) for n, q in enumerate(self.questions, 1))]) + "\n"

    def __repr__(self) -> str:
        return self.markdown()

    def _repr_markdown_(self) -> str:
        return self.markdown()


def question_markdown(q: Question, number: int) -> str:
    """One question as Markdown: title, situation, and one line per part."""
    return f"## {number}. {q.title}\n\n{q.markdown()}"


def sheet(seed: int, *, only=None, attendee: str = "") -> Sheet:
    """Every question's variant for `seed` (or those in `only`), for an attendee such as "A01" (or none)."""
    if not isinstance(attendee, str) or attendee and not re.fullmatch(ATTENDEE, attendee):
        raise ValueError(
            f"attendee must be letters, digits, '_', '-' or '.' (at most 60), got {attendee!r:.60}"
        )
    return Sheet(
        checks.whole("seed", seed, low=0, high=MAX_SEED),
        tuple(question(q, seed) for q in question_ids(only)),
        attendee,
    )


def attendee_ids(students: int) -> list[str]:
    """Ids for a class: "A01" ... "A30" (three digits from 100 students)."""
    students = checks.whole("students", students, high=MAX_STUDENTS)
    width = max(2, len(str(students)))
    return [f"A{n:0{width}d}" for n in range(1, students + 1)]


def answer_key(students: int, *, seed: int = 0, only=None) -> dict:
    """The instructor's key as JSON data: each attendee's seed (seed × 1000 + number) and right answers."""
    base, ids = checks.whole("seed", seed, low=0, high=MAX_SEED // 1000 - 1), question_ids(only)
    attendees = [
        {
            "attendee": name,
            "seed": base * 1000 + n,
            "answers": {q: question(q, base * 1000 + n).answers() for q in ids},
        }
        for n, name in enumerate(attendee_ids(students), 1)
    ]
    return {"format": KEY_FORMAT, "version": KEY_VERSION, "questions": list(ids), "attendees": attendees}


def _cells(q: Question, n: int, v4) -> list:
    """One question's cells: its text, its answer cell (tagged "answer"), a check, and a lab run if any."""
    answer = "answer = {\n" + "".join(f"    {p.name!r}: None,  # {p.ask}\n" for p in q.parts) + "}"
    tagged = {"tags": ["answer", f"question:{q.id}"], "workshop": {"question": q.id}}
    cells = [
        v4.new_markdown_cell(question_markdown(q, n), id=f"{q.id}-text"),
        v4.new_code_cell(answer, metadata=tagged, id=f"{q.id}-answer"),
        v4.new_code_cell(f"my.check({q.id!r}, answer)", id=f"{q.id}-check"),
    ]
    if q.id in measure.FAMILIES:
        cells.append(
            v4.new_code_cell(f"my.measure({q.id!r}, answer)  # runs the lab for this case", id=f"{q.id}-lab")
        )
    return cells


def notebook(one: Sheet):
    """The sheet as a notebook: per question, its text, an answer cell tagged "answer", and a check cell."""
    import nbformat.v4 as v4  # the classroom's Jupyter brings nbformat; only this function needs it

    intro = (
        "# Workshop sheet" + (f" for {one.attendee}" if one.attendee else "") + "\n\nReplace each `None` in "
        'an answer cell, run it, then run the cell below it: `my.check` marks every part "right" or "not '
        'yet" and says why. Only the answer cells are collected, as plain values: write numbers, text, True '
        "or False."
    )
    seed = f"SEED = {one.seed}  # your seed: the grader checks it against the key"
    setup = "from zero_lessons.workshop import sheet\n\nmy = sheet(SEED)"
    cells = [
        v4.new_markdown_cell(intro, id="intro"),
        v4.new_code_cell(seed, metadata={"tags": ["seed"]}, id="seed"),
        v4.new_code_cell(setup, id="setup"),
    ]
    for n, q in enumerate(one.questions, 1):
        cells += _cells(q, n, v4)
    book = v4.new_notebook(cells=cells)
    book.metadata["workshop"] = {"attendee": one.attendee, "seed": one.seed, "version": KEY_VERSION}
    book.metadata["kernelspec"] = {
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "name": "python3",
    }
    return book


def write_class(students: int, key_path, folder, *, seed: int = 0, only=None) -> list:
    """Write the answer key to `key_path` and one sheet per attendee (A01.ipynb, ...) into `folder`."""
    import json
    from pathlib import Path

    import nbformat

    key, folder = answer_key(students, seed=seed, only=only), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    Path(key_path).write_text(json.dumps(key, indent=1) + "\n", encoding="utf-8")
    written = []
    for entry in key["attendees"]:
        path = folder / f"{entry['attendee']}.ipynb"
        nbformat.write(notebook(sheet(entry["seed"], only=only, attendee=entry["attendee"])), path)
        written.append(path)
    return written
