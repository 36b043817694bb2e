"""Subcommand `workshop`: one attendee's sheet, or every attendee's sheet and the instructor's answer key."""

from __future__ import annotations

import argparse

from .grammar import path_name

HELP = "one attendee's workshop sheet, or a class's sheets and the answer key"
EXAMPLES = """examples:
  zero-lessons workshop --seed 17                      print the sheet for seed 17 (Markdown)
  zero-lessons workshop --seed 17 --out sheet17.ipynb  the same sheet as a notebook to fill in
  zero-lessons workshop --students 30 --key key.json --out sheets
                                                       30 notebooks (A01 ... A30) and the answer key
  zero-lessons workshop --students 30 --seed 4 --key key.json
                                                       another class: attendee n gets seed 4000 + n

With --students, --seed is the class's seed (0 to 999,999) and attendee n gets seed × 1000 + n;
the key holds every attendee's seed and right answers. Grade with `zero-lessons grade`.
Nothing is overwritten: a sheet or key that already exists is an error, so filled-in work is safe."""

MAX_SEED = 10**9  #: the workshop's largest seed (workshop.model.MAX_SEED; read here without importing it)
MAX_CLASS_SEED = MAX_SEED // 1000 - 1  #: a class's seed: attendee n's seed is seed × 1000 + n
MAX_STUDENTS = 1000  #: the most attendees in one class (workshop.sheets.MAX_STUDENTS)


def _whole(flag: str, low: int, high: int):
    """A reader of plain digits from `low` to `high` whose error names `flag` and the range."""

    def read(text: str) -> int:
        if not text.strip().isascii() or not text.strip().isdigit() or len(text.strip()) > 12:
            raise argparse.ArgumentTypeError(
                f"must be a whole number from {low:,} to {high:,}, got {text[:40]!r}"
            )
        number = int(text.strip())
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(
                f"must be a whole number from {low:,} to {high:,}, got {number:,}"
            )
        return number

    read.__name__ = flag
    return read


def add(parser) -> None:
    """Declare the subcommand's flags."""
    parser.add_argument(
        "--seed",
        type=_whole("seed", 0, MAX_SEED),
        help=f"the attendee's seed (0 to {MAX_SEED:,}); with --students, the class's seed (0 to "
        f"{MAX_CLASS_SEED:,}, default 0)",
    )
    parser.add_argument(
        "--students",
        type=_whole("students", 1, MAX_STUDENTS),
        help=f"write a sheet for each of this many attendees (1 to {MAX_STUDENTS:,}) and the answer key",
    )
    parser.add_argument(
        "--key", type=path_name("key"), metavar="FILE", help="with --students: where to write the answer key"
    )
    parser.add_argument(
        "--out",
        type=path_name("out"),
        metavar="PATH",
        help="with --seed: write the sheet to this .ipynb file; with --students: the folder for the sheets "
        "(default sheets)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _checked(args) -> None:
    """The flags make sense together, or ValueError naming the flag."""
    if args.students is None:
        if args.seed is None:
            raise ValueError(
                "give --seed N (one attendee's sheet) or --students N --key FILE (a whole class)"
            )
        if args.key is not None:
            raise ValueError("--key needs --students: the answer key is written for a whole class")
        if args.out is not None and not args.out.endswith(".ipynb"):
            raise ValueError(f"--out must name a .ipynb file for one sheet, got {args.out[:60]!r}")
        return
    if args.key is None:
        raise ValueError("--students needs --key FILE: where to write the answer key")
    if args.seed is not None and args.seed > MAX_CLASS_SEED:
        raise ValueError(
            f"--seed must be a whole number from 0 to {MAX_CLASS_SEED:,} with --students, got {args.seed:,}"
        )


def _fresh(paths, flag: str) -> None:
    """None of `paths` exists yet, or ValueError naming `flag`: a sheet or key is never overwritten."""
    import os

    there = [str(p) for p in paths if os.path.lexists(p)]
    if there:
        raise ValueError(f"{flag}: {there[0][:60]!r} already exists; choose another name or an empty folder")


def _one(args) -> int:
    """Print one attendee's sheet, or write it as a notebook."""
    from .. import workshop
    from ..workshop.sheets import notebook
    from .output import emit

    one = workshop.sheet(args.seed)
    if args.out is not None:
        import nbformat

        _fresh([args.out], "--out")
        _write(lambda: nbformat.write(notebook(one), args.out), "--out", args.out)
        done = f"wrote the sheet for seed {args.seed} ({len(one.questions)} questions) to {args.out}"
        return emit({"seed": args.seed, "notebook": args.out} if args.json else done)
    if args.json:
        return emit({"seed": one.seed, "questions": [_question(q) for q in one.questions]})
    return emit(one.markdown().rstrip("\n"))


def _question(q) -> dict:
    """A question as plain JSON data: id, title, prompt, and what each part asks."""
    return {
        "id": q.id,
        "title": q.title,
        "prompt": q.prompt,
        "parts": [{"name": p.name, "ask": p.ask} for p in q.parts],
    }


def _write(action, flag: str, path: str):
    """Run `action`, which writes `path`; a failure is one line naming `flag`."""
    try:
        return action()
    except (OSError, ValueError) as err:
        why = getattr(err, "strerror", None) or str(err)
        raise ValueError(f"{flag}: cannot write {path[:60]!r}: {why}") from None


def _class(args) -> int:
    """Write every attendee's sheet and the answer key; print where they went."""
    from pathlib import Path

    from ..workshop.sheets import attendee_ids, write_class
    from .output import emit

    folder, seed = args.out or "sheets", args.seed or 0
    _fresh([args.key], "--key")
    _fresh([Path(folder) / f"{name}.ipynb" for name in attendee_ids(args.students)], "--out")
    paths = _write(lambda: write_class(args.students, args.key, folder, seed=seed), "--out/--key", folder)
    names = [p.name for p in paths]
    if args.json:
        return emit({"key": args.key, "folder": folder, "sheets": names, "class_seed": seed})
    return emit(
        f"wrote {len(names)} sheets to {folder}/ ({names[0]} ... {names[-1]}, seeds {seed * 1000 + 1} to "
        f"{seed * 1000 + len(names)}) and the answer key to {args.key}\n"
        f"grade them with: zero-lessons grade SUBMISSIONS_DIR --key {args.key}"
    )


def main(args) -> int:
    """Answer the subcommand."""
    _checked(args)
    return _one(args) if args.students is None else _class(args)
