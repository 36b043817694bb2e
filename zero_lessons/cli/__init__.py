"""Command line: `python -m zero_lessons SUBCOMMAND` (the `zero-lessons` script); `--help` lists them all.

The parts: `grammar` builds the flags from `inputs.FIELDS`, so every value is read and checked
once, where the text comes in; `output` prints answers and turns every failure into one line.
Only the standard library and the numeric core load here, so the command starts about as fast
as Python itself; sympy, matplotlib and ipywidgets never load on this path.
"""

from __future__ import annotations

import sys

from .. import checks, recipes
from ..present.table import fit_table, stage_table
from . import grammar, output


def main(argv: list[str] | None = None) -> None:
    """Entry point: run, and turn any failure into one line on stderr, never a traceback.

    A reader that closes the pipe early (`| head`) ends the command quietly with status 0, as
    every Unix tool does; any other failure to write the output is one line and status 1.
    """
    try:
        code = _run_reporting(argv)
        output.write(lambda: None)  # flush here, inside the try: argparse's --help output too
    except BrokenPipeError:
        output.quiet_stdout()
        code = 0
    except output.OutputError as err:
        output.quiet_stdout()
        output.say(f"zero-lessons: error: {err}")
        code = 1
    sys.exit(code)


def _run_reporting(argv: list[str] | None) -> int:
    """`run`, with each kind of failure turned into one line on stderr and its exit status."""
    try:
        return run(argv)
    except (BrokenPipeError, output.OutputError):
        raise
    except SystemExit as done:  # argparse's --help (0) and its errors (2), already printed
        return done.code if isinstance(done.code, int) else 1
    except (ValueError, TypeError) as err:
        output.say(f"zero-lessons: error: {err}")
        return 2
    except (RuntimeError, ImportError) as err:  # a lab rank failed, or the lab extra is not installed
        output.say(f"zero-lessons: error: {(str(err).strip().splitlines() or [type(err).__name__])[0]}")
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # a bug, not bad input: still one line, never a traceback
        output.say(f"zero-lessons: internal error: {type(err).__name__}: {err}")
        return 1


def run(argv: list[str] | None = None) -> int:
    """Parse `argv`, print the answer, and return the exit status."""
    parser = grammar.parser()
    args = parser.parse_args(argv)
    if args.command in grammar.MODULES:
        return grammar.command_module(args.command).main(args)
    if args.command == "lab":
        return _lab(args)
    if args.command == "recipes":
        return output.emit("\n".join(f"{r.summary()}  [{r.source}]" for r in recipes.PRESETS.values()))
    recipe = grammar.chosen_recipe(args, args.sub)
    if args.command == "table":
        result = stage_table(args.params, args.gpus, recipe, args.unit, padded=args.padded)
        return output.emit(result.to_dict() if args.json else result.to_text())
    if args.command == "advise":
        return _advise(args, recipe)
    fit = fit_table(args.gpus, args.gpu_memory, recipe)
    return output.emit(fit.to_dict() if args.json else fit.to_text())


def _advise(args, recipe: recipes.Recipe) -> int:
    """Run the advisor; print its answer, and write the DeepSpeed config when asked."""
    from ..planning.advice import advise  # the advisor's planning code: the other commands never need it

    answer = advise(
        args.params,
        args.gpus,
        args.gpu_memory,
        activations=args.activations,
        recipe=recipe,
        cpu_memory=args.cpu_memory,
        gpus_per_node=args.gpus_per_node,
        **({} if args.headroom is None else {"headroom": args.headroom}),
    )
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
        return output.emit(answer.to_dict() | {"ds_config": config})
    hint = (
        ["  - give --cpu-memory (host memory per node) to consider offload"]
        if (answer.rule == "does-not-fit" and args.cpu_memory is None)
        else []
    )
    return output.emit("\n".join([repr(answer), *hint]))


def _lab(args) -> int:
    """Run the lab and print measured against predicted; exit 1 if anything differs."""
    from .. import lab
    from ..lab import report

    rows, seconds = lab.run(args.ranks, args.modes)
    output.emit(
        {"rows": report.to_dict(rows), "wall_seconds": round(seconds, 1)}
        if args.json
        else f"{report.to_text(rows)}\n\nwall time {seconds:.1f} s for ranks {args.ranks}"
    )
    return 0 if all(r.matches for r in rows) else 1


__all__ = ["main", "run"]
