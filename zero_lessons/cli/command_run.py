"""Subcommand `run`: train on DeepSpeed config files with torchrun on CPU ranks, and set the bytes each rank
held beside what the package predicts for the training script's model."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "train on DeepSpeed config(s) on CPU ranks; bytes held beside the prediction (needs the lab extra)"
EXAMPLES = """examples:
  zero-lessons advise --params 13B --gpus 8 --gpu-memory 40GB --ds-config ds.json
  zero-lessons run --ds-config ds.json --ranks 2
                        train 3 steps on 2 CPU ranks, checkpoint, resume, consolidate; bytes per rank
  zero-lessons run --ds-config zero2.json --ds-config zero3.json --ranks 4 --steps 5 --json

Exit status: 0 when every rank held what the package predicts, 1 when a rank differs (or the run
fails), 2 for bad input. The script is python -m zero_lessons.run.train; it runs under torchrun."""


def _whole(flag: str, high: int):
    """A reader for a whole-number flag from 1 to `high`; its error names the flag and the range."""

    def read(text: str) -> int:
        try:
            number = int(text.strip().replace("_", ""))
        except ValueError:
            number = None
        if number is None or not 1 <= number <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {high}, got {text!r}")
        return number

    read.__name__ = flag
    return read


def _config_file(text: str) -> str:
    """A DeepSpeed config file that exists, holds a JSON object, and has zero_optimization with a stage."""
    from ..run import launcher, predict

    try:
        (config,) = launcher.read_configs(text).values()
        predict.check(text, config)
    except ValueError as err:
        message = str(err).removeprefix("--ds-config: ").removeprefix("ds_config: ")
        raise argparse.ArgumentTypeError(message) from None
    return text


def add(parser) -> None:
    """Declare the subcommand's flags."""
    parser.add_argument(
        "--ds-config",
        metavar="FILE",
        action="append",
        required=True,
        type=_config_file,
        help="a DeepSpeed config, e.g. one `advise --ds-config` wrote; repeat the flag for more",
    )
    parser.add_argument("--ranks", type=_whole("ranks", 8), default=2, help="CPU ranks, 1 to 8 (default 2)")
    parser.add_argument("--steps", type=_whole("steps", 100), default=3, help="steps, 1 to 100 (default 3)")
    parser.add_argument(
        "--timeout", type=_whole("timeout", 3600), default=600, help="seconds the run may take (default 600)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def main(args) -> int:
    """Train under every config in one torchrun launch; print measured against predicted; 1 if they differ."""
    from ..run import launch
    from ..run.summary import summaries, to_text
    from .output import emit

    stems = [Path(name).stem for name in args.ds_config]
    if len(set(stems)) < len(stems):  # each config's name names its rank reports and checkpoints
        raise ValueError(f"--ds-config must name files with different names, got {', '.join(args.ds_config)}")
    report = launch(args.ds_config, ranks=args.ranks, steps=args.steps, timeout=args.timeout)
    found = summaries(report, args.ds_config)
    good = all(s.as_predicted for s in found)
    if args.json:
        configs = [s.to_dict() for s in found]
        emit({"configs": configs, "as_predicted": good, "wall_seconds": round(report.seconds, 1)})
    else:
        runs = f"{len(found)} config(s) on {args.ranks} ranks"
        emit(f"{to_text(found)}\n\nwall time {report.seconds:.1f} s for {runs}")
    return 0 if good else 1
