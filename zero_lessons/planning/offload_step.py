"""One step with the optimizer offloaded, in seconds: what hides behind compute, what waits, the sum.

By DeepSpeed's code (`offload.DEEPSPEED_PCIE`): each GPU's gradient shard goes down in fp32 during the
backward pass (stage 3 first sends it in 16 bits to a host buffer and back), so it hides behind that pass (two
thirds of the compute: 4Ψ of the 6Ψ FLOPs per token), and only what outlasts it adds to the step. At
stage 3 every GPU gets its slice of each gradient as it is reduced, so its trip can spread over the whole
backward pass. At stages 1 and 2 each GPU owns a contiguous slice of the flat buffer, and the GPU that owns
the first layers gets its gradients only in about the last 1/N of the backward pass: its trip hides only
there, and the step waits for it. The gradients go down bucket by bucket of `reduce_bucket_size`
(`BUCKET_ELEMENTS`; at stage 3 each GPU's 1/N of one), a bucket once the pass has reduced it, so the last
buckets' copies end after the pass: `bucket_tail.tail` gives the least and the most a trip adds (`Phase.adds`,
`Phase.most`), over where the bucket boundaries fall. The CPU's Adam step needs every gradient, and the
updated 16-bit weights come back only after it, so both wait. Collectives between GPUs are left out.

The CPU's Adam step is no byte count. Unless it is given, it is scaled from one report (DeepSpeed issue 6834:
about 10 s per optimizer step for 18 × 10⁹ parameters per node's CPUs, which a DeepSpeed maintainer agreed was
too slow): a rough, probably pessimistic guess, to be replaced by a measured time. Given the host's memory
bandwidth, `cpu_adam_floor` gives a floor instead: the time to stream Adam's bytes through host memory alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks, memory, tables, units
from ..stages import Stage, StageLike
from . import bucket_tail, offload
from .step_knobs import DeepSpeed

#: DeepSpeed issue 6834: seconds of the CPU's Adam step, and parameters each node's CPUs updated (72 B on 4).
ISSUE_6834 = (10, 72 * 10**9 // 4)
#: The share of the compute the backward pass takes: 4Ψ of 6Ψ FLOPs per token; with full recomputation it
#: also reruns the forward pass, 6Ψ of 8Ψ.
BACKWARD_SHARE = Fraction(2, 3)
RECOMPUTED_BACKWARD_SHARE = Fraction(3, 4)
#: How the step table labels the CPU's Adam step when it is scaled from issue 6834, not measured.
GUESS = "measure it; guessed here from one slow report"
#: How it labels the CPU's Adam step when only its floor in host memory bandwidth is known.
FLOOR = "measure it; at least the time its bytes take through host memory"
#: Longest CPU step `step` accepts, in seconds (a day).
MAX_CPU_STEP = 86_400
#: DeepSpeed's default `reduce_bucket_size`, in elements: a bucket of gradients (at stage 3 each GPU's slice
#: of it is 1/N).
BUCKET_ELEMENTS = DeepSpeed().reduce_bucket_size


#: What the compute row of the step stands for: the GPU's work alone, before any offload is added.
COMPUTE_ONLY = "— (compute only: no optimizer step, no collectives)"


@dataclass(frozen=True)
class Phase:
    """One part of the step: PCIe bytes per shard element, its time alone, and what it adds to the step."""

    name: str  #: what happens
    pcie: int | None  #: bytes per shard element over PCIe, None when nothing crosses it
    seconds: Fraction  #: its time alone
    adds: Fraction  #: the seconds it adds to the step, the least (0 when it hides behind the compute)
    why: str  #: why it hides or waits
    estimated: bool = False  #: True when `seconds` is an estimate, not a count
    floor: Fraction | None = None  #: the least an estimated phase can take, when known
    #: when it runs: "compute" (the passes), a PCIe trip "forward" or "backward" (during that pass) or
    #: "after" (after the CPU's step), or "cpu" (the CPU's Adam step); `present.offload_timeline` draws it
    during: str = "compute"
    #: for a trip during a pass, the seconds at the pass's end in which it can run (all of the pass but at
    #: stages 1 and 2, whose gradients reach the last GPU in the backward pass's last 1/N); else None
    window: Fraction | None = None
    #: for a trip made bucket by bucket, the most it can add, as the buckets fall (`bucket_tail`); else None
    upto: Fraction | None = None

    @property
    def most(self) -> Fraction:
        """The most it can add to the step: `upto` for a bucketed trip, else `adds`."""
        return self.adds if self.upto is None else self.upto


@dataclass(frozen=True)
class Step:
    """The phases of one step, in order; the step takes the sum of what each adds."""

    phases: tuple[Phase, ...]  #: compute, the PCIe trips, the CPU's Adam step, and any trip after it
    backward_share: Fraction = BACKWARD_SHARE  #: the backward pass's share of the compute

    @property
    def total(self) -> Fraction:
        """Seconds per step, the least: what every phase adds at the least (`Phase.adds`)."""
        return sum((phase.adds for phase in self.phases), Fraction(0))

    @property
    def most(self) -> Fraction:
        """Seconds per step, the most: what every phase adds at the most (`Phase.most`)."""
        return sum((phase.most for phase in self.phases), Fraction(0))

    def rows(self) -> list[list[str]]:
        """The phases and the total as table rows. An estimated CPU step reads "at least X" (its floor, to
        0.01 s) or "guess: about X" (scaled from issue 6834, to 0.1 s), labelled FLOOR or GUESS; the total is
        then what was counted plus "the CPU's step", with the estimated sum beside it. What the buckets can
        add shows as a range, "least to most"."""
        rows = [
            ["phase", "PCIe bytes per shard element", "seconds alone", "hides behind compute?", "adds, s"]
        ]
        for p in self.phases:
            pcie = "—" if p.pcie is None else str(p.pcie)
            name = f"{p.name} ({FLOOR if p.floor is not None else GUESS})" if p.estimated else p.name
            rows.append([name, pcie, _shown(p.seconds, p), p.why, _shown(p.adds, p, p.most)])
        total = f"**{seconds_range(self.total, self.most)}**"
        estimated = [p for p in self.phases if p.estimated]
        if estimated:  # what is counted in bold, the estimated sum beside it
            cpu = estimated[0].adds
            counted = seconds_range(self.total - cpu, self.most - cpu)
            total = f"**{counted} + the CPU's step** ({_shown(self.total, estimated[0], self.most)})"
        rows.append(["**the step**", "", "", "", total])
        return rows

    def table(self) -> str:
        """`rows` as a Markdown table."""
        return tables.markdown(self.rows(), ["---", "--:", "--:", "---", "--:"])


def seconds_range(least, most, digits: int = 3) -> str:
    """Seconds as "least to most", to `digits` decimals, or one number when both round alike."""
    low, high = (
        units.format_number(checks.amount(n, v), digits) for n, v in (("least", least), ("most", most))
    )
    return low if low == high else f"{low} to {high}"


def _shown(seconds: Fraction, phase: Phase, most: Fraction | None = None) -> str:
    """`seconds` (to `most`, when given) as the table shows them for `phase`: exact when counted, else as
    its floor (to 0.01 s) or guess (to 0.1 s)."""
    digits = 3 if not phase.estimated else 2 if phase.floor is not None else 1
    shown = seconds_range(seconds, seconds if most is None else most, digits)
    if not phase.estimated:
        return shown
    return f"at least {shown}" if phase.floor is not None else f"guess: about {shown}"


def cpu_adam_seconds(params_per_node: int) -> Fraction:
    """Seconds of the CPU's Adam step, scaled from issue 6834 by the parameters one node's CPUs update."""
    seconds, updated = ISSUE_6834
    return Fraction(
        seconds * checks.whole("params_per_node", params_per_node, high=checks.MAX_PARAMS), updated
    )


#: Bytes the CPU's Adam step moves through host memory per parameter: it reads the fp32 weight, gradient and
#: two moments (4 × 4) and writes the weight and the moments back (3 × 4).
CPU_ADAM_BYTES = 28


def cpu_adam_floor(params_per_node: int, bandwidth) -> Fraction:
    """Seconds of the CPU's Adam step if streaming its CPU_ADAM_BYTES per parameter through host memory at
    `bandwidth` were all it did: a floor, where `cpu_adam_seconds`'s scaled report is probably too high."""
    params = checks.whole("params_per_node", params_per_node, high=checks.MAX_PARAMS)
    return CPU_ADAM_BYTES * params / units.as_rate("bandwidth", bandwidth)


def _cpu_adam(params: int, gpus: int, gpus_per_node: int, cpu_step, host_bandwidth) -> Phase:
    """The CPU's Adam step: `cpu_step` seconds if measured; else `cpu_adam_floor`'s floor when
    `host_bandwidth` is given, and issue 6834's scaled rate when not."""
    why = "no: it needs every gradient"
    rate = None if host_bandwidth is None else units.as_rate("host_bandwidth", host_bandwidth)
    if cpu_step is not None:
        seconds = checks.amount("cpu_step", cpu_step, positive=True, high=(MAX_CPU_STEP, "86,400 s (a day)"))
        return Phase("the CPU's Adam step", None, seconds, seconds, why, during="cpu")
    per_node = memory.ceil_div(params * min(checks.gpus_per_node(gpus_per_node), gpus), gpus)
    if rate is not None:  # the floor, where issue 6834's report is probably too slow
        floor = cpu_adam_floor(per_node, rate)
        return Phase(
            "the CPU's Adam step", None, floor, floor, why, estimated=True, floor=floor, during="cpu"
        )
    guess = cpu_adam_seconds(per_node)
    return Phase("the CPU's Adam step", None, guess, guess, why, estimated=True, during="cpu")


def _down(stage: Stage) -> tuple[str, int]:
    """What crosses PCIe during the backward pass, and its bytes per shard element, by DeepSpeed's code
    (stage3.py's partition_grads first sends the 16-bit gradient to the host buffer and back)."""
    three = stage == Stage.ZERO3
    what = "gradients down and back (16-bit), then down (fp32)" if three else "gradients down (fp32)"
    return what, offload.DEEPSPEED_BACKWARD[stage]


def _window(stage: Stage, backward: Fraction, gpus: int) -> tuple[Fraction, str]:
    """The part of the backward pass in which the last GPU to get its gradients can send them down, and its
    name: all of it at stage 3; at stages 1 and 2, about its last 1/N, where the first layers' gradients
    arrive (the backward pass's time taken as even over the parameters)."""
    if stage == Stage.ZERO3 or gpus == 1:
        return backward, "the backward pass"
    return backward / gpus, f"the backward pass's last 1/{gpus}, when the first layers' gradients arrive"


def _hidden(
    name: str,
    pcie: int,
    seconds: Fraction,
    window: Fraction,
    where: str,
    during: str = "backward",
    tail: tuple[Fraction, Fraction] | None = None,
) -> Phase:
    """A PCIe trip that runs during `where` (`window` seconds of compute, in the pass `during`): only what
    outlasts it adds; made bucket by bucket, it adds `tail`, least and most, as its last buckets' copies
    end after the pass."""
    outlasts = max(seconds - window, Fraction(0))
    hides = f"partly: it outlasts {where}" if outlasts else f"yes: during {where}"
    if tail is None:
        return Phase(name, pcie, seconds, outlasts, hides, during=during, window=window)
    if not outlasts and tail[1]:
        hides = f"partly: during {where}, but its last buckets' copies end after it"
    return Phase(name, pcie, seconds, tail[0], hides, during=during, window=window, upto=tail[1])


def _tail(stage: Stage, elements: int, gpus: int, window: Fraction, per_element: Fraction):
    """`bucket_tail.tail` for a GPU's gradients arriving over `window` seconds, copied at `per_element`
    seconds an element: a whole `BUCKET_ELEMENTS` of them at a time at stages 1 and 2 (the first layers' GPU
    owns the pass's last buckets outright), its 1/N slice of one at stage 3."""
    mine = Fraction(BUCKET_ELEMENTS, gpus) if stage == Stage.ZERO3 else Fraction(BUCKET_ELEMENTS)
    return bucket_tail.tail(elements, mine, window, per_element)


def step(
    params: int,
    gpus: int,
    tokens_per_gpu: int,
    flops_per_second,
    bandwidth,
    *,
    stage: StageLike = Stage.ZERO2,
    cpu_step=None,
    gpus_per_node: int = 8,
    host_bandwidth=None,
    parameters: bool = False,
    recompute: bool = False,
) -> Step:
    """A step at `stage` (1 to 3) with the optimizer offloaded, and with `parameters` the parameters too
    (stage 3 only): compute, DeepSpeed's PCIe trips, and the CPU's Adam step (`cpu_step` seconds if
    measured; else, given the host's memory bandwidth `host_bandwidth`, its floor there; else scaled from
    issue 6834). With `recompute` every layer is recomputed: 8Ψ FLOPs per token, 3/4 of them in the backward
    pass, which the trips can hide behind."""
    offloaded_too = "optimizer+parameters" if checks.flag("parameters", parameters) else "optimizer"
    stage, _ = offload.rule(stage, offloaded_too)
    rate = units.as_rate("bandwidth", bandwidth)
    elements = memory.shard_elements(params, gpus)
    tokens = checks.whole("tokens_per_gpu", tokens_per_gpu, high=offload.MAX_TOKENS)
    compute = offload.compute_time(params, tokens, flops_per_second, recompute=recompute)
    share = RECOMPUTED_BACKWARD_SHARE if recompute else BACKWARD_SHARE  # the backward pass's share
    adam = _cpu_adam(params, gpus, gpus_per_node, cpu_step, host_bandwidth)
    first = Phase("forward and backward compute", None, compute, compute, COMPUTE_ONLY)
    if parameters:
        return Step((first, *_parameter_trips(elements, gpus, rate, compute, share), adam), share)
    what, down_bytes = _down(stage)
    window, where = _window(stage, share * compute, gpus)
    tail = _tail(stage, elements, gpus, window, down_bytes / rate)
    trip = _hidden(what, down_bytes, down_bytes * elements / rate, window, where, tail=tail)
    return Step((first, trip, adam, _back(elements, rate)), share)


def _back(elements: int, rate: Fraction) -> Phase:
    """The updated 16-bit weights' trip back to the GPU, which waits for the CPU's step."""
    back = offload.DEEPSPEED_BACK * elements / rate
    why = "no: it comes after the CPU's step"
    return Phase("weights back (16-bit)", offload.DEEPSPEED_BACK, back, back, why, during="after")


def _parameter_trips(
    elements: int, gpus: int, rate: Fraction, compute: Fraction, share: Fraction
) -> tuple[Phase, Phase]:
    """With the parameters on the host too (DeepSpeed's code, `counts.PARAMS_PCIE`): each layer's 16-bit
    weight shard comes up for the forward pass, hidden behind it; in the backward pass the gradients' trips
    and, unless the layer is still held, the weights again (the cautious 10 bytes, not 8), their last buckets'
    copies after it (all 10 bytes taken as bucketed, the cautious side). The CPU writes the updated weights
    into the host's copy, so nothing comes back after its step."""
    forward = 1 - share
    up, backward = 2, offload.DEEPSPEED_BACKWARD[Stage.ZERO3] + 2
    tail = _tail(Stage.ZERO3, elements, gpus, share * compute, backward / rate)
    return (
        _hidden("weights up for the forward pass (16-bit)", up, up * elements / rate, forward * compute,
                "the forward pass", "forward"),
        _hidden("gradients down and back (16-bit), down (fp32); weights up again unless still held", backward,
                backward * elements / rate, share * compute, "the backward pass", tail=tail),
    )  # fmt: skip
