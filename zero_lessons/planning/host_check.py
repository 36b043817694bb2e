"""Offload plans checked on the host by both counts: the package's, and DeepSpeed's estimator.

DeepSpeed's ZeRO-3 host figure depends on whether the training script builds the model inside
`deepspeed.zero.Init`. That is a line of code, not a config key, so no emitted config can switch it
on. The advice counts with zero.Init, as DeepSpeed's `zero_init=1` line does, says so in its reason,
and warns when the figure without zero.Init (every process first builds the whole model in fp32 on
the host) would not fit.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from .. import units
from ..inputs import Setup
from ..stages import Stage
from . import offload

#: How the advice shows bytes: `units.format_bytes` with the caller's unit.
Show = Callable[[Fraction | int], str]


def least_offload(
    setup: Setup,
    act: Fraction,
    host: Fraction,
    per_node: int,
    show: Show,
    reasons: list[str],
    limit: Fraction | None = None,
) -> tuple[offload.Plan, int] | None:
    """The first plan in offload's order whose GPU part fits `limit` and whose host part fits by both counts.

    `limit` is the bytes a plan may use per GPU: the card less the advice's headroom (default: the whole
    card). A reason is added to `reasons` for every plan whose GPU part fits, and one more when none fits.
    """
    limit = setup.gpu_memory if limit is None else limit
    tried = offload.plans(setup, act, per_node)
    for plan in tried:
        if plan.gpu > limit:
            continue
        ds_host = offload.deepspeed_host(setup, plan.stage, plan.offload, per_node)
        reasons.append(host_reason(setup, plan, ds_host, host, per_node, show))
        if max(plan.host, ds_host) <= host:
            return plan, ds_host
    if all(plan.gpu > limit for plan in tried):
        last, card = tried[-1].gpu, show(setup.gpu_memory)
        most = (
            card
            if last > setup.gpu_memory
            else f"{show(limit)}, what {card} holds with the headroom left free"
        )
        reasons.append(
            f"even with optimizer and parameters offloaded, {show(last)} per GPU is more than {most}"
        )
    else:
        reasons.append(_none_fits_host(setup, tried, host, show, limit))
    return None


def fits_both(setup: Setup, plan: offload.Plan, host: Fraction, per_node: int) -> bool:
    """Whether `plan` fits `host` bytes per node by both counts, the package's and DeepSpeed's estimator."""
    ds_host = offload.deepspeed_host(setup, plan.stage, plan.offload, per_node)
    return max(plan.host, ds_host) <= host


def _none_fits_host(
    setup: Setup, tried: tuple[offload.Plan, ...], host: Fraction, show: Show, limit: Fraction
) -> str:
    """Why no offload that fits the GPU (within `limit`) was taken, naming the count that refused it."""
    paper = [p for p in tried if p.gpu <= limit and p.host <= host]
    if not paper:
        return (
            f"no offload fits: each one that fits the GPU needs more than {show(host)} of host memory per "
            "node, even by the package's count"
        )
    return (
        f"no offload fits: {paper[0].stage.label} with {paper[0].offload} offload fits {show(host)} of host "
        "memory per node by the package's count only, not by DeepSpeed's estimator, which the advice checks"
    )


def host_reason(
    setup: Setup, plan: offload.Plan, ds_host: int, host: Fraction, per_node: int, show: Show
) -> str:
    """One offload choice's GPU and host memory, by the package's count and by DeepSpeed's estimator."""
    init = " with zero.Init" if plan.stage is Stage.ZERO3 else ""
    gathered = " before the gathered layers" if plan.stage is Stage.ZERO3 else ""
    head = (
        f"{plan.stage.label} with {plan.offload} offload: {show(plan.gpu)} per GPU{gathered}; host memory "
        f"per node {show(plan.host)} by the package's count and {show(ds_host)} by DeepSpeed's "
        f"estimator{init}, of {show(host)}"
    )
    if ds_host <= host:
        return head + (": fits" if plan.host <= host else ": the package's count does not fit")
    if plan.host > host:
        return head + ": neither count fits"
    nodes = offload.node_count(setup.gpus, per_node)
    ours, theirs = (units.format_number(Fraction(b * nodes, setup.params), 2) for b in (plan.host, ds_host))
    together = f", all {nodes:,} nodes together" if nodes > 1 else ""
    return (
        f"{head}: does not fit by DeepSpeed's estimator, which {offload.DEEPSPEED_HOST[plan.stage]} "
        f"({theirs} bytes per parameter in host memory{together}, where the package counts {ours})"
    )


def zero_init_warning(setup: Setup, plan: offload.Plan, host: Fraction, per_node: int, show: Show) -> str:
    """The warning that a stage-3 offload fits the host only if the model is built under zero.Init, or ""."""
    if plan.stage is not Stage.ZERO3:
        return ""
    bare = offload.deepspeed_host(setup, plan.stage, plan.offload, per_node, zero_init=False)
    if bare <= host:
        return ""
    return (
        "by DeepSpeed's estimator, the host fits only if the training script builds the model inside "
        "deepspeed.zero.Init, which is code, not a config key; without it DeepSpeed's estimator counts "
        f"{show(bare)} per node (an fp32 copy of the whole model in each of the node's "
        f"{min(per_node, setup.gpus)} processes, × 1.5), "
        f"more than {show(host)}{_whole_model(setup, show)}"
    )


def whole_model(setup: Setup) -> Fraction:
    """The whole 16-bit model's bytes, which DeepSpeed's engine moves onto each GPU before partitioning it
    unless the training script builds the model inside deepspeed.zero.Init."""
    return Fraction(setup.recipe.weight_bytes * setup.params)


def _whole_model(setup: Setup, show: Show) -> str:
    """What building without zero.Init costs each GPU: the whole 16-bit model, moved there before DeepSpeed
    partitions it; said when it is more than the card holds."""
    whole = whole_model(setup)
    if setup.gpu_memory is None or whole <= setup.gpu_memory:
        return ""
    card = show(setup.gpu_memory)
    return f"; and each GPU would first receive the whole 16-bit model, {show(whole)}, more than its {card}"


def roomier(options: list[tuple[str, Fraction]], capacity: Fraction, share: Fraction, show: Show) -> str:
    """'; X would leave Y free' for the first (label, bytes needed) leaving `share` of `capacity`, or ''."""
    for label, need in options:
        if capacity - need >= capacity * share:
            return f"; {label} would leave {show(capacity - need)} free"
    return ""
