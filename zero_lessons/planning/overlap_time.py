"""What two of lesson 17's keys do to a step's time, in seconds: `overlap_comm` at stages 1 and 2, and capping
stage 3's prefetch. No torch.

DeepSpeed's messages come from `ds_scale.predict` (the rules lesson 11's lab checks), sent per GPU by the
paper's count (an all-reduce twice its size, the ring's (N − 1)/N left out), in bf16 at a link's bandwidth.
The compute is about 6Ψ FLOPs per token (`offload.compute_time`), two thirds of it in the backward pass
(`offload_step.BACKWARD_SHARE`). Both are bounds, not measurements: a collective is taken at the link's full
bandwidth, and one that runs beside compute is taken to slow neither.

- `overlap_comm` (stages 1 and 2): the gradient all-reduces. Off, each blocks the backward pass while it runs,
  so all their seconds add to the step; on, they run beside the backward pass and add only what outlasts it.
  The all-gather of the updated weights comes after the optimizer step, beside nothing, either way.
- Stage 3's prefetch runs the all-gathers ahead, beside compute. With `stage3_prefetch_bucket_size` 0, or a
  `stage3_max_live_parameters` cap that the weights already held leave no room under, nothing is fetched
  ahead: each module waits for its own all-gathers, so all their seconds add (`stage3_time`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks, units
from . import ds_scale, offload
from .offload_step import BACKWARD_SHARE

#: DeepSpeed's default knobs.
DEFAULTS = ds_scale.Knobs()


def _seconds(elements: int, rate: Fraction) -> Fraction:
    """Seconds `elements` bf16 elements take at `rate` bytes per second."""
    return Fraction(ds_scale.BF16 * elements) / rate


@dataclass(frozen=True)
class OverlapComm:
    """A stage-1 or stage-2 step's time with `overlap_comm` off and on, in seconds."""

    stage: int  #: 1 or 2
    compute: Fraction  #: the forward and backward passes
    reductions: Fraction  #: the gradient all-reduces, alone on the link
    gather: Fraction  #: the updated weights' all-gather after the optimizer step, beside nothing

    @property
    def backward(self) -> Fraction:
        """The backward pass's compute, which the reductions may run beside."""
        return BACKWARD_SHARE * self.compute

    @property
    def off(self) -> Fraction:
        """The step with `overlap_comm` off: every reduction blocks the backward pass."""
        return self.compute + self.reductions + self.gather

    @property
    def on(self) -> Fraction:
        """The step with `overlap_comm` on: only what outlasts the backward pass adds."""
        return self.compute + max(Fraction(0), self.reductions - self.backward) + self.gather

    @property
    def saved(self) -> Fraction:
        """The seconds `overlap_comm` on takes off a step: the reductions, or the backward pass if shorter."""
        return self.off - self.on


def overlap_comm(
    stage: int = 2,
    *,
    tokens_per_gpu: int,
    flops_per_second,
    bandwidth,
    modules=None,
    gpus: int = 8,
    knobs: ds_scale.Knobs = DEFAULTS,
) -> OverlapComm:
    """`overlap_comm`'s effect on a step of `modules` (default: the 7.5 B model) at `stage` (1 or 2), on
    `gpus` GPUs each running `tokens_per_gpu` tokens at `flops_per_second`, over a link of `bandwidth`
    ("450 GB/s")."""
    stage = checks.whole("stage", stage, low=1, high=2)
    rate = units.as_rate("bandwidth", bandwidth)
    traffic = ds_scale.predict(modules, gpus, knobs)[stage]
    compute = offload.compute_time(traffic.params, tokens_per_gpu, flops_per_second)
    reductions, gather = (_seconds(traffic.sent_in(op), rate) for op in ("all_reduce", "all_gather"))
    return OverlapComm(stage, compute, reductions, gather)


@dataclass(frozen=True)
class Stage3Time:
    """A stage-3 step's collectives under one setting, in seconds alone on the link."""

    gathers: Fraction  #: the weight all-gathers
    scatters: Fraction  #: the gradient reduce-scatters
    gathered: int  #: all-gather elements sent


def stage3_time(knobs: ds_scale.Knobs = DEFAULTS, *, bandwidth, modules=None, gpus: int = 8):
    """Stage 3's all-gathers and reduce-scatters over a step of `modules` (default: the 7.5 B model) under
    `knobs`, in seconds at `bandwidth`. Where nothing is fetched ahead, each module waits for its own
    all-gathers: all their seconds add to the step."""
    rate = units.as_rate("bandwidth", bandwidth)
    traffic = ds_scale.predict(modules, gpus, knobs)[3]
    gathered, scattered = (traffic.sent_in(op) for op in ("all_gather", "reduce_scatter"))
    return Stage3Time(_seconds(gathered, rate), _seconds(scattered, rate), gathered)
