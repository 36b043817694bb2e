"""How PyTorch FSDP2 (`fully_shard` on every layer) holds memory at each moment of a step.

Read from `torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py` and `_fsdp_collectives.py`
(PyTorch 2.13): each layer is one group, all-gathered before its forward into a flat output that is
copied out into the unsharded weights. In forward the flat output is kept until the next layer
copies in (implicit prefetching); with `reshard_after_forward` the weights are freed after the
layer's forward and gathered again for its backward, where the previous layer is prefetched. After
a layer's backward its full gradients are copied into a reduce-scatter input, kept until the next
layer reduces, and the output becomes the layer's sharded gradients. On one rank nothing is
all-gathered, but the unsharded weights are still a copy of the shard.
"""

from __future__ import annotations

from fractions import Fraction

from .step_knobs import FSDP2
from .step_parts import Part
from .step_rules import Moments, Parts, Setup, adam_temporary, per, share, span


def fsdp2(setup: Setup, fw: FSDP2) -> Moments:
    """FSDP2, every layer its own group: shards persist, and each layer is gathered around its use."""
    psi, n, layers, w, g, k = setup.model.params, setup.gpus, setup.model.layers, setup.w, setup.g, setup.k
    weights = Part(
        "weights", share(psi * w, n), f"FSDP2 keeps a 1/{n} shard of every weight: {per(w, psi, n)}"
    )
    optimizer = Part(
        "optimizer", share(psi * k, n), f"optimizer state for the local shards: {per(k, psi, n)}"
    )
    grads = Part("gradients", share(psi * g, n), f"sharded gradients, kept until zero_grad: {per(g, psi, n)}")
    sharded = (weights, optimizer)
    forward = tuple(sharded + _fsdp_forward(setup, fw, i) for i in range(len(layers)))
    backward = tuple(sharded + _fsdp_backward(setup, fw, i) for i in range(len(layers)))
    full = sharded + (grads,)
    temporary = adam_temporary(psi, n, "the local shards")
    return Moments(sharded, forward, backward, sharded + _late(setup), full, full + (temporary,), full)


def _late(setup: Setup) -> Parts:
    """As backward ends: the first layer's input needs no gradient, so its post-backward hook never runs and
    the root's final callback reshards and reduces it; until then it holds its weights and full gradients."""
    layers, w, g, n = setup.model.layers, setup.w, setup.g, setup.gpus
    first, rest = layers[0], sum(layer.params for layer in layers[1:])
    parts = [
        Part(
            "gradients", Fraction(rest) * g / n, f"sharded gradients of the other layers: {per(g, rest, n)}"
        ),
        Part(
            "gathered parameters",
            first.params * w,
            f"{first.name}'s weights, still gathered: its input needs no gradient, so only the final "
            f"callback reshards it: {per(w, first.params)}",
        ),
        Part(
            "unreduced gradients",
            first.params * g,
            f"{first.name}'s full gradients, reduce-scattered by that callback: {per(g, first.params)}",
        ),
    ]
    if len(layers) > 1:
        nxt = layers[1]
        held = f"reduce-scatter input of {nxt.name}, kept until {first.name} reduces: {per(g, nxt.params)}"
        parts.append(Part("gradient buckets", nxt.params * g, held))
    return tuple(parts)


def _fsdp_forward(setup: Setup, fw: FSDP2, i: int) -> Parts:
    """Gathered weights during layer i's forward."""
    layers, w, n = setup.model.layers, setup.w, setup.gpus
    layer = layers[i]
    parts = [
        Part(
            "gathered parameters",
            layer.params * w,
            f"{layer.name}'s weights, {'all-gathered' if n > 1 else 'copied whole from the shard'} for its "
            f"forward: {per(w, layer.params)}",
        )
    ]
    # The flat all-gather output waits for the next layer's copy-in (_fsdp_param_group.py, AllGatherState).
    if n > 1:
        parts.append(
            Part(
                "gathered parameters",
                layer.params * w,
                f"{layer.name}'s flat all-gather output, kept "
                f"until the next layer copies in: {per(w, layer.params)}",
            )
        )
    if not fw.reshards and i > 0:
        kept = sum(before.params for before in layers[:i])
        parts.append(
            Part(
                "gathered parameters",
                kept * w,
                f"weights of {span(layers[:i])} kept gathered (reshard_after_forward=False): {per(w, kept)}",
            )
        )
    return tuple(parts)


def _fsdp_backward(setup: Setup, fw: FSDP2, i: int) -> Parts:
    """Gathered weights, gradients and reduce-scatter buffers during layer i's backward, before it reduces."""
    layers, w, g, n = setup.model.layers, setup.w, setup.g, setup.gpus
    layer, later = layers[i], layers[i + 1 :]
    again = (
        ("all-gathered again" if n > 1 else "copied again") if fw.reshards else "still gathered since forward"
    )
    full = f"{layer.name}'s full gradients, before its reduce-scatter: {per(g, layer.params)}"
    parts = [
        Part(
            "gathered parameters",
            layer.params * w,
            f"{layer.name}'s weights, {again}: {per(w, layer.params)}",
        ),
        Part("unreduced gradients", layer.params * g, full),
    ]
    if not fw.reshards and i > 0:
        kept = sum(before.params for before in layers[:i])
        still = f"weights of {span(layers[:i])} still gathered since forward: {per(w, kept)}"
        parts.append(Part("gathered parameters", kept * w, still))
    elif n > 1 and i > 0:
        prev = layers[i - 1]
        ahead = f"{prev.name}'s weights, prefetched for the next backward: {per(w, prev.params)}"
        parts.append(Part("gathered parameters", prev.params * w, ahead))
    if later:
        done, nxt = sum(after.params for after in later), later[0]
        held = f"reduce-scatter input of {nxt.name}, kept until this layer reduces: {per(g, nxt.params)}"
        parts += [
            Part(
                "gradients", Fraction(done) * g / n, f"sharded gradients of {span(later)}: {per(g, done, n)}"
            ),
            Part("gradient buckets", nxt.params * g, held),
        ]
    return tuple(parts)
