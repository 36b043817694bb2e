"""Run the command line with `python -m zero_lessons`."""

from .cli import main

main()
