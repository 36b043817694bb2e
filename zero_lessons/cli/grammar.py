"""The command line's grammar: each subcommand's flags, read through `inputs.FIELDS`, and its help."""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
from fractions import Fraction

from .. import checks, recipes
from ..inputs import CUSTOM, FIELDS
from .output import one_line, write

EXAMPLES = """examples:
  zero-lessons table --params 7.5B --gpus 8            the article's table (120 / 41.25 / 28.125 / 15 GB)
  zero-lessons table --params 70B --gpus 64 --unit GiB --recipe megatron-18
  zero-lessons table --params 13B --gpus 8 --weight-bytes 2 --grad-bytes 4 --optimizer-bytes 12 --json
  zero-lessons fit --memory 80GB --gpus 8              largest model per stage on 80 GB cards
  zero-lessons advise --params 13B --gpus 8 --gpu-memory 40GB --ds-config ds.json
                                                       lowest stage that fits with 10% of each GPU free,
                                                       why, and a DeepSpeed config (--headroom 0: bare rule)
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
                write(lambda: out.write(message))
            else:
                out.write(message)

    def error(self, message: str):
        """Exit 2 with one line; a mistyped flag is named as unrecognized, not as the required one it hid."""
        unknown = [
            arg
            for arg in getattr(self, "_given", ())
            if arg[:2] == "--" and len(arg) > 2 and arg.split("=")[0] not in self._option_string_actions
        ]
        if unknown and message.startswith("the following arguments are required"):
            message = f"unrecognized arguments: {' '.join(checks.shown(arg) for arg in unknown)}"
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def _typed(read, flag: str):
    """A reader for `flag`'s text, `read(text, flag)`: its errors become argparse messages that name the flag
    once."""
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

    convert.__name__ = getattr(read, "name", "value")
    return convert


REQUIRED = object()
#: Each subcommand's typed flags, read through `inputs.FIELDS`: (field, flag if not the field's own, default).
FLAGS = {
    "table": (("params", None, REQUIRED), ("gpus", None, REQUIRED), ("unit", None, "GB")),
    "fit": (("gpu_memory", "--memory", REQUIRED), ("gpus", None, REQUIRED)),
    "advise": (
        ("params", None, REQUIRED),
        ("gpus", None, REQUIRED),
        ("gpu_memory", None, REQUIRED),
        ("activations", None, Fraction(0)),
        ("cpu_memory", None, None),
        ("gpus_per_node", None, 8),
        ("headroom", None, None),  # None: the advice's own default, 10%
    ),
}
#: Each subcommand's one-line help.
HELP = {
    "table": "per-GPU memory of every stage for one model",
    "fit": "largest model whose model state fits, per stage",
    "advise": "lowest stage that fits with headroom, by the article's rules, with a DeepSpeed config",
    "lab": "measure real PyTorch and DeepSpeed runs on CPU ranks against the predictions "
    "(needs the lab extra)",
    "recipes": "list the named recipes",
}
#: Subcommands that live in their own module, `cli/command_<name>.py`: each has HELP (one line), EXAMPLES
#: (text for its help's epilog), `add(parser)` to declare its flags, and `main(args) -> int` to answer.
#: Such a module imports only the standard library at its top, so the other commands start fast.
MODULES = ("step", "run", "workshop", "grade")


def command_module(name: str):
    """The module that declares and answers subcommand `name` (one of MODULES)."""
    return importlib.import_module(f"{__package__}.command_{name}")


def _flags(sub: argparse.ArgumentParser, command: str) -> None:
    """Add `command`'s typed flags from FLAGS, then --recipe, the custom byte flags and --json."""
    for name, flag, default in FLAGS[command]:
        field = FIELDS[name]
        flag = flag or field.flag
        sub.add_argument(
            flag,
            dest=name,
            type=_typed(field, flag),
            help=field.help.replace("%", "%%"),  # argparse reads % in help as a format
            **({"required": True} if default is REQUIRED else {"default": default}),
        )
    sub.add_argument(
        "--recipe", choices=list(recipes.PRESETS), help="named recipe (default mixed-adam, 2 + 2 + 12 B)"
    )
    for name in CUSTOM:
        field = FIELDS[name]
        sub.add_argument(field.flag, dest=name, type=_typed(field, field.flag), metavar="B", help=field.help)
    sub.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def build_parser() -> Parser:
    """The full command-line grammar."""
    top = Parser(
        prog="zero-lessons",
        description="Exact per-GPU model-state memory for DeepSpeed ZeRO stages 0-3.",
        epilog=EXAMPLES,
        formatter_class=Formatter,
    )
    names = "{" + ",".join([*FLAGS, "lab", "recipes", *MODULES]) + "}"
    subs = top.add_subparsers(dest="command", required=True, metavar=names, parser_class=Parser)
    parsers = {c: subs.add_parser(c, help=HELP[c], formatter_class=Formatter, epilog=EXAMPLES) for c in FLAGS}
    for command, sub in parsers.items():
        _flags(sub, command)
        sub.set_defaults(sub=sub)
    parsers["table"].add_argument(
        "--padded", action="store_true", help="split ceil(Ψ/N) elements per rank, as real code does"
    )
    parsers["advise"].add_argument(
        "--ds-config",
        metavar="FILE",
        type=_file_name,
        help="write the DeepSpeed config for the choice to FILE",
    )
    lab = subs.add_parser("lab", help=HELP["lab"], formatter_class=Formatter)
    lab.add_argument(
        "--ranks", type=_typed(rank_list, "--ranks"), default="1,2,4", help="world sizes to run, e.g. 1,2,4"
    )
    lab.add_argument(
        "--modes",
        type=_typed(mode_list, "--modes"),
        default="all",
        help="setups to run: all, pytorch, deepspeed, or a comma-separated list such as ddp,ds_zero3",
    )
    lab.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    subs.add_parser("recipes", help=HELP["recipes"], formatter_class=Formatter)
    _add_modules(subs)
    return top


def _add_modules(subs) -> None:
    """Declare each subcommand that lives in its own module (MODULES)."""
    for name in MODULES:
        module = command_module(name)
        sub = subs.add_parser(name, help=module.HELP, formatter_class=Formatter, epilog=module.EXAMPLES)
        module.add(sub)
        sub.set_defaults(sub=sub)


def _file_name(text: str) -> str:
    """A file name to write to: any text but the empty one."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"needs a file name to write the config to, got {checks.shown(text)}"
        )
    return text


def path_name(flag: str):
    """A reader for `flag`'s file or folder name: any text but the empty one, and none with a NUL byte."""

    def read(text: str) -> str:
        if not text.strip() or "\0" in text:
            raise argparse.ArgumentTypeError(f"needs a file or folder name, got {text[:40]!r}")
        return text

    read.__name__ = flag
    return read


def rank_list(text: str, flag: str = "ranks") -> tuple[int, ...]:
    """World sizes such as "1,2,4": whole numbers from 1 to 8 (this runs on one machine's cores)."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(
            f"ranks must be a comma-separated list of whole numbers from 1 to 8, got {checks.shown(text)}"
        ) from None
    for size in sizes:
        checks.whole("ranks", size, high=8)
    return sizes


def mode_list(text: str, flag: str = "modes") -> tuple[str, ...]:
    """Lab setups: "all", "pytorch", "deepspeed", or a comma-separated list of mode names, in lab order."""
    from .. import lab

    groups = {
        "all": tuple(lab.MODE_NAMES),
        "pytorch": tuple(lab.TORCH_NAMES),
        "deepspeed": tuple(lab.DEEPSPEED_NAMES),
    }
    chosen: set[str] = set()
    for part in text.split(","):
        if part not in groups and part not in lab.MODE_NAMES:
            raise ValueError(
                f"modes must be all, pytorch, deepspeed or a list of {', '.join(lab.MODE_NAMES)}; "
                f"got {checks.shown(part)}"
            )
        chosen.update(groups.get(part, (part,)))
    return tuple(mode for mode in lab.MODE_NAMES if mode in chosen)


def chosen_recipe(args, parser: Parser) -> recipes.Recipe:
    """The preset named by --recipe, or a custom one from the three byte flags."""
    given = {k: getattr(args, k) for k in CUSTOM if getattr(args, k) is not None}
    if given and args.recipe:
        parser.error("--recipe cannot be combined with --weight-bytes/--grad-bytes/--optimizer-bytes")
    if given and len(given) < 3:
        missing = ", ".join(FIELDS[k].flag for k in CUSTOM if k not in given)
        parser.error(f"custom bytes need all three flags; missing {missing}")
    return recipes.custom(**given) if given else recipes.get(args.recipe or "mixed-adam")


@functools.cache
def parser() -> Parser:
    """The grammar, built once per process: building it costs more than answering (gettext look-ups)."""
    return build_parser()
