"""Choosing a stage from the memory profile, by the article's rules, with the numbers behind it.

The advice ranks stages the ZeRO paper's way (lower stages communicate less) and says so in one line
of every answer; `RANKING` says at length what changes under DeepSpeed's defaults. Offload is checked
twice on the host (`host_check`): by the paper's count, and by DeepSpeed's own estimator, which counts more.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import partial

from .. import checks, communication, memory, units
from ..inputs import Setup
from ..memory import Breakdown
from ..recipes import MIXED_ADAM, RecipeLike
from ..stages import Stage
from . import ds_config, host_check, offload
from .activations import Transformer, activation_bytes

#: What the advice says for each key of `Advice.rule`, naming the article's rule (1, 2 or 3) where one fires.
RULES = {
    "replicate": "Everything fits on every GPU: plain data parallelism, no rule needed.",
    "partition-optimizer": "Rule 1: the parameters fit but the optimizer state does not, so stage 1 or 2.",
    "partition-parameters": "Rule 2: fully replicated parameters do not fit, so stage 3.",
    "stage-3-or-more-gpus": "Rule 1, one stage further: the parameters fit whole, but stage 1's and 2's "
    "shards do not on this many GPUs, so stage 3, or add GPUs until stage 2 fits.",
    "activations": "Rule 3: model state fits under stage 3 but activations do not, so add activation "
    "checkpointing or use a smaller micro-batch.",
    "offload": "Offload (not a numbered rule): not even stage 3 fits on the GPUs, so offload state to "
    "host memory, at a cost in PCIe traffic.",
    "does-not-fit": "No rule is enough: the model state does not fit on these GPUs even under stage 3.",
}
#: When nothing fits, what else would help, by why offload did not: never what the advice just ruled out.
HELP = {"untried": "offload to host memory, ", "host": "more host memory per node, ", "gpu": ""}
#: Below this share of memory left free, the advice warns (see CLAIMANTS for what else needs the room).
HEADROOM = Fraction(1, 10)
#: What else needs room, by where the headroom is thin.
CLAIMANTS = {
    "per GPU": "the CUDA context (the GPU runtime and its libraries, several hundred MB per process), "
    "communication buffers and fragmentation need room",
    "of host memory per node": "the operating system, pinned buffers and the data loader need room",
}
#: The warning when the advice counted model state only.
NO_ACTIVATIONS = (
    "activations were left at 0: only model state is counted, but every GPU also keeps the "
    "activations of its micro-batch (give them with activations= in Python, or --activations in "
    "zero-lessons advise)"
)
_FREE = f"leaving {units.format_number(100 * HEADROOM)}% of each free"
_PAPER = {stage: sum(c.multiple for c in communication.collectives(stage)) for stage in Stage}
#: The ranking in one line, as every answer ends.
RANKING_LINE = (
    f"Ranking: the ZeRO paper's, lowest stage first (stages 0-2 send {_PAPER[Stage.ZERO2]}Ψ per step, "
    f"stage 3 {_PAPER[Stage.ZERO3]}Ψ); under DeepSpeed's defaults a higher stage costs little or no more."
)
#: The ranking at length: the paper's, and what DeepSpeed's defaults send instead (lessons 07 and 08;
#: the 7.5 B figure is `ds_scale.predict`'s, checked in tests/test_advisor_config.py).
RANKING = (
    f"Ranking: the ZeRO paper's. Stages 0-2 send {_PAPER[Stage.ZERO2]}Ψ per GPU per step and stage 3 "
    f"sends {_PAPER[Stage.ZERO3]}Ψ, so the lowest stage that fits sends least. DeepSpeed's defaults "
    "differ: ZeRO-1/2 send about 3Ψ (a bucketed all-reduce, then the weight all-gather). ZeRO-3 sends "
    "about 2Ψ on lesson 08's small model, where every gathered weight is kept for the backward pass, "
    "and about 2.9Ψ for a 7.5 B GPT, where most are gathered again. So under DeepSpeed a higher stage "
    "costs little or no extra traffic."
)


@dataclass(frozen=True, repr=False)
class Advice:
    """The lowest stage that fits, the article rule that picked it, and the numbers behind it."""

    stage: Stage | None  #: lowest stage whose model state plus activations fit, or None
    rule: str  #: key into RULES
    needs: tuple[Fraction, ...]  #: per-GPU bytes (model state + activations) for stages 0-3
    gpu_memory: Fraction  #: memory per GPU, in bytes
    activations: Fraction  #: activation bytes per GPU, the same under every stage
    reasons: tuple[str, ...]  #: sentences with the numbers, for a reader
    offload: str = "none"  #: "none", "optimizer" or "optimizer+parameters"
    warnings: tuple[str, ...] = ()  #: what to watch: thin headroom, activations left at 0
    ranking: str = RANKING  #: the ranking of stages this advice follows, at length
    ranking_line: str = RANKING_LINE  #: the same in one line, as the answer shows it

    def ds_config(self, micro_batch: int = 1) -> dict:
        """The DeepSpeed config for this choice (stage 3 with no offload when nothing fits at all)."""
        return ds_config.zero_config(
            self.stage if self.stage is not None else Stage.ZERO3, self.offload, micro_batch=micro_batch
        )

    @property
    def headline(self) -> str:
        """The choice in a few words: "use ZeRO-3 with optimizer offload", or "no stage fits"."""
        if self.stage is None:
            return "no stage fits"
        return f"use {self.stage.label}" + (f" with {self.offload} offload" if self.offload != "none" else "")

    def to_dict(self) -> dict:
        """Plain data for JSON: the choice, the rule, the numbers in bytes, the reasons and the warnings."""
        number = units.json_number
        return {
            "stage": None if self.stage is None else int(self.stage),
            "offload": self.offload,
            "rule": self.rule,
            "explanation": RULES[self.rule],
            "gpu_memory_bytes": number(self.gpu_memory),
            "activation_bytes": number(self.activations),
            "needs_bytes": [number(n) for n in self.needs],
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "ranking": self.ranking,
            "ranking_line": self.ranking_line,
        }

    def lines(self, bullet: str = "  - ") -> list[str]:
        """The advice as lines of text: the choice and its rule, reasons, warnings and the ranking line."""
        return [
            f"{_capital(self.headline)}. {RULES[self.rule]}",
            *(bullet + r for r in self.reasons),
            *(f"{bullet}warning: {w}" for w in self.warnings),
            bullet + self.ranking_line,
        ]

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_markdown_(self) -> str:
        head, *rest = self.lines("- ")
        if self.stage is not None:
            head = head.replace(self.stage.label, f"**{self.stage.label}**", 1)
        return "\n".join([head, "", *rest])


def _capital(text: str) -> str:
    """`text` with its first letter in capitals, to open a sentence."""
    return text[:1].upper() + text[1:]


def advise(
    params: int,
    gpus: int,
    gpu_memory: units.Size,
    *,
    activations: units.Size = 0,
    recipe: RecipeLike = MIXED_ADAM,
    unit: str = "GB",
    cpu_memory: units.Size | None = None,
    gpus_per_node: int = 8,
) -> Advice:
    """Pick the lowest stage whose model state plus `activations` fits in `gpu_memory` per GPU.

    Offload is tried only when no stage fits on the GPUs and `cpu_memory` (per node) is given.
    Every input is checked first, whichever path the advice then takes.
    """
    setup = Setup(params, gpus, recipe, gpu_memory)
    act = units.as_bytes("activations", activations, zero=True)
    host = None if cpu_memory is None else units.as_bytes("cpu_memory", cpu_memory)
    per_node, unit = checks.gpus_per_node(gpus_per_node), units.unit_name(unit)
    return choose(
        setup, memory.per_stage(setup), activations=act, unit=unit, cpu_memory=host, gpus_per_node=per_node
    )


def choose(
    setup: Setup,
    held: tuple[Breakdown, ...],
    *,
    activations: Fraction = Fraction(0),
    unit: str = "GB",
    cpu_memory: Fraction | None = None,
    gpus_per_node: int = 8,
) -> Advice:
    """The advice for a checked `setup` (with its gpu_memory) and its `memory.per_stage`, computed once."""
    checks.instance("setup", setup, Setup, "an inputs.Setup")
    checks.instance("setup.gpu_memory", setup.gpu_memory, (int, Fraction), "bytes: Setup(..., gpu_memory)")
    checks.instance("activations", activations, (int, Fraction), "bytes as an int or Fraction")
    held = memory.check_per_stage(held)
    if cpu_memory is not None:
        checks.instance("cpu_memory", cpu_memory, (int, Fraction), "bytes as an int or Fraction, or None")
    gpu_memory, act = setup.gpu_memory, activations
    show = partial(units.format_bytes, unit=units.unit_name(unit))
    needs = tuple(state.total + act for state in held)
    reasons = [
        f"{s.label}: {show(held[s].total)} model state + {show(act)} activations = {show(needs[s])} "
        f"of {show(gpu_memory)} per GPU"
        for s in Stage
    ]
    stage = memory.lowest_fitting(held, gpu_memory, act)
    if stage is None and held[Stage.ZERO3].total > gpu_memory:
        return _offload(setup, needs, act, cpu_memory, gpus_per_node, show, reasons)
    rule = "activations" if stage is None else _rule(setup, stage, act, show, reasons)
    if act and stage is not None and act > held[stage].total:
        reasons.append(
            "activations outweigh the model state: checkpointing would save more than a higher stage"
        )
    higher = [(s.label, needs[s]) for s in Stage if stage is not None and s > stage]
    warnings = (
        *(() if stage is None else _headroom(needs[stage], gpu_memory, "per GPU", show, higher)),
        *(() if act else (NO_ACTIVATIONS,)),
    )
    return Advice(stage, rule, needs, gpu_memory, act, tuple(reasons), warnings=warnings)


def _rule(setup: Setup, stage: Stage, act: Fraction, show, reasons: list[str]) -> str:
    """The article's rule that picks `stage`, adding its reason when it is stage 3."""
    if stage is Stage.DP:
        return "replicate"
    if stage is not Stage.ZERO3:
        return "partition-optimizer"
    gpu_memory, whole = setup.gpu_memory, setup.recipe.weight_bytes * setup.params + act
    if whole > gpu_memory:
        reasons.append(
            f"whole weights plus activations need {show(whole)}, more than a card holds: "
            f"only stage 3 splits them"
        )
        return "partition-parameters"
    enough = _fewest(setup, Stage.ZERO2, act)
    more = f"; stage 2 would fit on {enough:,} GPUs, {_FREE}" if enough else ""
    reasons.append(
        f"whole weights plus activations ({show(whole)}) would fit, but not with stage 2's "
        f"gradient and optimizer shards on {setup.gpus} GPUs{more}"
    )
    return "stage-3-or-more-gpus"


def _fewest(setup: Setup, stage: Stage, act: Fraction) -> int | None:
    """Fewest GPUs on which `stage`'s model state plus `act` leaves HEADROOM of each GPU free, or None."""
    room = setup.gpu_memory * (1 - HEADROOM) - act
    return memory.min_gpus(setup.params, room, stage, setup.recipe) if room >= 1 else None


def _headroom(need: Fraction, capacity: Fraction, where: str, show, options=()) -> tuple[str, ...]:
    """A warning when `need` leaves less than HEADROOM of `capacity` free; `where` is a key of CLAIMANTS.

    The warning names the first of `options` ((label, bytes needed), next choices up) that leaves HEADROOM.
    """
    if capacity - need >= capacity * HEADROOM:
        return ()
    return (
        f"only {show(capacity - need)} of {show(capacity)} {where} is left free, under "
        f"{units.format_number(100 * HEADROOM)}%: {CLAIMANTS[where]}"
        + host_check.roomier(list(options), capacity, HEADROOM, show),
    )


def _offload(
    setup: Setup,
    needs: tuple[Fraction, ...],
    act: Fraction,
    host: Fraction | None,
    per_node: int,
    show,
    reasons: list[str],
) -> Advice:
    """Advice when not even stage 3 fits: the least offload that fits the GPU and, by both counts, host."""
    fewest = _fewest(setup, Stage.ZERO3, act)
    reasons.append(
        f"stage 3 would fit on {fewest:,} GPUs, {_FREE}" if fewest else f"no number of GPUs fits, {_FREE}"
    )
    if host is None:
        reasons.append("no host memory given, so offload was not considered")
    found = None if host is None else host_check.least_offload(setup, act, host, per_node, show, reasons)
    warnings = () if act else (NO_ACTIVATIONS,)
    if found is None:
        gpu_fits = any(p.gpu <= setup.gpu_memory for p in offload.plans(setup, act, per_node))
        why = "untried" if host is None else "host" if gpu_fits else "gpu"
        helps = ("more GPUs, " if fewest else "") + HELP[why]  # GPUs help unless activations fill a card
        reasons.append(f"what would help: {helps}{'or ' if helps else ''}a smaller model or batch")
        return Advice(None, "does-not-fit", needs, setup.gpu_memory, act, tuple(reasons), warnings=warnings)
    plan, ds_host = found
    later = offload.plans(setup, act, per_node)[offload.ORDER.index((plan.stage, plan.offload)) + 1 :]
    roomier = [
        (f"{p.stage.label} with {p.offload} offload", p.gpu)
        for p in later
        if _host_fits(setup, p, host, per_node)
    ]
    warnings = (
        *_headroom(plan.gpu, setup.gpu_memory, "per GPU", show, roomier),
        *_headroom(Fraction(max(plan.host, ds_host)), host, "of host memory per node", show),
        *filter(None, [host_check.zero_init_warning(setup, plan, host, per_node, show)]),
        *warnings,
    )
    return Advice(plan.stage, "offload", needs, setup.gpu_memory, act, tuple(reasons), plan.offload, warnings)


def _host_fits(setup: Setup, plan: offload.Plan, host: Fraction, per_node: int) -> bool:
    """Whether `plan` fits `host` bytes per node by both counts, the paper's and DeepSpeed's estimator."""
    ds_host = offload.deepspeed_host(setup, plan.stage, plan.offload, per_node)
    return max(plan.host, ds_host) <= host


def advise_model(
    model: Transformer, gpus: int, gpu_memory: units.Size, *, recompute: str = "none", **options
) -> Advice:
    """`advise` for a transformer and its batch: the activations come from `activations.activation_bytes`."""
    checks.instance("model", model, Transformer, "an activations.Transformer")
    return advise(model.params, gpus, gpu_memory, activations=activation_bytes(model, recompute), **options)
