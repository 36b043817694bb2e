"""Time `python -m zero_lessons table` against bare `import fractions`, and print the median ratio.

Run: python benchmarks/cli_startup.py [rounds]. Target: ratio ≤ 2.
"""

import pathlib
import statistics
import subprocess
import sys
import time

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "zero_lessons"

CLI = [sys.executable, "-m", "zero_lessons", "table", "--params", "7.5B", "--gpus", "8"]
BASE = [sys.executable, "-c", "import fractions"]


def seconds(cmd: list[str]) -> float:
    """Wall time of one run of `cmd`."""
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(rounds: int = 30) -> None:
    """Alternate the two commands so that both see the same machine load."""
    # Byte-compile first, as pip does on install and Python does on a first import. Where
    # PYTHONDONTWRITEBYTECODE is set, Python would otherwise recompile the package on every run.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(PACKAGE)], check=True)
    seconds(CLI), seconds(BASE)  # warm the file cache
    cli, base = [], []
    for _ in range(rounds):
        cli.append(seconds(CLI))
        base.append(seconds(BASE))
    ratios = [c / b for c, b in zip(cli, base, strict=True)]
    print(
        f"cli median {statistics.median(cli) * 1000:.1f} ms, import fractions median "
        f"{statistics.median(base) * 1000:.1f} ms, median ratio {statistics.median(ratios):.2f} (target ≤ 2)"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
