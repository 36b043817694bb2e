"""Grading a folder of completed sheets without running any of it: answer cells are read as data.

Each notebook is read by `submission` as plain JSON and never executed; its answer cells are marked
"right", "not yet", "blank" or "unreadable" (a cell that holds code). A file that is too big, not a
notebook, not in the key or for another seed is refused with a message for that file alone. The report
is a CSV of attendee × question and a per-question summary: how many got it right, the most common slip.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

from .feedback import NOT_YET, RIGHT, assess
from .model import Question
from .sheets import ATTENDEE, KEY_FORMAT, KEY_VERSION, QUESTIONS, question
from .submission import MAX_FILE_BYTES, Refused, literal, read_json, read_submission

__all__ = ["MAX_FILE_BYTES", "Refused", "grade", "literal", "load_key", "write"]

MAX_FILES = 2000  #: most notebooks graded in one run
BLANK, UNREADABLE = "blank", "unreadable"


def load_key(key) -> tuple[tuple[str, ...], dict[str, int]]:
    """The questions and each attendee's seed from an answer key (a dict or a JSON file), checked against
    the questions this version generates, so a key from another version is refused rather than misused."""
    if not isinstance(key, (dict, str, PathLike)):
        raise TypeError(
            f"key must be the dict answer_key() gives or the path of its JSON file, got {type(key).__name__}"
        )
    if not isinstance(key, dict):
        try:
            key = read_json(Path(key), f"key {Path(key).name}")
        except Refused as err:
            raise ValueError(f"key: {err}") from None
    if not isinstance(key, dict) or key.get("format") != KEY_FORMAT or key.get("version") != KEY_VERSION:
        raise ValueError(
            f"key: not a {KEY_FORMAT!r} of version {KEY_VERSION}; make one with "
            "`zero-lessons workshop --students N --key FILE` or answer_key()"
        )
    ids = key.get("questions")
    if not isinstance(ids, list) or not ids or any(q not in QUESTIONS for q in ids):
        raise ValueError(f"key: questions must be a list of ids from {', '.join(QUESTIONS)}")
    seeds: dict[str, int] = {}
    for entry in key.get("attendees", []):
        name, seed = entry.get("attendee"), entry.get("seed")
        if not isinstance(name, str) or not re.fullmatch(ATTENDEE, name) or not isinstance(seed, int):
            raise ValueError(f"key: each attendee needs a short id and a whole seed, got {str(entry)[:80]}")
        if entry.get("answers") != {q: question(q, seed).answers() for q in ids}:
            raise ValueError(
                f"key: {name}'s answers differ from what this version generates for seed {seed}; "
                f"make the key again with this version"
            )
        seeds[name] = seed
    return tuple(ids), seeds


@dataclass(frozen=True)
class Graded:
    """One submission's grades, or why it was refused."""

    file: str  #: the file's name, with any odd character shown as "?"
    attendee: str  #: the attendee's id; "" when refused before it was known
    status: str  #: "graded", or "refused: " and the reason
    marks: dict[str, str]  #: question id -> "right", "not yet", "blank" or "unreadable"
    slips: dict[
        str, tuple[str, ...]
    ]  #: question id -> "part: slip-key" (or "part: missed") for each part not right
    notes: tuple[str, ...] = ()  #: why an answer cell could not be read


def _grade_answer(q: Question, source) -> tuple[str, tuple[str, ...], str | None]:
    """(mark, slips, note) for one answer cell's text."""
    if source is None:
        return BLANK, (), None
    try:
        value = literal(source)
        if isinstance(value, dict) and value and all(v is None for v in value.values()):
            return BLANK, (), None
        feedback = assess(q, value)
    except (ValueError, TypeError, ArithmeticError) as err:
        return UNREADABLE, (), f"{q.id}: {err}"
    if feedback.problem:
        return UNREADABLE, (), f"{q.id}: {feedback.problem}"
    slips = tuple(
        f"{m.part}: {m.slip or ('missed' if m.answered else 'blank')}" for m in feedback.marks if not m.right
    )
    return (RIGHT if feedback.correct else NOT_YET), slips, None


def _grade_file(path: Path, ids, seeds: dict[str, int], seen: dict[str, str]) -> Graded:
    """Grade one notebook, or refuse it with a reason; never raise."""
    shown = (
        path.name if re.fullmatch(ATTENDEE, path.name) else re.sub(r"[^A-Za-z0-9_.-]", "?", path.name)[:60]
    )
    try:
        attendee, answers, seed = read_submission(path, ids)
        if attendee not in seeds:
            raise Refused(f"attendee {attendee!r} is not in the key")
        if seed is not None and seed != seeds[attendee]:
            raise Refused(
                f"the sheet's SEED is {str(seed)[:20]}, but the key gives {attendee} seed {seeds[attendee]}: "
                f"its answers are for another variant"
            )
        if attendee in seen:
            raise Refused(f"{attendee} was already graded from {seen[attendee]}")
    except Refused as err:
        return Graded(shown, "", f"refused: {err}", {}, {})
    seen[attendee] = shown
    graded = {q: _grade_answer(question(q, seeds[attendee]), answers.get(q)) for q in ids}
    return Graded(
        shown,
        attendee,
        "graded",
        {q: g[0] for q, g in graded.items()},
        {q: g[1] for q, g in graded.items()},
        tuple(g[2] for g in graded.values() if g[2]),
    )


@dataclass(frozen=True)
class Report:
    """A grading run: the questions, and one Graded per submission, in file order."""

    questions: tuple[str, ...]  #: the key's questions, in order
    rows: tuple[Graded, ...]  #: one per notebook

    def table(self) -> list[list[str]]:
        """Attendee × question, with a header: attendee, file, status, score, then one mark per question."""
        out = [["attendee", "file", "status", "score", *self.questions]]
        for g in self.rows:
            score = f"{sum(m == RIGHT for m in g.marks.values())}/{len(self.questions)}" if g.marks else ""
            out.append([g.attendee, g.file, g.status, score, *(g.marks.get(q, "") for q in self.questions)])
        return out

    def summary(self) -> list[list[str]]:
        """Per question: submissions graded, answered, right, and the most common slip with its count."""
        out = [["question", "graded", "answered", "right", "most common slip", "slip count"]]
        graded = [g for g in self.rows if g.status == "graded"]
        for q in self.questions:
            marks = [g.marks[q] for g in graded]
            slips = Counter(s for g in graded if g.marks[q] == NOT_YET for s in g.slips[q])
            common = min(slips.items(), key=lambda item: (-item[1], item[0])) if slips else ("", 0)
            out.append(
                [
                    q,
                    str(len(graded)),
                    str(sum(m in (RIGHT, NOT_YET) for m in marks)),
                    str(marks.count(RIGHT)),
                    common[0],
                    str(common[1]) if common[0] else "",
                ]
            )
        return out

    def messages(self) -> list[str]:
        """One line per refused file or unreadable answer, for the instructor."""
        return [f"{g.file}: {g.status}" for g in self.rows if g.status != "graded"] + [
            f"{g.file}: {note}" for g in self.rows for note in g.notes
        ]


def to_csv(rows: list[list[str]]) -> str:
    """Rows as CSV text."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def grade(folder, key) -> Report:
    """Grade every *.ipynb in `folder` against `key` (a dict, or key.json's path); nothing is executed."""
    if not isinstance(folder, (str, PathLike)):
        raise TypeError(f"submissions must be the path of a folder, got {type(folder).__name__}")
    ids, seeds = load_key(key)
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"submissions: {folder.name!r} is not a folder")
    seen: dict[str, str] = {}
    paths = sorted(folder.glob("*.ipynb"))
    if len(paths) > MAX_FILES:
        raise ValueError(f"submissions: {len(paths):,} notebooks; at most {MAX_FILES:,} are graded per run")
    return Report(ids, tuple(_grade_file(path, ids, seeds, seen) for path in paths))


def write(report: Report, out) -> tuple[Path, Path]:
    """Write grades.csv (attendee × question) and summary.csv (per question) into the folder `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    grades, summary = out / "grades.csv", out / "summary.csv"
    grades.write_text(to_csv(report.table()), encoding="utf-8")
    summary.write_text(to_csv(report.summary()), encoding="utf-8")
    return grades, summary
