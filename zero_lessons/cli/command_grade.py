"""Subcommand `grade` (scaffold: the helper building it replaces this whole file)."""

from __future__ import annotations

HELP = "(being built)"
EXAMPLES = ""


def add(parser) -> None:
    """Declare the subcommand's flags."""


def main(args) -> int:
    """Answer the subcommand."""
    raise ValueError("grade is not built yet")
