"""The training script's functions as a listing for a lesson, read from its file: no torch is imported."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).with_name("train.py")  #: the training script a learner reads and copies


@dataclass(frozen=True, repr=False)
class Listing:
    """Source text shown as a Python code block."""

    text: str  #: the functions' source, a blank line apart

    def __repr__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        return f"```python\n{self.text}\n```"


def listing(*names: str) -> Listing:
    """The source of the training script's functions called `names`, in the order given."""
    text = SCRIPT.read_text()
    found = {node.name: node for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)}
    missing = [name for name in names if name not in found]
    if not names or missing:
        raise ValueError(f"names must be functions of train.py ({', '.join(found)}), got {missing or 'none'}")
    return Listing("\n\n".join(ast.get_source_segment(text, found[name]) for name in names))
