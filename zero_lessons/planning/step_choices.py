"""What a learner picks for a step's timeline: named models, the frameworks, and each framework's knobs.

One table for the `step` command and the explorer's step view, so a knob means the same thing, with
the same help and the same error, wherever it is set. The knobs' defaults and ranges stay in
`step_knobs`; this module only says which framework (and which DeepSpeed stage) each one belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import checks, memory, units
from ..recipes import Recipe
from ..stages import Stage
from .activations import GPT2_XL, Transformer
from .step_knobs import DDP, FSDP2, DeepSpeed, Framework, Paper

#: The frameworks by the name a learner types.
NAMED_FRAMEWORKS = {"paper": Paper, "ddp": DDP, "deepspeed": DeepSpeed, "fsdp2": FSDP2}

#: Most layers a step's model may have: real models have 100 to 200; a ZeRO-3 timeline of 1,000 takes ~0.5 s.
MAX_LAYERS = 1000

#: Each framework's name in a sentence.
FRAMEWORK_NAMES = {
    "paper": "the paper's",
    "ddp": "PyTorch DDP",
    "deepspeed": "DeepSpeed",
    "fsdp2": "PyTorch FSDP2",
}

#: Named transformer shapes, by the name a learner types.
MODELS: dict[str, Transformer] = {
    # 12·L·h² + V·h ≈ 7.5 B with 32 blocks: the article's model, as a GPT with sequence 2,048
    "7.5b": Transformer(layers=32, hidden=4352, heads=32, seq_len=2048, micro_batch=1),
    "7b": Transformer(layers=32, hidden=4096, heads=32, seq_len=2048, micro_batch=1),
    "gpt2-xl": GPT2_XL,
}
#: One line on each named model.
MODEL_ABOUT = {
    "7.5b": "the article's 7.5 B: 32 blocks × 4,352, 32 heads, sequence 2,048, 1 sequence per GPU",
    "7b": "a 7 B-class GPT (Ψ ≈ 6.65 B): 32 blocks × 4,096, 32 heads, sequence 2,048, 1 sequence per GPU",
    "gpt2-xl": "GPT-2 XL (1.5 B), the ZeRO paper's activation example: 48 × 1,600, sequence 1,024, batch 32",
}


@dataclass(frozen=True)
class Knob:
    """One setting of one framework: where it belongs and what it does, in a learner's words."""

    name: str  #: the field of the framework's class, e.g. "reduce_bucket_size"
    framework: str  #: the key in NAMED_FRAMEWORKS it belongs to
    kind: str  #: "elements" (a count such as "500M"), "MiB" (a number > 0) or "switch" (on or off)
    help: str  #: what it does, its default, and whether it moves memory or only traffic
    stage3: bool = False  #: DeepSpeed's knobs that only stage 3 reads


#: Every knob a learner can set, in the order the controls show them.
KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "bucket_cap_mb",
            "ddp",
            "MiB",
            "MiB of gradients per all-reduce (default 25): the same bytes, in fewer or more all-reduces",
        ),
        Knob(
            "gradient_as_bucket_view",
            "ddp",
            "switch",
            "gradients live inside the buckets (default off): saves one copy of the gradients",
        ),
        Knob("reduce_bucket_size", "deepspeed", "elements", "elements per gradient bucket (default 500M)"),
        Knob(
            "allgather_bucket_size",
            "deepspeed",
            "elements",
            "elements per weight all-gather (default 500M): the same bytes, in fewer or more all-gathers",
        ),
        Knob(
            "overlap_comm",
            "deepspeed",
            "switch",
            "reduce while backward runs (default: on at stage 3 only); stages 1-2 then hold two buckets",
        ),
        Knob(
            "contiguous_gradients",
            "deepspeed",
            "switch",
            "copy each gradient into a bucket kept from the start (default on)",
        ),
        Knob(
            "prefetch_bucket_size",
            "deepspeed",
            "elements",
            "stage 3: elements gathered ahead of use (default 50M)",
            True,
        ),
        Knob(
            "max_live_parameters",
            "deepspeed",
            "elements",
            "stage 3: gathered elements that stop prefetching (default 1B)",
            True,
        ),
        Knob(
            "max_reuse_distance",
            "deepspeed",
            "elements",
            "stage 3: keep a gathered tensor used again within this many elements (default 1B)",
            True,
        ),
        Knob(
            "param_persistence_threshold",
            "deepspeed",
            "elements",
            "stage 3: tensors of at most this many elements stay whole on every rank (default 100K)",
            True,
        ),
        Knob(
            "sub_group_size",
            "deepspeed",
            "elements",
            "stage 3: elements the optimizer steps at a time (default 1B)",
            True,
        ),
        Knob(
            "reshard_after_forward",
            "fsdp2",
            "switch",
            "free each layer's gathered weights after its forward (default on)",
        ),
    )
}


def read_knob(name: str, text: str, shown: str | None = None) -> object:
    """The text typed for knob `name` as its value: a count such as "500M", or MiB such as "25" or "12.5"."""
    knob = KNOBS[checks.choice("knob", name, tuple(KNOBS))]
    label = shown or name
    if knob.kind == "elements":
        return units.parse_count(text, field=label)
    if knob.kind == "MiB":
        return units.read_ratio(text, field=label, need="a number of MiB > 0")
    raise TypeError(f"{label} is a switch (on or off), not text")


def make_framework(name: str, stage: int | None = None, knobs: dict | None = None, shown=None) -> Framework:
    """The framework `name` at `stage` (None: its default) with `knobs` set; a knob it lacks is an error.

    `shown(knob)` names a knob in errors (the command line passes its flags); every error is one line.
    """
    shown = shown or (lambda knob: knob)
    cls = NAMED_FRAMEWORKS[checks.choice("framework", name, tuple(NAMED_FRAMEWORKS))]
    knobs = dict(knobs or {})
    for knob in knobs:
        owner = KNOBS[checks.choice("knob", knob, tuple(KNOBS))].framework
        if owner != name:
            raise ValueError(f"{shown(knob)} is a {FRAMEWORK_NAMES[owner]} knob; it does not apply to {name}")
    if stage is not None and name not in ("paper", "deepspeed"):
        raise ValueError(f"{shown('stage')} applies to paper and deepspeed only; {name} has no stage")
    try:
        framework = cls(**knobs, **({} if stage is None else {"stage": stage}))
    except (ValueError, TypeError) as err:
        raise type(err)(renamed(str(err), [*knobs, "stage"], shown)) from None
    late = [k for k in knobs if KNOBS[k].stage3 and framework.stage != Stage.ZERO3]
    if late:
        default = f" (the default; set {shown('stage')} 3)" if stage is None else ""
        raise ValueError(
            f"{shown(late[0])} applies to DeepSpeed stage 3 only, got stage {int(framework.stage)}{default}"
        )
    return framework


def renamed(message: str, names: list[str], shown) -> str:
    """`message` with the field it starts with (one of `names`) named as `shown` names it."""
    for name in sorted(names, key=len, reverse=True):
        if message.startswith(name):
            return shown(name) + message.removeprefix(name)
    return message


def paper_stage(framework: Framework) -> Stage:
    """The paper's stage whose table a framework's boundaries are set beside (FSDP2 shards like stage 3)."""
    if isinstance(framework, DDP):
        return Stage.DP
    return Stage.ZERO3 if isinstance(framework, FSDP2) else framework.stage


def paper_bytes(params: int, gpus: int, framework: Framework, recipe: Recipe):
    """The paper's table for this framework's stage: model state per GPU, exact bytes."""
    return memory.per_gpu(params, gpus, paper_stage(framework), recipe).total
