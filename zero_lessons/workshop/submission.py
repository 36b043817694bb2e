"""Reading one completed sheet as data, without running any of it: its attendee, seed and answer cells.

A notebook is read as plain JSON and checked for a notebook's shape (format 4); no schema library is
loaded, so grading starts fast. Only code cells tagged "answer" are read (the question named in their
"workshop" metadata or by a "question:ID" tag), each as one plain value or one `answer = value`
assignment that `ast.literal_eval` reads: numbers, text, True/False/None, lists and dicts.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from .sheets import ATTENDEE

MAX_FILE_BYTES = 2 * 2**20  #: a filled-in sheet is about 50 kB; anything past 2 MiB is refused unread
MAX_ANSWER_CHARS = 4000  #: longest answer cell read


class Refused(ValueError):
    """A submission, or one answer cell, that cannot be graded; the message says why."""


def literal(source: str):
    """The value an answer cell holds: one literal, or one `name = literal` assignment. Nothing is run."""
    if not isinstance(source, str):
        raise Refused("the answer cell holds no text")
    if len(source) > MAX_ANSWER_CHARS:
        raise Refused(
            f"the answer cell has {len(source):,} characters; at most {MAX_ANSWER_CHARS:,} are read"
        )
    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError, MemoryError, RecursionError) as err:
        raise Refused(f"the answer cell is not valid Python ({type(err).__name__})") from None
    if len(body) != 1:
        raise Refused(f"the answer cell must hold one statement, answer = {{...}}; it holds {len(body)}")
    node = body[0]
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        node = node.value
    elif isinstance(node, ast.Expr):
        node = node.value
    else:
        raise Refused(f"the answer cell must be answer = {{...}}, not a {type(node).__name__} statement")
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise Refused(
            "the answer cell holds code, not plain values: only numbers, text, True/False/None, "
            "lists and dicts are read"
        ) from None


def read_json(path: Path, what: str):
    """A JSON file of at most MAX_FILE_BYTES, or Refused naming `what`."""
    if path.is_symlink() or not path.is_file():
        raise Refused(f"{what} is not a plain file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise Refused(f"{what} has {size:,} bytes; at most {MAX_FILE_BYTES:,} are read")
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise Refused(f"{what} is not valid JSON ({type(err).__name__})") from None


def _text(cell: dict) -> str:
    """A cell's text: on disk it may be a list of lines."""
    lines = cell["source"]
    return "".join(lines) if isinstance(lines, list) else lines


def _tags(cell: dict) -> list:
    """A cell's tags, or none when its metadata holds no list of them."""
    tags = cell["metadata"].get("tags", [])
    return tags if isinstance(tags, list) else []


def _cell_shaped(cell) -> bool:
    """Whether `cell` has what the grader reads: a known type, metadata, and text or a list of lines."""
    source = cell.get("source") if isinstance(cell, dict) else None
    lines = isinstance(source, list) and all(isinstance(line, str) for line in source)
    return (
        cell.get("cell_type") in ("code", "markdown", "raw")
        and isinstance(cell.get("metadata"), dict)
        and (isinstance(source, str) or lines)
    )


def notebook_cells(data) -> list[dict]:
    """The cells of `data` when it has the shape of a format-4 notebook (read as plain JSON: no schema
    library is loaded, so grading starts fast), else Refused."""
    shaped = (
        isinstance(data, dict)
        and data.get("nbformat") == 4
        and type(data.get("nbformat_minor")) is int
        and isinstance(data.get("metadata"), dict)
        and isinstance(data.get("cells"), list)
    )
    if not shaped or not all(_cell_shaped(cell) for cell in data["cells"]):
        raise Refused("not a Jupyter notebook of format 4: it lacks cells, metadata or nbformat 4")
    return data["cells"]


def _question_of(cell: dict, ids) -> str | None:
    """The question an answer cell answers: from its "workshop" metadata, or from a "question:ID" tag
    (lesson 19 keeps tags only), when it is one of `ids`."""
    tags, meta = _tags(cell), cell["metadata"].get("workshop")
    qid = meta.get("question") if isinstance(meta, dict) else None
    if qid is None:
        qid = next((t.removeprefix("question:") for t in tags if str(t).startswith("question:")), None)
    return qid if cell["cell_type"] == "code" and "answer" in tags and qid in ids else None


def read_submission(path: Path, ids) -> tuple[str, dict[str, str], object]:
    """The attendee's id (from the notebook's metadata, else the file name), each answer cell's text, and
    the seed its cell tagged "seed" holds (None when there is no such cell)."""
    data = read_json(path, "the file")
    cells = notebook_cells(data)
    meta = data["metadata"].get("workshop")
    attendee = meta.get("attendee") if isinstance(meta, dict) else None
    attendee = attendee if isinstance(attendee, str) and re.fullmatch(ATTENDEE, attendee) else path.stem
    answers: dict[str, str] = {}
    for cell in cells:
        qid = _question_of(cell, ids)
        if qid is not None and qid not in answers:
            answers[qid] = _text(cell)
    seeds = [_text(c) for c in cells if c["cell_type"] == "code" and "seed" in _tags(c)]
    if not seeds:
        return attendee, answers, None
    try:
        return attendee, answers, literal(seeds[0])
    except Refused:
        raise Refused("the cell tagged seed must hold SEED = a whole number, and nothing else") from None
