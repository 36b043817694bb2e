"""How DeepSpeed 0.19.8's ZeRO optimizer holds memory at each moment of a step: stages 1 and 2.

Read from `deepspeed/runtime/zero/stage_1_and_2.py`, with bf16 weights and gradients (gradients are
accumulated in the model's dtype, DeepSpeed's default; an fp32 accumulation dtype at stage 1 makes
DeepSpeed pick its separate BF16_Optimizer, which is left out):
- stages 1 and 2 keep every weight in one flat buffer and the fp32 master weights and Adam moments
  for the rank's 1/N partition. With `contiguous_gradients`, the first gradient hook allocates a
  bucket of `reduce_bucket_size` elements (two with `overlap_comm`) and each new gradient is copied
  into it; a full bucket is reduced and the rank copies its own partition's gradients into a
  partition-sized buffer, allocated at the first reduction. Stage 1 without `overlap_comm` reduces
  nothing during backward: every gradient stays whole until backward ends. After backward both
  stages keep only their partition's gradients.
- `step()` first takes the gradient norm, copying one gradient at a time to fp64 (`get_norm_dtype`);
  then it flattens the partition's gradients into a new tensor, casts that to fp32, frees the bf16
  ones, and runs the optimizer (FusedAdam on GPU: no full-size temporaries). The updated weights are
  all-gathered in place into the flat buffer; `allgather_bucket_size` only splits that traffic (and
  with `all_gather_into_tensor`, as NCCL has, it is not used at all).
Stage 3 lives in `step_zero3`; the buckets and the hooks' new gradients are shared with it.
"""

from __future__ import annotations

from fractions import Fraction

from .. import units
from .step_knobs import DeepSpeed
from .step_parts import Part
from .step_rules import FP32, Moments, Parts, Setup, per, share, span

FP64 = 8  #: bytes of an fp64 element: DeepSpeed takes gradient norms in fp64


def bucket_walk(setup: Setup, bucket: int) -> tuple[list[int], list[int], int | None, int]:
    """Fill a bucket of `bucket` elements with gradients in the order backward makes them.

    Returns, per layer: the most elements waiting during its backward, and the elements reduced by
    its end; then the layer during whose backward the first bucket is reduced (None: only at the
    end), and the elements still waiting when backward ends. A tensor that does not fit flushes a
    non-empty bucket first.
    """
    layers = setup.model.layers
    waiting_most, reduced_by = [0] * len(layers), [0] * len(layers)
    waiting, reduced, first = 0, 0, None
    for i in reversed(range(len(layers))):
        for size in reversed(layers[i].tensors):
            if waiting and waiting + size > bucket:
                reduced, waiting = reduced + waiting, 0
                first = i if first is None else first
            waiting += size
            waiting_most[i] = max(waiting_most[i], waiting)
        reduced_by[i] = reduced
    return waiting_most, reduced_by, first, waiting


def first_bucket(setup: Setup, bucket: int) -> int:
    """Elements in the first bucket when stage 1 reduces after backward, walking tensors in forward order."""
    filled = 0
    for layer in setup.model.layers:
        for size in layer.tensors:
            if filled and filled + size > bucket:
                return filled
            filled += size
    return filled


def buckets(setup: Setup, fw: DeepSpeed, when: str) -> Parts:
    """The contiguous gradient bucket(s), when `contiguous_gradients` is on."""
    if not fw.contiguous_gradients:
        return ()
    count = 2 if fw.overlap_comm and fw.stage < 3 else 1
    double = ", two for overlap_comm" if count == 2 else ""
    return (
        Part(
            "gradient buckets",
            count * fw.reduce_bucket_size * setup.g,
            f"contiguous_gradients {when} a bucket of reduce_bucket_size elements{double}: "
            f"{per(count * setup.g, fw.reduce_bucket_size)}",
        ),
    )


def hook_gradients(setup: Setup, fw: DeepSpeed) -> tuple[list[Part], Parts]:
    """Gradients waiting to be reduced during each layer's backward, and when backward ends.

    With `contiguous_gradients` the hook copies each new gradient into the bucket at once, so only
    one waits, at most the layer's largest tensor; without it, gradients wait as they are until
    their bucket fills.
    """
    layers, g = setup.model.layers, setup.g
    if fw.contiguous_gradients:
        return [
            Part(
                "unreduced gradients",
                layer.largest * g,
                f"autograd's new gradient of {layer.name}'s largest tensor, before the hook copies it "
                f"into the bucket: {per(g, layer.largest)}",
            )
            for layer in layers
        ], ()
    most, _, _, left = bucket_walk(setup, fw.reduce_bucket_size)
    waiting = [
        Part(
            "unreduced gradients",
            most[i] * g,
            f"gradients waiting for their bucket to fill: {per(g, most[i])}",
        )
        for i in range(len(layers))
    ]
    last = Part(
        "unreduced gradients",
        left * g,
        f"the last bucket's gradients, reduced as backward ends: {per(g, left)}",
    )
    return waiting, (last,)


def zero12(setup: Setup, fw: DeepSpeed) -> Moments:
    """Stages 1 and 2: whole weights, 1/N of the optimizer state, gradients as the buckets move them."""
    psi, n, layers, w, g, k = setup.model.params, setup.gpus, setup.model.layers, setup.w, setup.g, setup.k
    held = (
        Part("weights", psi * w, f"{fw.label} keeps every weight in one flat buffer: {per(w, psi)}"),
        Part(
            "optimizer",
            share(psi * k, n),
            f"fp32 master weights and moments for the 1/{n} partition: {per(k, psi, n)}",
        ),
    )
    partition = Part(
        "gradients", share(psi * g, n), f"gradients of this rank's partition only: {per(g, psi, n)}"
    )
    base = held + buckets(setup, fw, "allocates, at the first gradient hook,")
    if fw.stage == 2 or fw.overlap_comm:
        backward, reduction = _reduce_in_backward(setup, fw, base, partition)
    else:
        backward, reduction = _reduce_after_backward(setup, fw, base, partition)
    ready = held + (partition,)
    flat = Part(
        "optimizer temporaries",
        share(psi * g, n),
        f"step() flattens the partition's gradients: {per(g, psi, n)}",
    )
    cast = Part("fp32 gradients", Fraction(psi * FP32, n), f"step() casts them to fp32: {per(FP32, psi, n)}")
    return Moments(
        held, (held,) * len(layers), backward, reduction, ready, ready + _step(setup, flat, cast), held
    )


def _step(setup: Setup, flat: Part, cast: Part) -> Parts:
    """The optimizer step's highest point: its flat and fp32 copies, or, when larger, the gradient norm's.

    The norm comes first (`get_grad_norm_direct`) and copies one gradient at a time to fp64: at most the
    largest tensor, or a whole partition when a tensor is larger than that.
    """
    largest = min(
        Fraction(max(layer.largest for layer in setup.model.layers)), Fraction(setup.model.params, setup.gpus)
    )
    if largest * FP64 <= flat.nbytes + cast.nbytes:
        return flat, cast
    elements = units.format_count(int(largest))
    return (
        Part(
            "optimizer temporaries",
            largest * FP64,
            f"step() takes the gradient norm in fp64, one tensor at a time: {FP64} B × {elements}",
        ),
    )


def _reduce_in_backward(
    setup: Setup, fw: DeepSpeed, base: Parts, partition: Part
) -> tuple[tuple[Parts, ...], Parts]:
    """Stage 2 (or stage 1 with overlap_comm): each full bucket is reduced while backward runs.

    With contiguous gradients the rank's partition buffer exists from the first reduction on;
    without, its gradients are kept as they are, so its share grows with what has been reduced.
    """
    g, n = setup.g, setup.gpus
    _, reduced_by, first, _ = bucket_walk(setup, fw.reduce_bucket_size)
    waiting, last = hook_gradients(setup, fw)
    backward = []
    for i, fresh in enumerate(waiting):
        if fw.contiguous_gradients:
            mine = (partition,) if first is not None and i <= first else ()
        else:
            share = Fraction(reduced_by[i]) * g / n
            mine = (
                Part(
                    "gradients",
                    share,
                    f"this rank's share of the gradients reduced so far: {per(g, reduced_by[i], n)}",
                ),
            )
        backward.append(base + mine + (fresh,))
    return tuple(backward), base + (partition,) + last


def _reduce_after_backward(
    setup: Setup, fw: DeepSpeed, base: Parts, partition: Part
) -> tuple[tuple[Parts, ...], Parts]:
    """Stage 1 without overlap_comm: gradients stay whole through backward and are reduced after it."""
    layers, g, psi = setup.model.layers, setup.g, setup.model.params
    backward, done = [], 0
    for i in reversed(range(len(layers))):
        done += layers[i].params
        whole = (
            f"stage 1 without overlap_comm keeps the gradients of {span(layers[i:])} whole: {per(g, done)}"
        )
        backward.append(base + (Part("unreduced gradients", done * g, whole),))
    if (
        fw.contiguous_gradients
    ):  # the first bucket has moved into the buffer; every other gradient still waits
        rest = psi - first_bucket(setup, fw.reduce_bucket_size)
        later = f"gradients not yet in a bucket when the first one is reduced: {per(g, rest)}"
        reduction = base + (partition, Part("unreduced gradients", rest * g, later))
    else:
        kept = f"every gradient, kept whole until the reduction ends: {per(g, psi)}"
        reduction = base + (Part("unreduced gradients", psi * g, kept),)
    return tuple(backward[::-1]), reduction
