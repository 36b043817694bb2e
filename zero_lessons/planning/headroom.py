"""The room the advice leaves free on each GPU, and what it says when a choice fits only with less.

The article's bare rule takes the lowest stage whose model state fits. A pick that fills a card to the last
percent fails in practice: the CUDA context, communication buffers and the transient peaks of lesson 12 need
room that the model state leaves out. So the advice asks every choice to leave `headroom` of each GPU free
(HEADROOM, 10%, unless told otherwise), names a lower choice that fits only with less, and warns when a pick
made with a smaller headroom leaves under HEADROOM free. It sizes stages by the ZeRO paper's count, and warns
when DeepSpeed's own estimator, which counts more at stages 1 and 2, would leave less than the headroom free.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from .. import memory, units
from ..inputs import Setup
from ..recipes import MIXED_ADAM
from ..stages import Stage
from . import ds_estimator, host_check, offload

#: The share of each GPU the advice leaves free unless told otherwise; below it, a pick is warned about.
HEADROOM = Fraction(1, 10)
#: What else needs room, by where the headroom is thin.
CLAIMANTS = {
    "per GPU": "the CUDA context (the GPU runtime and its libraries, several hundred MB per process), "
    "communication buffers and fragmentation need room",
    "of host memory per node": "the operating system, pinned buffers and the data loader need room",
}
#: Why a fit with less than the headroom is passed over, in a few words.
TOO_LITTLE = (
    "the margin kept for the CUDA context, buffers and at least part of a step's transient peaks (lesson 12)"
)

#: What DeepSpeed's estimator adds to the paper's count at stages 1 and 2, in a few words.
FP32_COPY = "it adds an fp32 copy of the gradient shard, made at the optimizer step"

#: How the advice shows bytes: `units.format_bytes` with the caller's unit.
Show = Callable[[Fraction | int], str]


def percent(share: Fraction) -> str:
    """A share as a percentage without its sign, to at most one decimal: 1/10 -> "10", 0.0128 -> "1.3"."""
    return units.format_number(100 * share, 1)


def budget(capacity: Fraction, share: Fraction) -> Fraction:
    """The bytes a choice may use on a card of `capacity` bytes that leaves `share` of it free."""
    return capacity * (1 - share)


def leaving(share: Fraction) -> str:
    """', leaving at least 10% of each free' for a GPU count that keeps `share` free; '' when `share` is 0."""
    return f", leaving at least {percent(share)}% of each free" if share else ""


def fewest(setup: Setup, stage: Stage, act: Fraction, share: Fraction) -> int | None:
    """Fewest GPUs on which `stage`'s model state plus `act` leaves `share` of each GPU free, or None."""
    room = budget(setup.gpu_memory, share) - act
    return memory.min_gpus(setup.params, room, stage, setup.recipe) if room >= 1 else None


def thin_fit(label: str, need: Fraction, capacity: Fraction, share: Fraction, show: Show) -> str:
    """Why a lower choice `label` was passed over: it is under `capacity`, but leaves under `share` free."""
    free = capacity - need
    why = TOO_LITTLE if share <= HEADROOM else "the headroom asked for"
    return (
        f"{label} would leave only {show(free)} ({percent(free / capacity)}%) free: under "
        f"{percent(share)}%, {why}; pass headroom=0 (--headroom 0) for the article's bare rule"
    )


def warning(need: Fraction, capacity: Fraction, where: str, show: Show, options=()) -> tuple[str, ...]:
    """A warning when `need` leaves less than HEADROOM of `capacity` free; `where` is a key of CLAIMANTS.

    The warning names the first of `options` ((label, bytes needed), next choices up) that leaves HEADROOM.
    """
    if capacity - need >= capacity * HEADROOM:
        return ()
    return (
        f"only {show(capacity - need)} of {show(capacity)} {where} is left free, under "
        f"{percent(HEADROOM)}%: {CLAIMANTS[where]}"
        + host_check.roomier(list(options), capacity, HEADROOM, show),
    )


def whole_model_warning(setup: Setup, stage: Stage | None, share: Fraction, show: Show) -> tuple[str, ...]:
    """For a stage-3 pick, a warning when the whole 16-bit model, which DeepSpeed's engine moves onto each GPU
    before partitioning it unless the script builds the model inside deepspeed.zero.Init, leaves under `share`
    of the card free (or does not fit it at all)."""
    if stage is not Stage.ZERO3 or setup.gpu_memory is None:
        return ()
    card, whole = setup.gpu_memory, host_check.whole_model(setup)
    limit = budget(card, share)
    if whole <= limit:
        return ()
    than = (
        f"its {show(card)}"
        if whole > card
        else f"the {show(limit)} that {percent(share)}% headroom leaves of {show(card)}"
    )
    return (
        "build the model inside deepspeed.zero.Init, which is code, not a config key: without it DeepSpeed's "
        f"engine first moves the whole 16-bit model, {show(whole)}, onto each GPU, more than {than}",
    )


def thin_offload(
    setup: Setup, act: Fraction, host: Fraction, per_node: int, share: Fraction, show: Show, stop: int
) -> list[str]:
    """A reason naming the first of the first `stop` offloads that fits host and GPU, but not `share`."""
    for plan in offload.plans(setup, act, per_node)[:stop]:
        if plan.gpu <= setup.gpu_memory and host_check.fits_both(setup, plan, host, per_node):
            label = f"{plan.stage.label} with {plan.offload} offload"
            return [thin_fit(label, plan.gpu, setup.gpu_memory, share, show)]
    return []


def estimator_warning(
    setup: Setup, stage: Stage | None, act: Fraction, share: Fraction, show: Show
) -> tuple[str, ...]:
    """A warning when a stage-1 or stage-2 pick, by DeepSpeed's estimator, leaves under `share` of a GPU free.

    DeepSpeed's stages 1 and 2 share one estimator, 2Ψ + 18Ψ/N_d bytes per GPU: the paper's stage 2 plus the
    fp32 copy of the gradient shard (4Ψ/N_d). It counts mixed-precision Adam only, so other recipes are not
    checked. Stage 3 is not checked: its estimator needs the largest layer's size, not in `setup`.
    """
    if stage not in (Stage.ZERO1, Stage.ZERO2) or setup.recipe != MIXED_ADAM:
        return ()
    capacity = setup.gpu_memory
    need = ds_estimator.zero2_gpu(setup) + act
    if need <= budget(capacity, share):
        return ()
    room = (
        f"more than the {show(capacity)} a GPU holds"
        if need > capacity
        else f"leaving {show(capacity - need)} of {show(capacity)} free, under {percent(share)}%"
    )
    with_act = " with the activations" if act else ""
    return (f"by DeepSpeed's estimator this pick needs {show(need)} per GPU{with_act} ({FP32_COPY}), {room}",)
