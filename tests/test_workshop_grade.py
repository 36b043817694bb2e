"""Grading a folder of sheets: right, wrong, blank, malformed and hostile submissions, read as data only."""

from __future__ import annotations

import csv
import io
import json
import time

import nbformat
import pytest

from zero_lessons.workshop import answer_key, grade
from zero_lessons.workshop.grade import MAX_FILE_BYTES, Refused, literal, load_key, write
from zero_lessons.workshop.sheets import QUESTIONS, notebook, question, sheet, variant, write_class
from zero_lessons.workshop.traces import tell

IDS = list(QUESTIONS)


def filled(entry: dict, answers: dict | None = None, raw: dict | None = None, attendee: str | None = None):
    """The attendee's sheet as a notebook, answer cells set from `answers` (values) or `raw` (cell text)."""
    book = notebook(sheet(entry["seed"], attendee=entry["attendee"]))
    for cell in book.cells:
        qid = cell.metadata.get("workshop", {}).get("question")
        if answers and qid in answers:
            cell.source = f"answer = {answers[qid]!r}  # filled in"
        if raw and qid in raw:
            cell.source = raw[qid]
    if attendee is not None:
        book.metadata["workshop"]["attendee"] = attendee
    return book


def with_words(answers: dict) -> dict:
    """The same answers written the way people type them: stages as "ZeRO-n", yes/no as words."""
    out = {}
    for qid, parts in answers.items():
        kinds = {p.name: p.kind for p in question(qid, 1).parts}
        out[qid] = {
            k: f"ZeRO-{v}" if kinds[k] == "stage" else ("yes" if v else "no") if kinds[k] == "yes/no" else v
            for k, v in parts.items()
        }
    return out


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    """30 submissions and the key in a folder: (folder, key path, expected status and marks, sentinel)."""
    folder, key = tmp_path_factory.mktemp("submissions"), answer_key(30, seed=2)
    key_path = folder.parent / "key.json"
    key_path.write_text(json.dumps(key))
    sentinel = folder.parent / "hacked"
    people = {e["attendee"]: e for e in key["attendees"]}
    right = {name: e["answers"] for name, e in people.items()}
    expected = {}

    def save(name, book, marks=None, status="graded"):
        nbformat.write(book, folder / f"{name}.ipynb")
        expected[name] = (status, marks)

    for n in range(1, 11):
        save(f"A{n:02d}", filled(people[f"A{n:02d}"], right[f"A{n:02d}"]), dict.fromkeys(IDS, "right"))
    for n in range(11, 16):
        slip = right[f"A{n}"] | {"audit-4x-rule": right[f"A{n}"]["audit-4x-rule"] | {"missing_bytes": 4}}
        save(
            f"A{n}", filled(people[f"A{n}"], slip), dict.fromkeys(IDS, "right") | {"audit-4x-rule": "not yet"}
        )
    for n in (16, 17):
        save(f"A{n}", filled(people[f"A{n}"]), dict.fromkeys(IDS, "blank"))
    code = {
        "offload-pays": f"answer = __import__('pathlib').Path({str(sentinel)!r}).write_text('x')",
        "audit-10-bytes": f"import os\nos.system('touch {sentinel}')",
    }
    save(
        "A18",
        filled(people["A18"], right["A18"], raw=code),
        dict.fromkeys(IDS, "right") | dict.fromkeys(code, "unreadable"),
    )
    odd = {"stage-and-checkpointing": right["A19"]["stage-and-checkpointing"] | {"stage": [1, 2]}}
    save(
        "A19",
        filled(people["A19"], right["A19"] | odd, raw={"audit-4x-rule": f"answer = {'9' * 5000!r}"}),
        dict.fromkeys(IDS, "right") | {"stage-and-checkpointing": "not yet", "audit-4x-rule": "unreadable"},
    )
    (folder / "A20.ipynb").write_text('{"cells": [' + " " * (MAX_FILE_BYTES + 10) + "]}")
    expected["A20"] = ("refused: the file has", None)
    (folder / "A21.ipynb").write_text(nbformat.writes(filled(people["A21"], right["A21"]))[:500])
    expected["A21"] = ("refused: the file is not valid JSON", None)
    (folder / "A22.ipynb").write_text("[1, 2, 3]")
    expected["A22"] = ("refused: not a Jupyter notebook", None)
    (folder / "A23.ipynb").write_text("[" * 100_000 + "]" * 100_000)
    expected["A23"] = ("refused: the file is not valid JSON", None)
    save("A24", filled(people["A24"], right["A24"], attendee="Z99"), status="refused: attendee 'Z99' is not")
    save("A25", filled(people["A01"], right["A01"]), status="refused: A01 was already graded from A01.ipynb")
    (folder / "A26.ipynb").write_text(json.dumps({"cells": [], "nbformat": 4}))
    expected["A26"] = ("refused: not a Jupyter notebook of format 4", None)
    save("A27", filled(people["A27"], with_words(right["A27"])), dict.fromkeys(IDS, "right"))
    wrong = right["A28"]["traffic-detective"] | {
        "setting": "ddp" if right["A28"]["traffic-detective"]["setting"] != "ddp" else "ds_zero3"
    }
    save(
        "A28",
        filled(people["A28"], right["A28"] | {"traffic-detective": wrong}),
        dict.fromkeys(IDS, "right") | {"traffic-detective": "not yet"},
    )
    (folder / "A29.ipynb").symlink_to(folder / "A01.ipynb")
    expected["A29"] = ("refused: the file is not a plain file", None)
    save(
        "A30",
        filled(people["A30"], {q: right["A30"][q] for q in IDS[:7]}),
        dict.fromkeys(IDS[:7], "right") | dict.fromkeys(IDS[7:], "blank"),
    )
    (folder / "notes.txt").write_text("not a notebook, not graded")
    return folder, key_path, expected, sentinel


def test_grading_thirty_submissions_gives_the_expected_csv_quickly(classroom, tmp_path):
    folder, key_path, expected, sentinel = classroom
    variant.cache_clear()  # time the grader from cold: every variant is generated again from its seed
    start = time.monotonic()
    report = grade(folder, key_path)
    grades_path, summary_path = write(report, tmp_path / "out")
    assert time.monotonic() - start <= 30
    rows = list(csv.reader(io.StringIO(grades_path.read_text())))
    assert rows[0] == ["attendee", "file", "status", "score", *IDS]
    assert [r[1] for r in rows[1:]] == [f"A{n:02d}.ipynb" for n in range(1, 31)]
    for row in rows[1:]:
        status, marks = expected[row[1].removesuffix(".ipynb")]
        assert row[2].startswith(status), (row[1], row[2])
        if marks is None or status != "graded":
            assert row[0] == "" and row[3] == "" and row[4:] == [""] * len(IDS)
        else:
            assert row[0] == row[1].removesuffix(".ipynb") and row[4:] == [marks[q] for q in IDS], row[1]
            assert row[3] == f"{sum(m == 'right' for m in marks.values())}/{len(IDS)}"
    assert not sentinel.exists(), "code in an answer cell ran"


def test_the_summary_counts_right_answers_and_names_the_most_common_slip(classroom):
    folder, key_path, expected, _ = classroom
    summary = {row[0]: row for row in grade(folder, key_path).summary()[1:]}
    graded = [marks for status, marks in expected.values() if status == "graded"]
    for qid in IDS:
        right = sum(m[qid] == "right" for m in graded)
        answered = sum(m[qid] in ("right", "not yet") for m in graded)
        assert summary[qid][1:4] == [str(len(graded)), str(answered), str(right)], qid
    assert summary["audit-4x-rule"][4:] == ["missing_bytes: master-only", "5"]
    truth = next(a for a in json.loads(key_path.read_text())["attendees"] if a["attendee"] == "A28")
    truth = truth["answers"]["traffic-detective"]["setting"]
    slip = tell("ddp" if truth != "ddp" else "ds_zero3", truth)
    assert summary["traffic-detective"][4:] == [f"setting: {slip}", "1"]
    assert summary["stage-and-checkpointing"][4:] == ["stage: missed", "1"]
    assert summary["offload-pays"][4:] == ["", ""]


def test_every_refusal_and_unreadable_cell_is_reported_for_its_file_alone(classroom):
    folder, key_path, _, _ = classroom
    messages = grade(folder, key_path).messages()
    assert "A20.ipynb: refused: the file has" in next(m for m in messages if m.startswith("A20"))
    assert any(m.startswith("A18.ipynb: offload-pays: the answer cell holds code") for m in messages)
    assert any(
        m.startswith("A18.ipynb: audit-10-bytes: the answer cell must hold one statement") for m in messages
    )
    assert any(
        m.startswith("A19.ipynb: audit-4x-rule: the answer cell has 5,011 characters") for m in messages
    )
    assert len([m for m in messages if m.startswith("A0")]) == 0


@pytest.mark.parametrize(
    "source, reason",
    [
        ("answer = (lambda: 1)()", "holds code"),
        ("answer = {'x': open('f')}", "holds code"),
        ("answer: int = 3", "not a AnnAssign statement"),
        ("del answer", "not a Delete statement"),
        ("answer = [" * 300 + "]" * 300, "not valid Python"),
        ("answer = {", "not valid Python"),
        ("a = 1\nb = 2", "holds 2"),
        ("x" * 4001, "at most 4,000"),
    ],
)
def test_answer_cells_are_read_as_plain_values_only(source, reason):
    with pytest.raises(Refused, match=reason):
        literal(source)


def test_plain_values_are_read():
    assert literal("answer = {'stage': 3, 'fits': True, 'gb': 41.25}  # mine") == {
        "stage": 3,
        "fits": True,
        "gb": 41.25,
    }
    assert literal("# just a value\n[1, 'two', None]") == [1, "two", None]


def test_a_key_from_another_version_or_format_is_refused(tmp_path):
    key = answer_key(2)
    key["attendees"][0]["answers"]["audit-4x-rule"]["rule_bytes"] = 9
    with pytest.raises(ValueError, match="A01's answers differ from what this version generates"):
        load_key(key)
    with pytest.raises(ValueError, match="not a 'zero-lessons workshop key'"):
        load_key({"format": "something else"})
    (tmp_path / "key.json").write_text("{broken")
    with pytest.raises(ValueError, match="key: key key.json is not valid JSON"):
        load_key(tmp_path / "key.json")
    with pytest.raises(ValueError, match="is not a folder"):
        grade(tmp_path / "missing", answer_key(1))
    with pytest.raises(TypeError, match="submissions must be the path of a folder, got int"):
        grade(3, answer_key(1))
    with pytest.raises(TypeError, match="key must be the dict answer_key"):
        grade(tmp_path, ["not", "a", "key"])


def test_the_class_written_to_disk_grades_blank_and_then_right(tmp_path):
    paths = write_class(
        3, tmp_path / "key.json", tmp_path / "sheets", seed=5, only=["offload-pays", "audit-4x-rule"]
    )
    assert [p.name for p in paths] == ["A01.ipynb", "A02.ipynb", "A03.ipynb"]
    blank = grade(tmp_path / "sheets", tmp_path / "key.json")
    assert [row[2:] for row in blank.table()[1:]] == [["graded", "0/2", "blank", "blank"]] * 3
    key = json.loads((tmp_path / "key.json").read_text())
    book = nbformat.read(paths[1], as_version=4)
    for cell in book.cells:
        qid = cell.metadata.get("workshop", {}).get("question")
        if qid:
            cell.source = f"answer = {key['attendees'][1]['answers'][qid]!r}"
    nbformat.write(book, paths[1])
    assert grade(tmp_path / "sheets", tmp_path / "key.json").table()[2][2:] == [
        "graded",
        "2/2",
        "right",
        "right",
    ]
