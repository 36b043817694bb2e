"""Command line: `python -m zero_lessons table|fit|recipes` (the `zero-lessons` script).

Only the standard library and the numeric modules load here, so the command starts
about as fast as Python itself; sympy and matplotlib stay out of this path.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from fractions import Fraction

from . import checks, recipes, units
from .memory import max_params
from .stages import Stage
from .table import stage_table

EXAMPLES = """examples:
  zero-lessons table --params 7.5B --gpus 8            the article's table (120 / 41.25 / 28.125 / 15 GB)
  zero-lessons table --params 70B --gpus 64 --unit GiB --recipe megatron-18
  zero-lessons table --params 13B --gpus 8 --weight-bytes 2 --grad-bytes 4 --optimizer-bytes 12 --json
  zero-lessons fit --memory 80GB --gpus 8              largest model per stage on 80 GB cards
  zero-lessons advise --params 13B --gpus 8 --gpu-memory 40GB --ds-config ds.json
                                                       lowest stage that fits, why, and a DeepSpeed config
  zero-lessons recipes                                 the named bytes-per-parameter recipes

Numbers: counts take "7.5B", "7.5e9", "175 billion", "70M", "1_000_000";
sizes take "80GB" (10**9 bytes) or "80GiB" (2**30 bytes). Model state only:
activations, gathered parameters and buffers are not counted."""


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Help text laid out as written, sized without importing shutil (a measurable start-up cost)."""

    def __init__(self, prog: str):
        try:
            width = os.get_terminal_size().columns - 2
        except OSError:
            width = 78
        super().__init__(prog, width=max(width, 40))


class Parser(argparse.ArgumentParser):
    """An argument parser with no abbreviations; its errors are one printable line on stderr, and status 2."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def parse_args(self, args=None, namespace=None):
        """Parse all of `args`; name any left over with repr, as flag values are named."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(checks.shown(arg) for arg in extra)}")
        return parsed

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)  # for `error`, below
        return super().parse_known_args(args, namespace)

    def _print_message(self, message: str, file=None):
        """Write help and usage like every other output: argparse's own version hides a failed write."""
        if message:
            out = file or sys.stderr
            if out is sys.stdout:
                _write(lambda: out.write(message))
            else:
                out.write(message)

    def error(self, message: str):
        """Exit 2 with one line; a mistyped flag is named as unrecognized, not as the required one it hid."""
        unknown = [arg for arg in getattr(self, "_given", ()) if arg[:2] == "--" and len(arg) > 2
                   and arg.split("=")[0] not in self._option_string_actions]
        if unknown and message.startswith("the following arguments are required"):
            message = f"unrecognized arguments: {' '.join(checks.shown(arg) for arg in unknown)}"
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def one_line(text: str) -> str:
    """`text` with every unprintable character (newline, terminal escape) written as its escape sequence."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _typed(read, flag: str):
    """A reader for `flag`'s text: its errors become argparse messages that name the flag once."""
    name = flag.lstrip("-").replace("-", "_")

    def convert(text: str):
        try:
            return read(text, flag)
        except (ValueError, TypeError) as err:
            message = str(err)
            for prefix in (flag, name):  # argparse already says "argument --params: "
                if message.startswith(prefix):
                    message = message.removeprefix(prefix).lstrip(": ")
                    break
            raise argparse.ArgumentTypeError(message) from None

    convert.__name__ = getattr(read, "__name__", "value").lstrip("_")
    return convert


def _option(parser: argparse.ArgumentParser, flag: str, read, **options) -> None:
    """Add `flag`, read by `read(text, flag)`."""
    parser.add_argument(flag, type=_typed(read, flag), **options)


def _recipe_flags(sub: argparse.ArgumentParser) -> None:
    """Add --recipe and the three custom byte flags."""
    sub.add_argument("--recipe", choices=list(recipes.PRESETS), help="named recipe (default mixed-adam, 2 + 2 + 12 B)")
    for flag, what in (("--weight-bytes", "weights"), ("--grad-bytes", "gradients"),
                       ("--optimizer-bytes", "optimizer state (K)")):
        _option(sub, flag, _bytes_per_param, metavar="B",
                help=f"custom bytes per parameter for {what} (0 to 1,024)")
    sub.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _subcommand(subs, name: str, text: str, examples: bool = True) -> Parser:
    """One subcommand's parser, with the shared help layout."""
    extra = {"epilog": EXAMPLES} if examples else {}
    return subs.add_parser(name, help=text, formatter_class=Formatter, **extra)


def build_parser() -> Parser:
    """The full command-line grammar."""
    top = Parser(prog="zero-lessons", description="Exact per-GPU model-state memory for DeepSpeed ZeRO stages 0-3.",
                 epilog=EXAMPLES, formatter_class=Formatter)
    subs = top.add_subparsers(dest="command", required=True, metavar="{table,fit,advise,lab,recipes}",
                              parser_class=Parser)
    table = _subcommand(subs, "table", "per-GPU memory of every stage for one model")
    _option(table, "--params", _param_count, required=True,
            help='parameter count Ψ, e.g. "7.5B" (up to 10**15)')
    _option(table, "--gpus", _gpus, required=True, help="data-parallel GPUs N_d (1 to 1,000,000)")
    _option(table, "--unit", _unit, default="GB", help="GB (10**9, default) or GiB (2**30)")
    table.add_argument("--padded", action="store_true", help="split ceil(Ψ/N) elements per rank, as real code does")
    _recipe_flags(table)
    table.set_defaults(sub=table)
    fit = _subcommand(subs, "fit", "largest model whose model state fits, per stage")
    _option(fit, "--memory", _memory, required=True, help='memory per GPU, e.g. "80GB" or "80GiB"')
    _option(fit, "--gpus", _gpus, required=True, help="data-parallel GPUs N_d (1 to 1,000,000)")
    _recipe_flags(fit)
    fit.set_defaults(sub=fit)
    advise = _subcommand(subs, "advise",
                         "lowest stage that fits, by the article's rules, with a DeepSpeed config")
    _option(advise, "--params", _param_count, required=True,
            help='parameter count Ψ, e.g. "13B" (up to 10**15)')
    _option(advise, "--gpus", _gpus, required=True, help="data-parallel GPUs N_d (1 to 1,000,000)")
    _option(advise, "--gpu-memory", _memory, required=True, help='memory per GPU, e.g. "40GB"')
    _option(advise, "--activations", _size_or_zero, default=Fraction(0),
            help='activation memory per GPU, e.g. "12GB" (default 0: model state only)')
    _option(advise, "--cpu-memory", _memory, help='host memory per node, to consider offload, e.g. "512GB"')
    _option(advise, "--gpus-per-node", _gpus_per_node, default=8,
            help=f"GPUs sharing a node's host memory (1 to {checks.MAX_GPUS_PER_NODE:,}; default 8)")
    _option(advise, "--ds-config", _file_name, metavar="FILE",
            help="write the DeepSpeed config for the choice to FILE")
    _recipe_flags(advise)
    advise.set_defaults(sub=advise)
    lab = _subcommand(subs, "lab", "measure real PyTorch and DeepSpeed runs on CPU ranks against the "
                                   "predictions (needs the lab extra)", examples=False)
    _option(lab, "--ranks", lambda text, flag: _rank_list(text), default="1,2,4",
            help="world sizes to run, e.g. 1,2,4")
    _option(lab, "--modes", lambda text, flag: _mode_list(text), default="all",
            help="setups to run: all, pytorch, deepspeed, or a comma-separated list such as ddp,ds_zero3")
    lab.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    _subcommand(subs, "recipes", "list the named recipes", examples=False)
    return top


def _param_count(text: str, flag: str) -> int:
    """A parameter count such as "7.5B", from 1 to 10**15."""
    return checks.whole(flag, units.parse_count(text, field=flag), high=checks.MAX_PARAMS)


def _gpus(text: str, flag: str) -> int:
    """A GPU count typed as digits, from 1 to a million."""
    return units.parse_whole(text, field=flag, high=checks.MAX_GPUS)


def _gpus_per_node(text: str, flag: str) -> int:
    """GPUs per node typed as digits, from 1 to 1,024 (the bound `advise` and `offload` use)."""
    return units.parse_whole(text, field=flag, high=checks.MAX_GPUS_PER_NODE)


def _unit(text: str, flag: str) -> str:
    """A display unit such as "GB" or "GiB", spelled right."""
    return units.unit_name(text)


def _bytes_per_param(text: str, flag: str) -> Fraction:
    """Bytes per parameter such as "2", "0.5" or "1/2", from 0 to 1,024."""
    return units.parse_bytes_per_param(text, field=flag)


def _file_name(text: str, flag: str) -> str:
    """A file name to write to: any text but the empty one."""
    if not text.strip():
        raise ValueError(f"{flag} needs a file name to write the config to, got {checks.shown(text)}")
    return text


def _rank_list(text: str) -> tuple[int, ...]:
    """World sizes such as "1,2,4": whole numbers from 1 to 8 (this runs on one machine's cores)."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"ranks must be a comma-separated list of whole numbers from 1 to 8, "
                         f"got {checks.shown(text)}") from None
    for size in sizes:
        checks.whole("ranks", size, high=8)
    return sizes


def _mode_list(text: str) -> tuple[str, ...]:
    """Lab setups: "all", "pytorch", "deepspeed", or a comma-separated list of mode names, in the lab's order."""
    from . import lab

    groups = {"all": tuple(lab.MODE_NAMES), "pytorch": tuple(lab.TORCH_NAMES), "deepspeed": tuple(lab.DEEPSPEED_NAMES)}
    chosen: set[str] = set()
    for part in text.split(","):
        if part not in groups and part not in lab.MODE_NAMES:
            raise ValueError(f"modes must be all, pytorch, deepspeed or a list of {', '.join(lab.MODE_NAMES)}; "
                             f"got {checks.shown(part)}")
        chosen.update(groups.get(part, (part,)))
    return tuple(mode for mode in lab.MODE_NAMES if mode in chosen)


def _memory(text: str, flag: str) -> Fraction:
    """A memory size such as "80GB", from 1 byte to 10**18 bytes."""
    return units.as_bytes(flag, text)


def _size_or_zero(text: str, flag: str) -> Fraction:
    """An activation size such as "12GB"; "0" and "0GB" both mean none."""
    return units.as_bytes(flag, text, zero=True)


def _chosen_recipe(args, parser: Parser) -> recipes.Recipe:
    """The preset named by --recipe, or a custom one from the three byte flags."""
    custom = {"weight_bytes": args.weight_bytes, "grad_bytes": args.grad_bytes, "optimizer_bytes": args.optimizer_bytes}
    given = {k: v for k, v in custom.items() if v is not None}
    if given and args.recipe:
        parser.error("--recipe cannot be combined with --weight-bytes/--grad-bytes/--optimizer-bytes")
    if given and len(given) < 3:
        missing = ", ".join("--" + k.replace("_", "-") for k in custom if k not in given)
        parser.error(f"custom bytes need all three flags; missing {missing}")
    return recipes.custom(**given) if given else recipes.get(args.recipe or "mixed-adam")


def _fit(args, recipe: recipes.Recipe) -> dict:
    """Largest parameter count per stage, as plain data."""
    rows = [{"stage": int(s), "name": s.label, "max_params": max_params(args.memory, args.gpus, s, recipe)}
            for s in Stage]
    return {"memory_bytes": units.json_number(args.memory), "gpus": args.gpus, "recipe": recipe.summary(),
            "stages": rows}


def _fit_text(data: dict) -> str:
    """The fit result as aligned lines."""
    head = (f"Largest model whose model state fits in {units.format_bytes(data['memory_bytes'])} per GPU "
            f"on {data['gpus']} GPUs ({data['recipe']})")
    lines = [f"  {r['name']:<14} " + ("any size (recipe stores nothing)" if r["max_params"] is None else
                                      f"{units.format_count(r['max_params']):>9}  ({r['max_params']:,} parameters)")
             for r in data["stages"]]
    return "\n".join([head, *lines])


@functools.cache
def _parser() -> Parser:
    """The grammar, built once per process: building it costs more than answering (gettext look-ups)."""
    return build_parser()


def run(argv: list[str] | None = None) -> int:
    """Parse `argv`, print the answer, and return the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "lab":
        return _lab(args)
    if args.command == "recipes":
        return _emit("\n".join(f"{r.summary()}  [{r.source}]" for r in recipes.PRESETS.values()))
    recipe = _chosen_recipe(args, args.sub)
    if args.command == "table":
        result = stage_table(args.params, args.gpus, recipe, args.unit, padded=args.padded)
        return _emit(result.to_dict() if args.json else result.to_text())
    if args.command == "advise":
        return _advise(args, recipe)
    data = _fit(args, recipe)
    return _emit(data if args.json else _fit_text(data))


def _advise(args, recipe: recipes.Recipe) -> int:
    """Run the advisor; print its answer, and write the DeepSpeed config when asked."""
    from .advice import advise  # the advisor pulls in offload and config code the other commands never need

    answer = advise(args.params, args.gpus, args.gpu_memory, activations=args.activations, recipe=recipe,
                    cpu_memory=args.cpu_memory, gpus_per_node=args.gpus_per_node)
    config = answer.ds_config()
    if args.ds_config is not None:
        import json

        try:
            with open(args.ds_config, "w") as out:
                json.dump(config, out, indent=2)
        except (OSError, ValueError) as err:  # ValueError: a name with a NUL byte
            why = getattr(err, "strerror", None) or str(err)
            raise ValueError(f"--ds-config: cannot write {checks.shown(args.ds_config)}: {why}") from None
    if args.json:
        return _emit(answer.to_dict() | {"ds_config": config})
    hint = ["  - give --cpu-memory (host memory per node) to consider offload"] if (
        answer.rule == "does-not-fit" and args.cpu_memory is None) else []
    return _emit("\n".join([repr(answer), *hint]))


def _lab(args) -> int:
    """Run the lab and print measured against predicted; exit 1 if anything differs."""
    from . import lab
    from .lab import report

    rows, seconds = lab.run(args.ranks, args.modes)
    _emit({"rows": report.to_dict(rows), "wall_seconds": round(seconds, 1)} if args.json
          else f"{report.to_text(rows)}\n\nwall time {seconds:.1f} s for ranks {args.ranks}")
    return 0 if all(r.matches for r in rows) else 1


class OutputError(Exception):
    """Standard output could not be written (a full disk, a closed file); a closed pipe is not one."""


def _emit(answer: dict | str) -> int:
    """Print text as it is, or a dict as one JSON object, and flush it; return exit status 0."""
    if isinstance(answer, dict):
        import json  # only --json needs it, and importing it costs start-up time

        answer = json.dumps(answer, ensure_ascii=False)
    _write(lambda: print(answer))
    return 0


def _write(action) -> None:
    """Run `action` and flush stdout: a closed pipe passes through, another failure becomes an OutputError."""
    try:
        action()
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as err:
        raise OutputError(f"cannot write the output: {err.strerror or err}") from None


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so Python's last flush at exit cannot fail again (as Python's docs advise)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is no file (a test's capture): nothing to silence
        pass


def main(argv: list[str] | None = None) -> None:
    """Entry point: run, and turn any failure into one line on stderr, never a traceback.

    A reader that closes the pipe early (`| head`) ends the command quietly with status 0, as
    every Unix tool does; any other failure to write the output is one line and status 1.
    """
    try:
        code = _run_reporting(argv)
        _write(lambda: None)  # flush here, inside the try: argparse's --help output too
    except BrokenPipeError:
        _quiet_stdout()
        code = 0
    except OutputError as err:
        _quiet_stdout()
        _say(f"zero-lessons: error: {err}")
        code = 1
    sys.exit(code)


def _run_reporting(argv: list[str] | None) -> int:
    """`run`, with each kind of failure turned into one line on stderr and its exit status."""
    try:
        return run(argv)
    except (BrokenPipeError, OutputError):
        raise
    except SystemExit as done:  # argparse's --help (0) and its errors (2), already printed
        return done.code if isinstance(done.code, int) else 1
    except (ValueError, TypeError) as err:
        _say(f"zero-lessons: error: {err}")
        return 2
    except (RuntimeError, ImportError) as err:  # a lab rank failed, or the lab extra is not installed
        _say(f"zero-lessons: error: {(str(err).strip().splitlines() or [type(err).__name__])[0]}")
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # a bug, not bad input: still one line, never a traceback
        _say(f"zero-lessons: internal error: {type(err).__name__}: {err}")
        return 1


def _say(message: str) -> None:
    """One line on stderr, with nothing unprintable in it."""
    print(one_line(message), file=sys.stderr)
