"""Committed lessons are clean: run top to bottom, no errors, nothing machine-specific, no local helpers."""

import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
PATHS = re.compile(r"(/root/|/home/|/tmp/|/work/|[A-Z]:\\\\Users)")


def cells(path: pathlib.Path, kind: str = "code") -> list[dict]:
    """The cells of one kind in a notebook file."""
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == kind]


def test_lessons_exist_in_teaching_order():
    names = [p.name for p in NOTEBOOKS]
    assert names[:5] == [
        "00_start_here.ipynb",
        "01_the_training_state.ipynb",
        "02_partitioning_stage_by_stage.ipynb",
        "03_communication.ipynb",
        "04_choosing_a_stage.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_executed_in_order(path):
    counts = [c["execution_count"] for c in cells(path) if "".join(c["source"]).strip()]
    assert counts == list(range(1, len(counts) + 1))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_errors_stderr_paths_or_addresses(path):
    for cell in cells(path):
        for out in cell["outputs"]:
            assert out["output_type"] != "error", "".join(cell["source"])
            assert out.get("name") != "stderr", "".join(cell["source"])
            text = json.dumps(out.get("text", "")) + json.dumps(
                {k: v for k, v in out.get("data", {}).items() if not k.startswith("image/")}
            )
            assert not ADDRESS.search(text) and not PATHS.search(text), text[:200]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stray_metadata_and_no_local_helpers(path):
    meta = json.loads(path.read_text())["metadata"]
    assert set(meta) <= {"kernelspec", "language_info", "widgets"}
    assert meta["language_info"] == {"name": "python"}
    for cell in cells(path) + cells(path, "markdown"):
        assert set(cell["metadata"]) <= {"tags", "jupyter"}
        # folded in JupyterLab as in the book: hidden source with `hide-input`, hidden output `hide-output`
        folded = cell["metadata"].get("jupyter", {})
        tags = set(cell["metadata"].get("tags", []))
        assert folded in ({}, {"source_hidden": True}, {"outputs_hidden": True}), folded
        assert ("hide-input" in tags) == folded.get("source_hidden", False)
        assert ("hide-output" in tags) == folded.get("outputs_hidden", False)
    for cell in cells(path):
        source = "".join(cell["source"])
        assert not re.search(r"^\s*(def|class) |%run|%%file", source, re.M), source


TAKEAWAY = "> **Takeaway:**"
LESSONS = [p for p in NOTEBOOKS if not p.name.startswith(("00_", "19_", "20_"))]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_shape(path):
    text = "\n".join("".join(c["source"]) for c in cells(path, "markdown"))
    assert "You will learn" in text or "you will learn" in text
    assert "## Summary" in text and "## Exercises" in text and "<details>" in text


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_folded_answers_stay_folded(path):
    """The cell that checks a folded answer is collapsed in JupyterLab and in the book, and prints nothing."""
    every = json.loads(path.read_text())["cells"]
    for before, cell in zip(every, every[1:], strict=False):
        if before["cell_type"] == "markdown" and "<details>" in "".join(before["source"]):
            if cell["cell_type"] != "code":
                continue
            assert cell["metadata"].get("jupyter") == {"source_hidden": True}, "".join(cell["source"])[:80]
            assert "hide-input" in cell["metadata"].get("tags", []), "".join(cell["source"])[:80]
            assert not cell["outputs"], "".join(cell["source"])[:80]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_every_section_ends_with_a_takeaway(path):
    """Each '## ' section of a lesson (but the summary, exercises and navigation) ends with a takeaway box."""
    text = "\n".join("".join(c["source"]) for c in cells(path, "markdown"))
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    for section in sections:
        heading = section.splitlines()[0]
        if heading.startswith(("Summary", "Exercises", "You will learn", "Before you start")):
            continue
        assert TAKEAWAY in section, f"section {heading!r} has no '{TAKEAWAY}' box"


def test_workshop_notebooks_ask_every_exercise_in_the_package_words():
    """Lesson 19 shows every question of the package for its SEED, with an answer cell the grader reads;
    lesson 20 asserts that `check` (and, for the lab's questions, `measure`) accepts each worked answer."""
    from zero_lessons.workshop import QUESTIONS, sheet
    from zero_lessons.workshop.grade import literal
    from zero_lessons.workshop.measure import FAMILIES

    asked = ROOT / "notebooks" / "19_workshop_exercises.ipynb"
    solved = ROOT / "notebooks" / "20_workshop_solutions.ipynb"
    for path in (asked, solved):
        code = cells(path)
        seed = literal("".join(code[0]["source"]))  # the first code cell sets SEED
        headings = "\n".join("".join(c["source"]) for c in cells(path, "markdown"))
        shown = json.dumps([c["outputs"] for c in code])
        for n, q in enumerate(sheet(seed).questions, 1):
            assert f"## {n}. {q.title}\n" in headings, (path.name, q.id)
            # the variant's own prompt, in the package's words, shown by an executed cell
            assert json.dumps(q.prompt)[1:-1] in shown, (path.name, q.id)
    answers = {
        tag.removeprefix("question:"): cell
        for cell in cells(asked)
        for tag in cell["metadata"].get("tags", [])
        if tag.startswith("question:")
    }
    assert list(answers) == list(QUESTIONS)
    page = sheet(literal("".join(cells(asked)[0]["source"])))
    for qid, cell in answers.items():  # a blank answer per part, as plain data the grader can read
        assert "answer" in cell["metadata"]["tags"]
        assert literal("".join(cell["source"])) == page[qid].blank(), qid
    calls = ["".join(c["source"]) for c in cells(asked)]
    assert all(f'my.check("{qid}", answer)' in calls for qid in QUESTIONS)
    assert all(f'my.measure("{qid}", answer)' in calls for qid in FAMILIES)
    asserts = "\n".join("".join(c["source"]) for c in cells(solved))
    assert all(f'assert my.check("{qid}", answer).correct' in asserts for qid in QUESTIONS)
    assert all(f'assert my.measure("{qid}", answer).correct' in asserts for qid in FAMILIES)


def test_navigation_cells_and_index_are_up_to_date():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "navigation.py"), "--check"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout
    start = ["".join(c["source"]) for c in cells(ROOT / "notebooks" / "00_start_here.ipynb", "markdown")]
    assert start[0].startswith("<!-- navigation: header -->") and start[-1].startswith(
        "<!-- navigation: lessons -->"
    )
    assert all(f"({p.name})" in start[-1] for p in NOTEBOOKS if p.name != "00_start_here.ipynb")
    for path in NOTEBOOKS[1:]:
        first = "".join(cells(path, "markdown")[0]["source"])
        assert first.startswith("<!-- navigation: header -->") and "Start here" in first


#: The paper's subscripted symbols, which prose must write as math ($N_d$), not with a raw underscore.
SYMBOLS = re.compile(r"N_d|P_os|b_w|b_g")
#: What may keep them raw: code spans, math and link targets.
VERBATIM = re.compile(r"`[^`]*`|\$[^$]*\$|\]\([^)]*\)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_symbols_are_typeset_as_math(path):
    raw = [
        line
        for cell in cells(path, "markdown")
        for line in "".join(cell["source"]).splitlines()
        if SYMBOLS.search(VERBATIM.sub("", line))
    ]
    assert raw == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_page_with_saved_widgets_has_no_math(path):
    """ipywidgets' HTML manager typesets through MathJax 2's `MathJax.Hub`, which the book's MathJax 3
    lacks: on a page that loads both, every saved widget throws. So such a lesson writes no $math$."""
    notebook = json.loads(path.read_text())
    if "widgets" in notebook.get("metadata", {}):
        markdown = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown")
        latex = [o for c in cells(path) for o in c["outputs"] if "text/latex" in o.get("data", {})]
        assert not re.search(r"\$[^$]+\$", re.sub(r"`[^`]*`", "", markdown))  # code spans may hold a $
        assert latex == []


FOLD = re.compile(r"<details>.*?</details>", re.S)
#: Issue 14: each lab "has at most about 1,500 words" a reader sees without opening a fold.
LAB_WORDS = 1_550


def visible_words(path: pathlib.Path) -> int:
    """Whitespace-separated words in the markdown cells, outside `<details>` folds (navigation included)."""
    return sum(len(FOLD.sub(" ", "".join(c["source"])).split()) for c in cells(path, "markdown"))


def test_visible_words_leave_out_folds_only():
    assert len(FOLD.sub(" ", "one <details><summary>two</summary>\nthree\n</details> four").split()) == 2


@pytest.mark.parametrize("name", ["10_lab_pytorch.ipynb", "11_lab_deepspeed.ipynb"])
def test_each_lab_reads_in_about_1500_words(name):
    words = visible_words(ROOT / "notebooks" / name)
    assert words <= LAB_WORDS, f"{name}: {words:,} visible words, more than {LAB_WORDS:,}"


def test_every_glossary_link_names_a_glossary_heading():
    text = (ROOT / "docs" / "glossary.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9_\- ]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^## (.+)$", text, re.M)
    }
    pages = [*NOTEBOOKS, ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    links = {(m, p.name) for p in pages for m in re.findall(r"glossary\.md#([\w\-]+)", p.read_text())}
    links |= {(m, "glossary.md") for m in re.findall(r"\]\(#([\w\-]+)\)", text)}
    assert len(links) > 100 and "all_gather_into_tensor" in anchors
    assert sorted(link for link in links if link[0] not in anchors) == []


#: A Markdown link to a lesson file: its text, and the file's two-digit number and name.
LESSON_LINK = re.compile(r"\[([^\]\n]*)\]\((?:\.\./notebooks/)?(\d\d)_([a-z_]+)\.ipynb\)")


def test_every_lesson_link_names_the_lesson_it_points_to():
    """Links to lessons reach a lesson that exists, and a link that says 'lesson N' points to lesson N."""
    texts = {p.name: "\n".join("".join(c["source"]) for c in cells(p, "markdown")) for p in NOTEBOOKS}
    texts |= {p.name: p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    names = {path.name for path in NOTEBOOKS}
    links = [(page, *m) for page, text in texts.items() for m in LESSON_LINK.findall(text)]
    assert len(links) > 150  # the lessons, the glossary and the guides link to one another throughout
    assert [link for link in links if f"{link[2]}_{link[3]}.ipynb" not in names] == []
    numbered = [(page, text, number) for page, text, number, _ in links if re.match(r"[Ll]esson \d", text)]
    wrong = [link for link in numbered if int(re.search(r"\d+", link[1])[0]) != int(link[2])]
    assert len(numbered) > 100 and wrong == []
