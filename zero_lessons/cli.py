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
from .table import _number, stage_table

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
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _typed(read):
    """Wrap a reader so its ValueError/TypeError becomes an argparse message naming the flag."""
    def convert(text: str):
        try:
            return read(text)
        except (ValueError, TypeError) as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    convert.__name__ = getattr(read, "__name__", "value")
    return convert



def _recipe_flags(sub: argparse.ArgumentParser) -> None:
    """Add --recipe and the three custom byte flags."""
    sub.add_argument("--recipe", choices=list(recipes.PRESETS), help="named recipe (default mixed-adam, 2 + 2 + 12 B)")
    for flag, what in (("--weight-bytes", "weights"), ("--grad-bytes", "gradients"), ("--optimizer-bytes", "optimizer state (K)")):
        read = functools.partial(units.parse_bytes_per_param, field=flag.lstrip("-").replace("-", "_"))
        sub.add_argument(flag, type=_typed(read), metavar="B", help=f"custom bytes per parameter for {what}")
    sub.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def build_parser() -> Parser:
    """The full command-line grammar."""
    top = Parser(prog="zero-lessons", description="Exact per-GPU model-state memory for DeepSpeed ZeRO stages 0-3.",
                 epilog=EXAMPLES, formatter_class=Formatter)
    subs = top.add_subparsers(dest="command", required=True, metavar="{table,fit,advise,lab,recipes}")
    table = subs.add_parser("table", help="per-GPU memory of every stage for one model",
                            epilog=EXAMPLES, formatter_class=Formatter)
    table.add_argument("--params", required=True, type=_typed(_param_count), help='parameter count Ψ, e.g. "7.5B"')
    table.add_argument("--gpus", required=True, type=_typed(units.parse_gpus), help="data-parallel GPUs N_d")
    table.add_argument("--unit", default="GB", type=_typed(units.unit_name), help="GB (10**9, default) or GiB (2**30)")
    table.add_argument("--padded", action="store_true", help="split ceil(Ψ/N) elements per rank, as real code does")
    _recipe_flags(table)
    table.set_defaults(sub=table)
    fit = subs.add_parser("fit", help="largest model whose model state fits, per stage",
                          epilog=EXAMPLES, formatter_class=Formatter)
    fit.add_argument("--memory", required=True, type=_typed(_memory),
                     help='memory per GPU, e.g. "80GB" or "80GiB"')
    fit.add_argument("--gpus", required=True, type=_typed(units.parse_gpus), help="data-parallel GPUs N_d")
    _recipe_flags(fit)
    fit.set_defaults(sub=fit)
    advise = subs.add_parser("advise", help="lowest stage that fits, by the article's rules, with a DeepSpeed config",
                             epilog=EXAMPLES, formatter_class=Formatter)
    advise.add_argument("--params", required=True, type=_typed(_param_count), help='parameter count Ψ, e.g. "13B"')
    advise.add_argument("--gpus", required=True, type=_typed(units.parse_gpus), help="data-parallel GPUs N_d")
    advise.add_argument("--gpu-memory", required=True, type=_typed(_memory), help='memory per GPU, e.g. "40GB"')
    advise.add_argument("--activations", default=Fraction(0), type=_typed(_size_or_zero),
                        help='activation memory per GPU, e.g. "12GB" (default 0: model state only)')
    advise.add_argument("--cpu-memory", type=_typed(_memory), help='host memory per node, to consider offload, e.g. "512GB"')
    advise.add_argument("--gpus-per-node", default=8, type=_typed(units.parse_gpus), help="GPUs sharing a node's host memory")
    advise.add_argument("--ds-config", metavar="FILE", help="write the DeepSpeed config for the choice to FILE")
    _recipe_flags(advise)
    advise.set_defaults(sub=advise)
    lab = subs.add_parser("lab", help="measure real PyTorch and DeepSpeed runs on CPU ranks against the predictions (needs the lab extra)",
                          formatter_class=Formatter)
    lab.add_argument("--ranks", default="1,2,4", type=_typed(_rank_list), help="world sizes to run, e.g. 1,2,4")
    lab.add_argument("--modes", default="all", type=_typed(_mode_list),
                     help="setups to run: all, pytorch, deepspeed, or a comma-separated list such as ddp,ds_zero3")
    lab.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    subs.add_parser("recipes", help="list the named recipes", formatter_class=Formatter)
    return top


def _param_count(text: str) -> int:
    """A parameter count such as "7.5B", from 1 to 10**15."""
    return checks.params(units.parse_count(text))


def _rank_list(text: str) -> tuple[int, ...]:
    """World sizes such as "1,2,4": whole numbers from 1 to 8 (this runs on one machine's cores)."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"ranks must be a comma-separated list of whole numbers from 1 to 8, got {text!r}") from None
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
                             f"got {part!r}")
        chosen.update(groups.get(part, (part,)))
    return tuple(mode for mode in lab.MODE_NAMES if mode in chosen)


def _memory(text: str) -> Fraction:
    """A per-GPU memory size such as "80GB"."""
    return units.as_bytes("memory", text)


def _size_or_zero(text: str) -> Fraction:
    """An activation size such as "12GB", or 0."""
    return Fraction(0) if text.strip() == "0" else units.as_bytes("activations", text)



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
    return {"memory_bytes": _number(args.memory), "gpus": args.gpus, "recipe": recipe.summary(), "stages": rows}


def _fit_text(data: dict) -> str:
    """The fit result as aligned lines."""
    head = (f"Largest model whose model state fits in {units.format_bytes(data['memory_bytes'])} per GPU "
            f"on {data['gpus']} GPUs ({data['recipe']})")
    lines = [f"  {r['name']:<14} " + ("any size (recipe stores nothing)" if r["max_params"] is None else
                                      f"{units.format_count(r['max_params']):>9}  ({r['max_params']:,} parameters)")
             for r in data["stages"]]
    return "\n".join([head, *lines])


def run(argv: list[str] | None = None) -> int:
    """Parse `argv`, print the answer, and return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "lab":
        return _lab(args)
    if args.command == "recipes":
        print("\n".join(f"{r.summary()}  [{r.source}]" for r in recipes.PRESETS.values()))
        return 0
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
    if args.ds_config:
        import json

        try:
            with open(args.ds_config, "w") as out:
                json.dump(config, out, indent=2)
        except OSError as err:
            raise ValueError(f"--ds-config: cannot write {args.ds_config!r}: {err.strerror}") from None
    return _emit(answer.to_dict() | {"ds_config": config} if args.json else repr(answer))


def _lab(args) -> int:
    """Run the lab and print measured against predicted; exit 1 if anything differs."""
    from . import lab
    from .lab import report

    rows, seconds = lab.run(args.ranks, args.modes)
    _emit({"rows": report.to_dict(rows), "wall_seconds": round(seconds, 1)} if args.json
          else f"{report.to_text(rows)}\n\nwall time {seconds:.1f} s for ranks {args.ranks}")
    return 0 if all(r.matches for r in rows) else 1


def _emit(answer: dict | str) -> int:
    """Print text as it is, or a dict as one JSON object; return exit status 0."""
    if isinstance(answer, dict):
        import json  # only --json needs it, and importing it costs start-up time

        answer = json.dumps(answer, ensure_ascii=False)
    print(answer)
    return 0


def main(argv: list[str] | None = None) -> None:
    """Entry point: run, and turn any failure into one line on stderr, never a traceback."""
    try:
        code = run(argv)
    except (ValueError, TypeError) as err:
        print(f"zero-lessons: error: {err}", file=sys.stderr)
        code = 2
    except (RuntimeError, ImportError) as err:  # a lab rank failed, or the lab extra is not installed
        print(f"zero-lessons: error: {str(err).strip().splitlines()[0]}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    except Exception as err:  # a bug, not bad input: still one line, never a traceback
        print(f"zero-lessons: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        code = 1
    except BrokenPipeError:
        code = 0
    sys.exit(code)
