"""`zero-lessons workshop` and `zero-lessons grade` end to end, without the lab.

A class of thirty is written through the command line, its sheets filled in (right, wrong, in words,
blank, hostile and malformed, and one copy of lesson 19 itself), and graded through the command line in
under 30 s; the CSV is checked cell by cell against what each submission should get.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from zero_lessons import cli
from zero_lessons.cli import command_workshop
from zero_lessons.workshop import model, sheets
from zero_lessons.workshop.grade import MAX_FILE_BYTES
from zero_lessons.workshop.sheets import QUESTIONS, question

ROOT = Path(__file__).resolve().parents[1]
IDS = list(QUESTIONS)
ALL_RIGHT = dict.fromkeys(IDS, "right")


def command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `python -m zero_lessons ARGS` in `cwd`, as an instructor would."""
    return subprocess.run(
        [sys.executable, "-m", "zero_lessons", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def fill(book, answers: dict, raw: dict | None = None, seed: int | None = None):
    """`book` with each answer cell set to `answer = ...` from `answers`, or to the text in `raw`."""
    for cell in book.cells:
        tags = cell.metadata.get("tags", [])
        qid = next((t.removeprefix("question:") for t in tags if t.startswith("question:")), None)
        if qid in (raw or {}):
            cell.source = raw[qid]
        elif qid in answers:
            cell.source = f"answer = {answers[qid]!r}"
        if "seed" in tags and seed is not None:
            cell.source = f"SEED = {seed}"
    return book


def in_words(answers: dict) -> dict:
    """The same answers as people type them: stages as "stage 3" or "ZeRO 3", yes/no as words."""
    out = {}
    for qid, parts in answers.items():
        kinds = {p.name: p.kind for p in question(qid, 0).parts}
        spell = {
            "stage": lambda v: f"stage {v}" if v % 2 else f"ZeRO {v}",
            "yes/no": lambda v: "yes" if v else "no",
        }
        out[qid] = {k: spell[kinds[k]](v) if kinds[k] in spell else v for k, v in parts.items()}
    return out


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """The class written by `workshop --students 30`, then filled in: (folder, expected rows, sentinel)."""
    room = tmp_path_factory.mktemp("room")
    made = command("workshop", "--students", "30", "--key", "key.json", "--out", "sheets", cwd=room)
    assert made.returncode == 0 and made.stderr == "", made.stderr
    assert made.stdout.startswith("wrote 30 sheets to sheets/ (A01.ipynb ... A30.ipynb, seeds 1 to 30)")
    key = {e["attendee"]: e for e in json.loads((room / "key.json").read_text())["attendees"]}
    folder, sentinel, expected = room / "sheets", room / "hacked", {}

    def sheet_of(name):
        return nbformat.read(folder / f"{name}.ipynb", as_version=4)

    def save(name, book, marks=ALL_RIGHT, status="graded"):
        nbformat.write(book, folder / f"{name}.ipynb")
        expected[name] = (status, marks)

    right = {name: entry["answers"] for name, entry in key.items()}
    for n in range(1, 11):
        save(f"A{n:02d}", fill(sheet_of(f"A{n:02d}"), right[f"A{n:02d}"]))
    for n in range(11, 15):  # the 4x rule's missing bytes counted as the master copy alone
        slip = right[f"A{n}"] | {"audit-4x-rule": right[f"A{n}"]["audit-4x-rule"] | {"missing_bytes": 4}}
        save(f"A{n}", fill(sheet_of(f"A{n}"), slip), ALL_RIGHT | {"audit-4x-rule": "not yet"})
    save("A15", fill(sheet_of("A15"), in_words(right["A15"])))
    stage = question("stage-and-checkpointing", 16).part("stage").slips[0].value
    wrong = right["A16"]["stage-and-checkpointing"] | {"stage": f"stage {int(stage)}"}
    save(
        "A16",
        fill(sheet_of("A16"), right["A16"] | {"stage-and-checkpointing": wrong}),
        ALL_RIGHT | {"stage-and-checkpointing": "not yet"},
    )
    save("A17", sheet_of("A17"), dict.fromkeys(IDS, "blank"))
    hostile = {
        "offload-pays": f"answer = __import__('pathlib').Path({str(sentinel)!r}).write_text('x')",
        "audit-10-bytes": f"import os\nos.system('touch {sentinel}')",
    }
    save(
        "A18",
        fill(sheet_of("A18"), right["A18"], raw=hostile),
        ALL_RIGHT | dict.fromkeys(hostile, "unreadable"),
    )
    save(
        "A19",
        fill(sheet_of("A19"), {q: right["A19"][q] for q in IDS[:7]}),
        ALL_RIGHT | dict.fromkeys(IDS[7:], "blank"),
    )
    save(
        "A20",
        fill(sheet_of("A20"), right["A20"], raw={"audit-4x-rule": f"answer = {'9' * 5000!r}"}),
        ALL_RIGHT | {"audit-4x-rule": "unreadable"},
    )
    lesson = fill(
        nbformat.read(ROOT / "notebooks" / "19_workshop_exercises.ipynb", as_version=4),
        right["A21"],
        seed=key["A21"]["seed"],
    )
    save("A21", lesson)  # lesson 19 itself, handed in under the attendee's id: tags only, no metadata
    save("A22", fill(sheet_of("A22"), right["A22"], seed=999), None, "refused: the sheet's SEED is 999")
    other = fill(sheet_of("A23"), right["A23"])
    other.metadata["workshop"]["attendee"] = "Z99"
    save("A23", other, None, "refused: attendee 'Z99' is not in the key")
    save("A24", fill(sheet_of("A01"), right["A01"]), None, "refused: A01 was already graded from A01.ipynb")
    broken = {
        "A25": (nbformat.writes(sheet_of("A25"))[:300], "refused: the file is not valid JSON"),
        "A26": ("[1, 2, 3]", "refused: not a Jupyter notebook of format 4"),
        "A27": ('{"cells": [' + " " * (MAX_FILE_BYTES + 10) + "]}", "refused: the file has"),
        "A28": ("[" * 100_000 + "]" * 100_000, "refused: the file is not valid JSON"),
        "A29": (json.dumps({"cells": [], "nbformat": 4}), "refused: not a Jupyter notebook of format 4"),
    }
    for name, (text, status) in broken.items():
        (folder / f"{name}.ipynb").write_text(text)
        expected[name] = (status, None)
    (folder / "A30.ipynb").unlink()
    (folder / "A30.ipynb").symlink_to(folder / "A01.ipynb")
    expected["A30"] = ("refused: the file is not a plain file", None)
    (folder / "notes.txt").write_text("not a notebook: not graded")
    return room, expected, sentinel


def test_grading_thirty_submissions_through_the_cli_gives_the_expected_csv(classroom):
    room, expected, sentinel = classroom
    start = time.monotonic()
    done = command("grade", "sheets", "--key", "key.json", "--out", "marks", cwd=room)
    seconds = time.monotonic() - start
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert seconds <= 30, f"grading took {seconds:.1f} s"
    rows = list(csv.reader(io.StringIO((room / "marks" / "grades.csv").read_text())))
    assert rows[0] == ["attendee", "file", "status", "score", *IDS]
    assert [r[1] for r in rows[1:]] == [f"A{n:02d}.ipynb" for n in range(1, 31)]
    for row in rows[1:]:
        status, marks = expected[row[1].removesuffix(".ipynb")]
        assert row[2].startswith(status), (row[1], row[2])
        if marks is None:
            assert row[0] == "" and row[3:] == [""] * (1 + len(IDS)), row
        else:
            score = f"{sum(m == 'right' for m in marks.values())}/{len(IDS)}"
            assert row == [row[1].removesuffix(".ipynb"), row[1], "graded", score, *(marks[q] for q in IDS)]
    assert not sentinel.exists(), "code in an answer cell ran"


def test_the_summary_is_written_and_printed_with_one_line_per_refused_file(classroom):
    room, expected, _ = classroom
    done = command("grade", "sheets", "--key", "key.json", "--out", "marks", cwd=room)
    summary = list(csv.reader(io.StringIO((room / "marks" / "summary.csv").read_text())))
    assert summary[0] == ["question", "graded", "answered", "right", "most common slip", "slip count"]
    graded = [marks for status, marks in expected.values() if status == "graded"]
    by_question = {row[0]: row for row in summary[1:]}
    for qid in IDS:
        answered = sum(m[qid] in ("right", "not yet") for m in graded)
        right = sum(m[qid] == "right" for m in graded)
        assert by_question[qid][1:4] == [str(len(graded)), str(answered), str(right)], qid
    assert by_question["audit-4x-rule"][4:] == ["missing_bytes: master-only", "4"]
    slip = question("stage-and-checkpointing", 16).part("stage").slips[0].key
    assert by_question["stage-and-checkpointing"][4:] == [f"stage: {slip}", "1"]
    assert by_question["offload-pays"][4:] == ["", ""]
    out = done.stdout.splitlines()
    assert out[0] == f"graded {len(graded)} of 30 sheets; wrote marks/grades.csv and marks/summary.csv"
    assert out[2].split() == [
        "question",
        "graded",
        "answered",
        "right",
        "most",
        "common",
        "slip",
        "slip",
        "count",
    ]
    refused = [name for name, (status, _) in expected.items() if status.startswith("refused")]
    listed = out[out.index("refused or unreadable (one line each):") + 1 :]
    assert sorted(line.split(":")[0] for line in listed if ": refused:" in line) == [
        f"{n}.ipynb" for n in refused
    ]
    assert any(line.startswith("A18.ipynb: offload-pays: the answer cell holds code") for line in listed)


def test_one_sheet_is_printed_or_written_as_a_notebook(tmp_path):
    shown = command("workshop", "--seed", "17", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout == sheets.sheet(17).markdown()
    done = command("workshop", "--seed", "17", "--out", "mine.ipynb", cwd=tmp_path)
    assert done.stdout == "wrote the sheet for seed 17 (14 questions) to mine.ipynb\n"
    book = nbformat.read(tmp_path / "mine.ipynb", as_version=4)
    assert "SEED = 17" in book.cells[1].source and "seed" in book.cells[1].metadata["tags"]
    tagged = [c for c in book.cells if "answer" in c.metadata.get("tags", [])]
    assert [c.metadata["tags"][1] for c in tagged] == [f"question:{q}" for q in IDS]
    data = json.loads(command("workshop", "--seed", "3", "--json", cwd=tmp_path).stdout)
    assert [q["id"] for q in data["questions"]] == IDS and data["questions"][0]["prompt"] == question(
        IDS[0], 3
    ).prompt


SEED_RANGE = "must be a whole number from 0 to 1,000,000,000, got"
STUDENTS_RANGE = "must be a whole number from 1 to 1,000, got"


@pytest.mark.parametrize(
    "argv, message",
    [
        ("workshop --seed -1", f"argument --seed: {SEED_RANGE} '-1'"),
        ("workshop --seed 1000000001", f"argument --seed: {SEED_RANGE} 1,000,000,001"),
        ("workshop --seed abc", f"argument --seed: {SEED_RANGE} 'abc'"),
        ("workshop --students 1001 --key k.json", f"argument --students: {STUDENTS_RANGE} 1,001"),
        ("workshop --students 0 --key k.json", f"argument --students: {STUDENTS_RANGE} 0"),
        ("workshop --students 3", "--students needs --key FILE: where to write the answer key"),
        (
            "workshop --seed 1 --key k.json",
            "--key needs --students: the answer key is written for a whole class",
        ),
        ("workshop --seed 1 --out sheet.txt", "--out must name a .ipynb file for one sheet, got 'sheet.txt'"),
        (
            "workshop --students 2 --seed 1000000 --key k.json",
            "--seed must be a whole number from 0 to 999,999 with --students, got 1,000,000",
        ),
        ("workshop", "give --seed N (one attendee's sheet) or --students N --key FILE (a whole class)"),
        ("grade sheets", "the following arguments are required: --key"),
        (
            "grade missing --key k.json",
            "SUBMISSIONS_DIR must be an existing folder of .ipynb sheets, got 'missing'",
        ),
        ("grade . --key k.json", "--key: k.json is not a plain file"),
        ("grade . --key bad.json", "--key: bad.json is not valid JSON (JSONDecodeError)"),
        ("grade . --key other.json", "--key: not a 'zero-lessons workshop key' of version 1; make one with"),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag_and_range(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{broken")
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(SystemExit) as done:
        cli.main(argv.split())
    out, err = capsys.readouterr()
    assert done.value.code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert message in err and err.startswith("zero-lessons"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "other.json"]  # nothing written


def test_the_commands_limits_are_the_workshops_own():
    assert command_workshop.MAX_SEED == model.MAX_SEED
    assert command_workshop.MAX_STUDENTS == sheets.MAX_STUDENTS
    assert command_workshop.MAX_CLASS_SEED == model.MAX_SEED // 1000 - 1


@pytest.mark.parametrize(
    "argv, there, flag",
    [
        ("workshop --seed 1 --out mine.ipynb", "mine.ipynb", "--out"),
        ("workshop --students 2 --key key.json", "key.json", "--key"),
        ("workshop --students 2 --key new.json --out sheets", "sheets/A02.ipynb", "--out"),
    ],
)
def test_nothing_is_overwritten(argv, there, flag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sheets").mkdir()
    (tmp_path / there).write_text("an attendee's work")
    with pytest.raises(SystemExit) as done:
        cli.main(argv.split())
    err = capsys.readouterr().err
    assert (
        done.value.code == 2
        and err
        == f"zero-lessons: error: {flag}: {there!r} already exists; choose another name or an empty folder\n"
    )
    assert (tmp_path / there).read_text() == "an attendee's work" and not (tmp_path / "new.json").exists()
