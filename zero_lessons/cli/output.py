"""Output that never fails noisily: every answer flushed, every failure one printable line on stderr."""

from __future__ import annotations

import os
import sys


def one_line(text: str) -> str:
    """`text` with every unprintable character (newline, terminal escape) written as its escape sequence."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class OutputError(Exception):
    """Standard output could not be written (a full disk, a closed file); a closed pipe is not one."""


def emit(answer: dict | str) -> int:
    """Print text as it is, or a dict as one JSON object, and flush it; return exit status 0."""
    if isinstance(answer, dict):
        import json  # only --json needs it, and importing it costs start-up time

        answer = json.dumps(answer, ensure_ascii=False)
    write(lambda: print(answer))
    return 0


def write(action) -> None:
    """Run `action` and flush stdout: a closed pipe passes through, another failure becomes an OutputError."""
    try:
        action()
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as err:
        raise OutputError(f"cannot write the output: {err.strerror or err}") from None


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so Python's last flush at exit cannot fail again (as its docs advise)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is no file (a test's capture): nothing to silence
        pass


def say(message: str) -> None:
    """One line on stderr, with nothing unprintable in it."""
    print(one_line(message), file=sys.stderr)
