"""Write every notebook's navigation cells, and the index `00_start_here.ipynb`, from the lessons themselves.

Run: python tools/navigation.py           (rewrite what is out of date)
     python tools/navigation.py --check   (exit 1 if anything is out of date; the tests run this)

Only markdown cells that start with a marker comment are touched, so rerunning is safe.
"""

from __future__ import annotations

import hashlib
import pathlib
import re
import sys

import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
START = "00_start_here.ipynb"  # the index every page links back to
HEADER, FOOTER = "<!-- navigation: header -->", "<!-- navigation: footer -->"
LESSONS = "<!-- navigation: lessons -->"  # the start page's list of lessons
LIVE = (
    "Live widgets need a Python kernel: run `make lab` (JupyterLab) or `make voila` (lesson 05's explorer "
    "as a dashboard) from a clone, or open the repository on Binder. A static page shows saved results only."
)


def lessons() -> list[pathlib.Path]:
    """Every numbered notebook except the index, in teaching order."""
    return sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if not p.name.startswith("00_"))


def title(nb) -> str:
    """The first '# ' heading of the notebook."""
    for cell in nb.cells:
        match = re.search(r"^# (.+)$", cell.source, re.M) if cell.cell_type == "markdown" else None
        if match:
            return match[1].strip()
    raise ValueError("a lesson needs a '# ' title")


def objectives(nb) -> list[str]:
    """The bullet points under "You will learn", if the notebook has them."""
    for cell in nb.cells:
        if cell.cell_type == "markdown" and "**You will learn**" in cell.source:
            block = cell.source.split("**You will learn**", 1)[1].split("\n\n", 1)[0]
            points: list[str] = []
            for line in block.strip().splitlines():
                if line.startswith("- "):
                    points.append(line[2:].strip())
                elif points and line.startswith("  "):  # a bullet wrapped onto the next line
                    points[-1] += " " + line.strip()
            return points
    return []


def link(path: pathlib.Path, nb) -> str:
    """A Markdown link to a notebook, labelled with its title."""
    return f"[{title(nb)}]({path.name})"


def _cell(name: str, marker: str, body: str):
    """A markdown cell with a stable id, starting with `marker`."""
    cell = nbformat.v4.new_markdown_cell(f"{marker}\n{body}")
    cell.id = hashlib.sha1(f"{name}:{marker}".encode()).hexdigest()[:8]
    return cell


def navigate(paths: list[pathlib.Path], books: dict) -> dict[pathlib.Path, str]:
    """The new text of every lesson, with its header and footer cells in place."""
    out = {}
    for i, path in enumerate(paths):
        nb = books[path]
        prev = f"← {link(paths[i - 1], books[paths[i - 1]])}" if i else ""
        nxt = f"{link(paths[i + 1], books[paths[i + 1]])} →" if i + 1 < len(paths) else ""
        bar = " · ".join(x for x in (f"[Start here]({START})", f"{i + 1} of {len(paths)}", prev, nxt) if x)
        cells = [c for c in nb.cells if not c.source.startswith((HEADER, FOOTER))]
        live = (
            f"\n\n*{LIVE}*" if "widgets" in nb.metadata else ""
        )  # only where there are widgets to bring alive
        nb.cells = (
            [_cell(path.name, HEADER, bar + live)]
            + cells
            + [
                _cell(
                    path.name,
                    FOOTER,
                    f"**Next:** {nxt}" if nxt else f"**The end.** Back to [Start here]({START}).",
                )
            ]
        )
        out[path] = nbformat.writes(nb) + "\n"
    return out


def index(paths: list[pathlib.Path], books: dict, kept: list | None = None) -> str:
    """The start page: what the course is and its words, the `kept` hand-written cells, then how to run
    the lessons and what each one teaches."""
    head = [
        "# ZeRO Lessons: start here",
        "",
        "Executable lessons on where DeepSpeed ZeRO keeps the training state, and what each stage costs "
        "in memory and in communication. Work through them in order; each builds on the one before. "
        'Lessons 01 to 04 answer "which stage, and why?"; 05 to 09 add an explorer, DeepSpeed\'s own '
        "estimator and offload (to host memory, its traffic and time, then to a drive); 10 and 11 check the "
        "counts against real PyTorch and DeepSpeed runs on your CPU; 12 to 15 follow memory through a "
        "training step, measured in the lab and modelled at real size; 16 runs a training loop for real; 17 "
        "and 18 price DeepSpeed's config keys at real size; 19 and 20 are a workshop. The lessons "
        "assume basic deep learning and PyTorch.",
        "",
        "Why there are stages at all: in plain [data parallelism](../docs/glossary.md#data-parallelism) "
        "every GPU trains on its own slice of each batch and keeps a whole copy of the training state, and "
        "after each backward pass the GPUs sum their gradients so that every copy takes the same step. "
        "[ZeRO](../docs/glossary.md#zero) (the Zero Redundancy Optimizer, which DeepSpeed implements) "
        "removes those copies: each stage splits one more part of the state across the GPUs, and the GPUs "
        "send each other the pieces they need when they need them. Memory goes down; what they send changes.",
    ]
    lines = [
        "## Notation and words",
        "",
        "Ψ is the number of model parameters and $N_d$ the number of data-parallel GPUs; ZeRO-1, ZeRO-2 "
        "and ZeRO-3 are the stages of the table above. Traffic is counted as the ZeRO paper counts it, in "
        "elements each GPU sends per step, as multiples of Ψ (lesson 03 adds the "
        "[ring factor](../docs/glossary.md#ring-factor)); in fp16 or bf16 an element is 2 bytes. GB means "
        "10⁹ bytes, GiB 2³⁰; a link's Gb/s counts bits (100 Gb/s = 12.5 GB/s). A card sold as 80 GB holds "
        "about 80 GiB, 7.4% more than the 80 × 10⁹ bytes the lessons count, so counting in GB errs on the "
        "safe side.",
        "",
        "Each lesson links a term to the [glossary](../docs/glossary.md) where it first uses it; look a word "
        "up there when it is new to you, such as [rank](../docs/glossary.md#rank), "
        "[all-reduce](../docs/glossary.md#all-reduce) or [GiB](../docs/glossary.md#gb-vs-gib). Detail sits "
        "in collapsed *Going deeper* sections, which the lessons call folds: open one when you want the "
        "detail; the main text reads without them.",
        "",
        "## How to run them",
        "",
        "From a clone of this repository (Python 3.11), `make lab` sets up and opens these notebooks in "
        "JupyterLab, and `make test` sets up and checks everything. With conda: `conda env create -f "
        "environment.yml`, then `conda activate zero-lessons` and `jupyter lab notebooks/`. "
        "Binder (mybinder.org) builds the same environment from that file. Every lesson runs on a laptop's "
        "CPU, no GPU needed, and all the notebooks together, this page included, run in about three minutes. "
        "The labs (10 to 13, 16, and the workshop's measuring questions in 19) start real training "
        "processes on the CPU, and need more than `make lab`, conda or Binder installs: the `lab` extra "
        "(PyTorch 2.13.0 and DeepSpeed, whose first run also compiles with a C++ compiler), which "
        "`make test` installs into the clone's `.venv`, or `pip install -e '.[lab]'` in the environment you "
        "use. Where "
        "pip would fetch PyTorch's multi-GB CUDA build (it does on most Linux machines), install the CPU "
        "build first: `pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu`. So run "
        "the labs from a clone, not on Binder. Lesson 05's explorer has live "
        "controls, which need a Python kernel: `make lab`, `make voila` (the explorer alone, as a web "
        "dashboard) or Binder. The book (`make book`: these lessons as static web pages) shows the saved "
        "results only.",
        "",
        "## The notebooks",
        "",
    ]
    for i, path in enumerate(paths, 1):
        nb = books[path]
        lines.append(f"{i}. **{link(path, nb)}**")
        lines += [" " * len(f"{i}. ") + f"- {goal}" for goal in objectives(nb)]  # nested under "10. " too
    lines += [
        "",
        "Teaching a class? The instructor guide is `docs/instructor.md`: plans for 90 minutes and 3 hours, "
        "setup for a room, and the misconceptions to watch for.",
    ]
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    nb.cells = [
        _cell(START, HEADER, "\n".join(head)),
        *(kept or []),
        _cell(START, LESSONS, "\n".join(lines)),
    ]
    return nbformat.writes(nb) + "\n"


def hand_written(path: pathlib.Path) -> list:
    """The cells of `path` that no marker comment claims: the start page keeps them between head and list."""
    if not path.exists():
        return []
    return [
        c
        for c in nbformat.read(path, as_version=4).cells
        if not c.source.startswith((HEADER, FOOTER, LESSONS))
    ]


def main(argv: list[str]) -> int:
    """Rewrite (or with --check, compare) every navigation cell and the index."""
    paths = lessons()
    books = {p: nbformat.read(p, as_version=4) for p in paths}
    start = NOTEBOOKS / START
    wanted = {start: index(paths, books, hand_written(start))} | navigate(paths, books)
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    if "--check" in argv:
        for p in stale:
            print(f"out of date: {p.relative_to(ROOT)} (run python tools/navigation.py)")
        return 1 if stale else 0
    for p in stale:
        p.write_text(wanted[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
