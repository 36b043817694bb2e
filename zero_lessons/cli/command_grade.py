"""Subcommand `grade`: a folder of completed sheets graded against the key, read as data and never run."""

from __future__ import annotations

from .grammar import path_name

HELP = "grade a folder of completed workshop sheets against the answer key (nothing in them is run)"
EXAMPLES = """examples:
  zero-lessons grade submissions --key key.json         grades.csv and summary.csv into grades/
  zero-lessons grade submissions --key key.json --out week1 --json

Only the answer cells (tagged "answer") are read, as plain values: numbers, text, True/False/None,
lists and dicts. A file that is not a sheet of this class, too big or malformed is refused with one
line for that file alone; the others are graded. grades.csv has one row per file and one column per
question ("right", "not yet", "blank" or "unreadable"); summary.csv has, per question, how many
answered, how many got it right, and the most common slip."""


def add(parser) -> None:
    """Declare the subcommand's flags."""
    parser.add_argument(
        "submissions",
        type=path_name("submissions"),
        metavar="SUBMISSIONS_DIR",
        help="folder of *.ipynb sheets",
    )
    parser.add_argument(
        "--key", type=path_name("key"), metavar="FILE", required=True, help="the answer key `workshop` wrote"
    )
    parser.add_argument(
        "--out",
        type=path_name("out"),
        metavar="DIR",
        default="grades",
        help="folder for grades.csv and summary.csv (default grades)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _table(rows: list[list[str]]) -> str:
    """Rows as a plain-text table, columns padded to their widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def _folder(path: str, flag: str) -> None:
    """`path` is an existing folder, or ValueError naming `flag`."""
    import os

    if not os.path.isdir(path):
        raise ValueError(f"{flag} must be an existing folder of .ipynb sheets, got {path[:60]!r}")


def main(args) -> int:
    """Grade, write the two CSV files, and print the summary and one line per refused file."""
    from ..workshop.grade import grade, write
    from .output import emit, one_line

    _folder(args.submissions, "SUBMISSIONS_DIR")
    try:
        report = grade(args.submissions, args.key)
    except ValueError as err:  # the key's errors start "key: "; name the flag instead
        text = str(err)
        if text.startswith("key: "):
            raise ValueError(f"--key: {text.removeprefix('key: ').removeprefix('key ')}") from None
        raise
    try:
        grades, summary = write(report, args.out)
    except (OSError, ValueError) as err:
        why = getattr(err, "strerror", None) or str(err)
        raise ValueError(f"--out: cannot write into {args.out[:60]!r}: {why}") from None
    graded = sum(row.status == "graded" for row in report.rows)
    if args.json:
        return emit(
            {
                "graded": graded,
                "refused": len(report.rows) - graded,
                "grades_csv": str(grades),
                "summary_csv": str(summary),
                "summary": report.summary(),
                "messages": report.messages(),
            }
        )
    head = f"graded {graded} of {len(report.rows)} sheets; wrote {grades} and {summary}"
    problems = [one_line(line) for line in report.messages()]
    tail = ["", "refused or unreadable (one line each):", *problems] if problems else []
    return emit("\n".join([head, "", _table(report.summary()), *tail]))
