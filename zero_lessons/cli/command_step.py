"""Subcommand `step`: one rank's memory at every phase of one training step, its peak, and why.

The timeline is `planning.step.timeline`; the models, frameworks and knobs a learner can name are
`planning.step_choices`. Text shows a table of phases (long runs of layers that change by the same
bytes each step are folded into one line, which cannot hide the peak), then the peak's parts, each
with its reason; --json prints `Timeline.to_dict()` as it is.
"""

from __future__ import annotations

import argparse

HELP = "one rank's memory at every phase of one training step: the peak and why it is there"
EXAMPLES = """examples:
  zero-lessons step --gpus 8 --stage 3          the article's 7.5 B on 8 GPUs under DeepSpeed ZeRO-3
  zero-lessons step --gpus 8 --stage 2          the same at stage 2: a higher peak than stage 3
  zero-lessons step --gpus 8 --stage 3 --checkpointing
                                                Rule 3: activations recomputed, the peak falls
  zero-lessons step --gpus 8 --framework paper --stage 3
                                                the ZeRO paper's accounting, the naive baseline
  zero-lessons step --gpus 8 --framework fsdp2 --no-reshard-after-forward
                                                FSDP2 keeping each layer's gathered weights: a higher peak
  zero-lessons step --gpus 8 --framework ddp --bucket-cap-mb 100
                                                DDP's bucket size moves timing, not the peak
  zero-lessons step --gpus 4 --model gpt2-xl --micro-batch 4 --stage 2 --all-phases
  zero-lessons step --gpus 8 --stage 2 --loss-copies 3
                                                with a cross-entropy's 3 fp32 copies of the logits
                                                counted after the forward pass, as lesson 14 does
  zero-lessons step --params 7B --layers 32 --layer-activations 1GB --gpus 8 --stage 3 --json

Models: 7.5b (default; 32 blocks × 4,352, sequence 2,048, one sequence per GPU), 7b, gpt2-xl; the
shape flags change the chosen model's fields. --params instead makes a plain model of --layers
equal layers, one weight tensor each. Sizes of DeepSpeed's knobs count elements ("500M", "5e8").
Modelled: what each framework allocates, phase by phase; left out: the caching allocator's free
blocks, temporaries inside an op or a collective, CUDA context (see `planning.step`)."""

#: The transformer's shape flags: each changes one field of the chosen --model.
SHAPE = ("layers", "hidden", "heads", "seq_len", "micro_batch", "vocab")
#: Flags that describe a transformer, and so do not combine with --params.
TRANSFORMER_ONLY = ("model", *SHAPE[1:], "attention", "loss_copies", "head")
#: The most fp32 copies of the logits --loss-copies takes.
MAX_LOSS_COPIES = 1_000
#: Flags that describe a --params model only.
PLAIN_ONLY = ("layer_activations", "layer_input")


def flag(name: str) -> str:
    """The flag a field is typed as: "seq_len" -> "--seq-len"."""
    return "--" + name.replace("_", "-")


def reader(read, name: str):
    """An argparse type from `read(text)`: its error names the flag once (argparse names it first)."""

    def convert(text: str):
        try:
            return read(text)
        except (ValueError, TypeError) as err:
            message = str(err)
            for prefix in (flag(name), name):
                message = message.removeprefix(prefix).lstrip(": ")
            raise argparse.ArgumentTypeError(message) from None

    convert.__name__ = name
    return convert


#: What each shape flag sets (the fields of `activations.Transformer`).
SHAPE_HELP = {
    "layers": "transformer blocks L (with --params: equal layers, default 32; at most 1,000)",
    "hidden": "hidden size h",
    "heads": "attention heads a (h must divide by a)",
    "seq_len": "tokens per sequence s",
    "micro_batch": "sequences per GPU per step b",
    "vocab": "vocabulary size V",
}


def field_reader(name: str):
    """An argparse type reading `name` through `inputs.FIELDS`, as the other commands read it."""
    from ..inputs import FIELDS

    return reader(lambda text: FIELDS[name](text, name), name)


def add(parser) -> None:
    """Declare the subcommand's flags, in groups: the run, the model, each framework's knobs, output."""
    from ..inputs import CUSTOM, FIELDS
    from ..planning.step_choices import NAMED_FRAMEWORKS
    from ..recipes import PRESETS

    run = parser.add_argument_group("what runs the step")
    run.add_argument(
        "--framework", choices=list(NAMED_FRAMEWORKS), default="deepspeed", help="default deepspeed"
    )
    run.add_argument(
        "--stage",
        type=reader(_stage, "stage"),
        help="ZeRO stage: 1-3 for deepspeed (default 2), 0-3 for paper (default 3)",
    )
    run.add_argument("--gpus", type=field_reader("gpus"), required=True, help=FIELDS["gpus"].help)
    run.add_argument(
        "--checkpointing", action="store_true", help="recompute every layer in backward (Rule 3)"
    )
    run.add_argument(
        "--recipe", choices=list(PRESETS), help="bytes per parameter (default mixed-adam, 2 + 2 + 12)"
    )
    for name in CUSTOM:
        run.add_argument(flag(name), type=field_reader(name), metavar="B", help=FIELDS[name].help)
    add_model(parser.add_argument_group("the model (default --model 7.5b)"))
    add_knobs(parser)
    out = parser.add_argument_group("output")
    out.add_argument("--unit", type=field_reader("unit"), help=FIELDS["unit"].help)
    out.add_argument("--all-phases", action="store_true", help="show every phase (default: fold even runs)")
    out.add_argument("--json", action="store_true", help="print the timeline as one JSON object, exact bytes")


def add_model(group) -> None:
    """The model flags: a named transformer and its shape, or a plain model from --params."""
    from .. import units
    from ..planning.activations import ATTENTION
    from ..planning.step_choices import MODEL_ABOUT, MODELS

    about = "; ".join(f"{name}: {text}" for name, text in MODEL_ABOUT.items())
    group.add_argument("--model", choices=list(MODELS), help=about)
    for name, what in SHAPE_HELP.items():
        kind = reader(lambda text, n=name: _whole(text, n), name)
        group.add_argument(flag(name), type=kind, metavar="N", help=what)
    group.add_argument(
        "--attention",
        choices=list(ATTENTION),
        help="unfused (default) saves each layer's s × s attention scores; flash (FlashAttention) saves none",
    )
    group.add_argument(
        "--loss-copies",
        type=reader(
            lambda text: units.parse_whole(text, field="loss_copies", high=MAX_LOSS_COPIES), "loss_copies"
        ),
        metavar="N",
        help="count the loss: N fp32 copies of the logits (s·b·V × 4 B each; 3 for PyTorch's "
        "cross-entropy) on top of the last forward phase, as lesson 14 does (default: left out)",
    )
    head = "count the tied output layer's gradient for the embedding's weight, held through the backward pass"
    group.add_argument(
        "--head", action="store_true", help=f"{head} (lesson 17, section 1; default: left out)"
    )
    group.add_argument(
        "--params", type=field_reader("params"), help="instead of a transformer: Ψ in --layers equal layers"
    )
    sizes = {
        "layer_activations": "with --params: bytes each layer saves for backward (default 0)",
        "layer_input": "with --params: bytes each layer keeps when checkpointed (default 0)",
    }
    for name, what in sizes.items():
        kind = reader(lambda text, n=name: _size(text, n), name)
        group.add_argument(flag(name), type=kind, metavar="SIZE", help=what)


def add_knobs(parser) -> None:
    """One group of flags per framework, each knob's help from `step_choices.KNOBS`."""
    from ..planning.step_choices import FRAMEWORK_NAMES, KNOBS

    groups = {}
    for knob in KNOBS.values():
        if knob.framework not in groups:
            groups[knob.framework] = parser.add_argument_group(
                f"{FRAMEWORK_NAMES[knob.framework]} knobs (only with --framework {knob.framework})"
            )
        if knob.kind == "switch":
            groups[knob.framework].add_argument(
                flag(knob.name), action=argparse.BooleanOptionalAction, help=knob.help
            )
            continue
        kind = reader(lambda text, n=knob.name: _knob(text, n), knob.name)
        groups[knob.framework].add_argument(
            flag(knob.name), type=kind, metavar=knob.kind.upper(), help=knob.help
        )


def _stage(text: str) -> int:
    """A stage typed as one digit, 0 to 3."""
    if text.strip() not in ("0", "1", "2", "3"):
        raise ValueError(f"must be 0, 1, 2 or 3, got {text[:40]!r}")
    return int(text)


def _whole(text: str, name: str) -> int:
    """A shape field typed as plain digits; its range is checked where the shape is built."""
    from .. import checks, units
    from ..planning.step_choices import MAX_LAYERS

    return units.parse_whole(text, field=name, high=MAX_LAYERS if name == "layers" else checks.MAX_PARAMS)


def _size(text: str, name: str) -> int:
    """Whole bytes such as "1GB", or 0."""
    from .. import checks, units
    from ..planning.step_model import MAX_ACTIVATION_BYTES

    return checks.whole(name, units.as_bytes(name, text, zero=True), low=0, high=MAX_ACTIVATION_BYTES)


def _knob(text: str, name: str):
    """A knob's text read as its kind says."""
    from ..planning.step_choices import read_knob

    return read_knob(name, text, flag(name))


def given(args, names) -> list[str]:
    """The names among `names` whose flag was typed."""
    return [n for n in names if getattr(args, n) is not None and getattr(args, n) is not False]


def model_of(args):
    """The step's model: a named transformer with its shape flags, or a plain one from --params."""
    from ..planning import step

    if args.params is not None:
        if given(args, TRANSFORMER_ONLY):
            first = flag(given(args, TRANSFORMER_ONLY)[0])
            raise ValueError(f"{first} describes a transformer; it does not combine with --params")
        layers = min(32, args.params) if args.layers is None else args.layers
        return plain_model(args.params, layers, args.layer_activations or 0, args.layer_input or 0)
    if given(args, PLAIN_ONLY):
        raise ValueError(f"{flag(given(args, PLAIN_ONLY)[0])} describes a --params model; add --params")
    return step.transformer_model(shape_of(args), attention=args.attention or "unfused", head=args.head)


def shape_of(args):
    """The transformer's shape: the named --model with its shape flags typed."""
    from ..planning.step_choices import MODELS, renamed

    base = MODELS[args.model or "7.5b"]
    fields = {n: getattr(base, n) for n in SHAPE} | {n: getattr(args, n) for n in given(args, SHAPE)}
    try:
        shape = type(base)(**fields)
    except (ValueError, TypeError) as err:
        raise type(err)(renamed(str(err), list(SHAPE), flag)) from None
    return shape


def plain_model(params: int, layers: int, saved: int, kept: int):
    """Ψ split into `layers` equal layers (the first ones take the remainder), one tensor each."""
    from .. import checks, units
    from ..planning import step

    layers = checks.whole("--layers", layers, high=min(params, 10**9))
    share, extra = divmod(params, layers)
    sizes = [(share + (i < extra),) for i in range(layers)]
    name = f"{units.format_count(params)} params in {layers} layers"
    return step.layered_model(sizes, [saved] * layers, [kept] * layers, name=name)


def framework_of(args):
    """The framework with the knobs typed; a knob or --stage it does not have is an error naming the flag."""
    from ..planning.step_choices import KNOBS, make_framework

    knobs = {name: getattr(args, name) for name in KNOBS if getattr(args, name) is not None}
    return make_framework(args.framework, args.stage, knobs, shown=flag)


def main(args) -> int:
    """Print one rank's timeline: a table of phases and the peak's parts, or the timeline as JSON."""
    from ..planning import step
    from ..present.step_text import timeline_text
    from .grammar import chosen_recipe
    from .output import emit

    text_only = [f for f, on in (("--unit", args.unit is not None), ("--all-phases", args.all_phases)) if on]
    if args.json and text_only:
        raise ValueError(f"{text_only[0]} shapes the text; --json gives every phase in exact bytes")
    model, framework = model_of(args), framework_of(args)
    recipe = chosen_recipe(args, args.sub)
    line = step.timeline(model, framework, args.gpus, recipe, checkpointing=args.checkpointing)
    copies = args.loss_copies
    loss = None if copies is None else (copies, copies * shape_of(args).logits_bytes)
    if args.json:
        return emit(line.to_dict() | ({} if loss is None else {"loss": loss_dict(line, *loss)}))
    return emit(timeline_text(line, args.unit or "GB", every=args.all_phases, loss=loss))


def loss_dict(line, copies: int, loss: int) -> dict:
    """The loss counted after the forward pass, as JSON: its copies and bytes, and the peak it leaves."""
    from .. import units

    return {
        "copies": copies,
        "bytes": loss,
        "after_phase": line.after_forward.name,
        "peak_phase": line.peak_name_with_loss(loss),
        "peak_total_bytes": units.json_number(line.peak_with_loss(loss)),
    }
