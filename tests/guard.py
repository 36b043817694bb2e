"""Helpers for the hostile-input tests: a time limit on every call, and what a good error looks like."""

from __future__ import annotations

import contextlib
import io
import signal
import time

#: Seconds any single call in the fuzz suites may take before it counts as a hang.
LIMIT = 2.0


class Hang(BaseException):
    """A call ran past its time limit: a BaseException, so no `except Exception` in the code swallows it."""


@contextlib.contextmanager
def deadline(seconds: float = LIMIT):
    """Raise `Hang` inside the block if it runs longer than `seconds` (SIGALRM; main thread only)."""

    def expire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def timed(call, seconds: float = LIMIT):
    """Run `call()` under `deadline(seconds)`; return (result or the exception it raised, seconds taken)."""
    start = time.perf_counter()
    with deadline(seconds):
        try:
            outcome = call()
        except (ValueError, TypeError) as err:
            outcome = err
    return outcome, time.perf_counter() - start


def run_cli(argv: list[str], seconds: float = LIMIT) -> tuple[int, str, str]:
    """Run the command line in this process as `zero-lessons argv` would: (exit status, stdout, stderr)."""
    from zero_lessons import cli

    out, err = io.StringIO(), io.StringIO()
    with deadline(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(argv)
            code = 0  # main always exits; reaching here would be a bug the caller's asserts will show
        except SystemExit as done:
            code = done.code
    return code, out.getvalue(), err.getvalue()


def one_line_naming(stderr: str, *names: str) -> bool:
    """Whether `stderr` is exactly one printable line that names at least one of `names`."""
    body = stderr.removesuffix("\n")
    return (
        stderr.endswith("\n")
        and "\n" not in body
        and body.isprintable()
        and "Traceback" not in body
        and any(name in body for name in names)
    )
