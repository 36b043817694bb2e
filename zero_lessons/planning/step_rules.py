"""How the paper and DDP hold memory at each moment of a step, and what every framework shares.

FSDP2's rules live in `step_fsdp2`, DeepSpeed's in `step_deepspeed` (stages 1 and 2) and `step_zero3`.

A framework's rule returns `Moments`: the parts it holds at each moment, activations aside.
`assemble` adds the activations, which no framework changes, and names the phases in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache

from .. import memory, units
from ..recipes import Recipe
from ..stages import STATES
from .step_knobs import DDP, Paper
from .step_model import Layer, Model
from .step_parts import KINDS, Part, Phase

#: Bytes per element of fp32 copies and of the optimizer's own temporaries.
FP32 = 4
_ORDER = {kind: i for i, kind in enumerate(KINDS)}

Parts = tuple[Part, ...]


@dataclass(frozen=True)
class Setup:
    """What every rule reads: the model, N, the recipe, checkpointing, and the recipe's bytes per element."""

    model: Model  #: the layers
    gpus: int  #: N
    recipe: Recipe  #: bytes per parameter of each state
    checkpointing: bool  #: every layer recomputed in its backward
    w: int | Fraction = field(init=False)  #: bytes per weight element
    g: int | Fraction = field(init=False)  #: bytes per gradient element
    k: int | Fraction = field(init=False)  #: optimizer bytes per parameter

    def __post_init__(self):
        # Kept as ints where whole: int arithmetic is about ten times faster than Fraction's.
        for name, state in zip("wgk", STATES[::-1], strict=True):
            object.__setattr__(self, name, units.tidy(Fraction(self.recipe.bytes_for(state))))


@dataclass(frozen=True)
class Moments:
    """What a framework holds at each moment of the step, activations aside."""

    start: Parts  #: before the forward, after the last step's zero_grad
    forward: tuple[Parts, ...]  #: during each layer's forward, in forward order
    backward: tuple[Parts, ...]  #: during each layer's backward, indexed like `forward`
    reduction: Parts  #: at the end of backward, while the last reductions finish
    ready: Parts  #: after backward, before the optimizer step
    optimizer: Parts  #: at the optimizer step's highest point
    after: Parts  #: after the optimizer step, before zero_grad


@lru_cache(maxsize=4096)  # the same few sizes recur in every layer; formatting them dominates the run time
def share(total: int | Fraction, n: int) -> int | Fraction:
    """`total` bytes split evenly over `n` ranks, exactly: an int where it divides, else a Fraction."""
    return units.tidy(Fraction(total) / n)


def per(nbytes, elements: int, gpus: int = 1) -> str:
    """A reason's arithmetic, the count exact: "2 B × 1,200", or "12 B × 4,224 / 2" for one rank's share."""
    text = f"{units.format_number(nbytes)} B × {elements:,}"
    return text if gpus == 1 else f"{text} / {gpus}"


def span(layers: tuple[Layer, ...]) -> str:
    """Name a run of layers: "block 3", or "block 3 to block 7"."""
    return layers[0].name if len(layers) == 1 else f"{layers[0].name} to {layers[-1].name}"


def _clean(parts) -> Parts:
    """Parts in KINDS order, without the empty ones."""
    return tuple(sorted((p for p in parts if p.nbytes), key=lambda p: _ORDER[p.kind]))


def activation_parts(setup: Setup) -> tuple[list[Parts], list[Parts]]:
    """Activations held during each layer's forward and backward, the same under every framework.

    Forward of layer i: what layers 1..i saved. Backward of layer i: the same, since layers after i
    have freed theirs; with checkpointing each layer saves only its input, and its backward reruns its
    forward, holding its full activations again (Korthikanti et al.'s "full" recomputation).
    """
    layers, checkpointing = setup.model.layers, setup.checkpointing
    what = "checkpointed inputs" if checkpointing else "activations saved for backward"
    forward, backward, running = [], [], 0
    for i, layer in enumerate(layers):
        running += layer.checkpointed if checkpointing else layer.activations
        saved = (Part("activations", running, f"{what} by {span(layers[: i + 1])}"),)
        forward.append(saved)
        rerun = Part(
            "activations",
            layer.activations if checkpointing else 0,
            f"{layer.name}'s forward rerun for its backward (checkpointing)",
        )
        backward.append(saved + (rerun,))
    return forward, backward


def head_gradient(setup: Setup) -> Parts:
    """A tied output layer's gradient for the first layer's weight (`Model.tied`), the same under every
    framework: autograd holds it from the output layer's backward, before the last layer's, until the first
    layer's backward adds its own and the sum becomes the weight's gradient. Empty without a tied layer."""
    tied, first = setup.model.tied, setup.model.layers[0].name
    if not tied:
        return ()
    reason = (
        f"the output layer's gradient for {first}'s tied weight, held by autograd until {first}'s backward "
        f"adds its own: {per(setup.g, tied)}"
    )
    return (Part("unreduced gradients", tied * setup.g, reason),)


def assemble(setup: Setup, moments: Moments) -> tuple[Phase, ...]:
    """The step's phases in order, each with the framework's parts plus the activations (and in every
    backward phase a tied output layer's gradient, `head_gradient`)."""
    layers = setup.model.layers
    forward_acts, backward_acts = activation_parts(setup)
    phases = [Phase("start of step", "boundary", _clean(moments.start))]
    phases += [
        Phase(f"forward {layer.name}", "forward", _clean(moments.forward[i] + forward_acts[i]))
        for i, layer in enumerate(layers)
    ]
    tied = head_gradient(setup)
    phases += [
        Phase(f"backward {layers[i].name}", "backward", _clean(moments.backward[i] + backward_acts[i] + tied))
        for i in reversed(range(len(layers)))
    ]
    phases += [
        Phase("gradient reduction", "reduction", _clean(moments.reduction)),
        Phase("before optimizer step", "boundary", _clean(moments.ready)),
        Phase("optimizer step", "optimizer", _clean(moments.optimizer)),
        Phase("after optimizer step", "boundary", _clean(moments.after)),
    ]
    return tuple(phases)


def paper(setup: Setup, fw: Paper) -> Moments:
    """The paper's table at every moment; at stage 3, each layer's weights gathered for its own pass only."""
    psi, n, stage = setup.model.params, setup.gpus, fw.stage
    held = memory.per_gpu(psi, n, stage, setup.recipe)
    each = {s: setup.recipe.bytes_for(s) for s in STATES}
    state = tuple(
        Part(
            s,
            getattr(held, s),
            f"the paper's {stage.label} splits {s} over {n} GPUs: {per(each[s], psi, n)}"
            if stage.partitions(s)
            else f"the paper's {stage.label} keeps all {s} on every GPU: {per(each[s], psi)}",
        )
        for s in STATES[::-1]
    )
    gather = stage == 3 and n > 1

    def pass_parts(layer: Layer, which: str) -> Parts:
        if not gather:
            return state
        return state + (
            Part(
                "gathered parameters",
                layer.params * setup.w,
                f"the paper's ZeRO-3 gathers {layer.name}'s weights for its {which}: "
                f"{per(setup.w, layer.params)}",
            ),
        )

    layers = setup.model.layers
    return Moments(
        state,
        tuple(pass_parts(layer, "forward") for layer in layers),
        tuple(pass_parts(layer, "backward") for layer in layers),
        state,
        state,
        state,
        state,
    )


def adam_temporary(elements: int, gpus: int, where: str) -> Part:
    """torch.optim.Adam's foreach path (the CUDA default) builds √v for every element it steps at once."""
    return Part(
        "optimizer temporaries",
        Fraction(elements * FP32, gpus),
        f"torch.optim.Adam (foreach, the CUDA default) builds sqrt(v) for {where} at once: "
        f"{per(FP32, elements, gpus)}",
    )


def ddp(setup: Setup, fw: DDP) -> Moments:
    """DDP: everything on every rank, plus flat buckets for every gradient, built once, at construction."""
    psi, layers, w, g, k = setup.model.params, setup.model.layers, setup.w, setup.g, setup.k
    weights = Part("weights", psi * w, f"DDP keeps all weights on every rank: {per(w, psi)}")
    optimizer = Part("optimizer", psi * k, f"DDP keeps all optimizer state on every rank: {per(k, psi)}")
    temporary = adam_temporary(psi, 1, "every parameter")
    if fw.gradient_as_bucket_view:
        return _ddp_bucket_view(setup, (weights, optimizer), temporary)
    cap = units.format_number(fw.bucket_cap_mb)
    buckets = f"DDP's buckets for all gradients, built once (bucket_cap_mb = {cap} only splits them)"
    base = (weights, optimizer, Part("gradient buckets", psi * g, f"{buckets}: {per(g, psi)}"))
    backward, done = [], 0
    for i in reversed(range(len(layers))):
        done += layers[i].params
        grads = f"autograd's param.grad for {span(layers[i:])}: {per(g, done)}"
        backward.append(base + (Part("gradients", done * g, grads),))
    full = base + (
        Part("gradients", psi * g, f"param.grad of every parameter, kept until zero_grad: {per(g, psi)}"),
    )
    return Moments(base, (base,) * len(layers), tuple(backward[::-1]), full, full, full + (temporary,), full)


def _ddp_bucket_view(setup: Setup, held: Parts, temporary: Part) -> Moments:
    """DDP with gradient_as_bucket_view: param.grad are views into the buckets, so there is one copy.

    zero_grad(set_to_none=True) drops the views, so in backward autograd makes each gradient anew
    and DDP copies it into its bucket view, one tensor at a time.
    """
    layers, psi, g = setup.model.layers, setup.model.params, setup.g
    held += (
        Part("gradients", psi * g, f"param.grad are views into DDP's buckets, built once: {per(g, psi)}"),
    )
    fresh = tuple(
        held
        + (
            Part(
                "unreduced gradients",
                layer.largest * g,
                f"autograd's new gradient of {layer.name}'s largest tensor, before DDP copies it "
                f"into its bucket view: {per(g, layer.largest)}",
            ),
        )
        for layer in layers
    )
    return Moments(held, (held,) * len(layers), fresh, held, held, held + (temporary,), held)
