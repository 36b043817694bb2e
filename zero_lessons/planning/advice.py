"""Choosing a stage from the memory profile, by the article's rules, with the numbers behind it.

A choice "fits" when its model state plus activations leave `headroom` of each GPU free (10% unless told
otherwise; `headroom.py` says why, and headroom=0 gives the article's bare rule). The advice ranks stages
the ZeRO paper's way (lower stages communicate less) and says so in one line of every text answer;
`RANKING` says at length what changes under DeepSpeed's defaults. Stages are sized by the paper's count; a
warning says when DeepSpeed's estimator, which adds an fp32 gradient copy, leaves less room. Offload is
checked twice on the host (`host_check`): by the package's count, and by DeepSpeed's own estimator, which
counts more.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import partial

from .. import checks, inputs, memory, units
from ..inputs import Setup
from ..memory import Breakdown
from ..recipes import MIXED_ADAM, RecipeLike
from ..stages import Stage
from . import ds_config, host_check, offload
from . import headroom as room
from .activations import Transformer, activation_bytes
from .advice_text import ARTICLE_RULE, BLOCKERS, HELP, NO_ACTIVATIONS, OUTWEIGH, RULES
from .headroom import HEADROOM
from .ranking import RANKING, RANKING_LINE


@dataclass(frozen=True, repr=False)
class Advice:
    """The lowest stage (then least offload) that leaves the headroom free, its rule, and the numbers."""

    stage: Stage | None  #: lowest stage whose model state plus activations leave the headroom free, or None
    rule: str  #: key into RULES
    needs: tuple[Fraction, ...]  #: per-GPU bytes (model state + activations) for stages 0-3
    gpu_memory: Fraction  #: memory per GPU, in bytes
    activations: Fraction  #: activation bytes per GPU, the same under every stage
    reasons: tuple[str, ...]  #: sentences with the numbers, for a reader
    offload: str = "none"  #: "none", "optimizer" or "optimizer+parameters"
    warnings: tuple[str, ...] = ()  #: thin headroom (by either count), activations at 0, zero.Init
    headroom: Fraction = HEADROOM  #: the share of each GPU the choice had to leave free (0: the bare rule)
    ranking: str = RANKING  #: the ranking of stages this advice follows, at length
    ranking_line: str = RANKING_LINE  #: the same in one line, as the text answer ends
    blocker: str = ""  #: when nothing fits and host memory was given: "host" or "gpu" (see BLOCKERS)

    @property
    def article_rule(self) -> str:
        """The article's rule behind the pick, in a few words: "Rule 1" for ZeRO-1 and ZeRO-2 alike."""
        return ARTICLE_RULE[self.rule]

    @property
    def explanation(self) -> str:
        """The rule's sentence, and what stood in the way of offload when nothing fits."""
        return " ".join(x for x in (RULES[self.rule], BLOCKERS.get(self.blocker, "")) if x)

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
            "explanation": self.explanation,
            "headroom": number(self.headroom),
            "gpu_memory_bytes": number(self.gpu_memory),
            "activation_bytes": number(self.activations),
            "needs_bytes": [number(n) for n in self.needs],
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "ranking": self.ranking,
            "ranking_line": self.ranking_line,
        }

    def lines(self, bullet: str = "  - ", *, ranking: bool = True) -> list[str]:
        """The advice as lines of text: the choice and its rule, reasons, warnings, and the ranking line."""
        head = self.headline
        return [
            f"{head[:1].upper()}{head[1:]}. {self.explanation}",
            *(bullet + r for r in self.reasons),
            *(f"{bullet}warning: {w}" for w in self.warnings),
            *([bullet + self.ranking_line] if checks.flag("ranking", ranking) else []),
        ]

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_markdown_(self) -> str:
        """The notebook's view: the text answer without its ranking line, which `.ranking` keeps at length."""
        head, *rest = self.lines("- ", ranking=False)
        if self.stage is not None:
            head = head.replace(self.stage.label, f"**{self.stage.label}**", 1)
        return "\n".join([head, "", *rest])


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
    headroom: Fraction | float | str = HEADROOM,
) -> Advice:
    """Pick the lowest stage whose model state plus `activations` leaves `headroom` of each GPU free.

    `headroom` is a share (0.1, or text such as "10%"); 0 gives the article's bare rule. Offload is tried
    only when no stage fits on the GPUs and `cpu_memory` (per node) is given. Every input is checked
    first, whichever path the advice then takes.
    """
    setup = Setup(params, gpus, recipe, gpu_memory)
    act = units.as_bytes("activations", activations, zero=True)
    host = None if cpu_memory is None else units.as_bytes("cpu_memory", cpu_memory)
    per_node, unit = checks.gpus_per_node(gpus_per_node), units.unit_name(unit)
    share = inputs.headroom(headroom)
    return choose(
        setup,
        memory.per_stage(setup),
        activations=act,
        unit=unit,
        cpu_memory=host,
        gpus_per_node=per_node,
        headroom=share,
    )


def choose(
    setup: Setup,
    held: tuple[Breakdown, ...],
    *,
    activations: Fraction = Fraction(0),
    unit: str = "GB",
    cpu_memory: Fraction | None = None,
    gpus_per_node: int = 8,
    headroom: Fraction | float | str = HEADROOM,
) -> Advice:
    """The advice for a checked `setup` (with its gpu_memory) and its `memory.per_stage`, computed once."""
    checks.instance("setup", setup, Setup, "an inputs.Setup")
    checks.instance("setup.gpu_memory", setup.gpu_memory, (int, Fraction), "bytes: Setup(..., gpu_memory)")
    act, held, share = (
        checks.byte_count("activations", activations),
        memory.check_per_stage(held),
        inputs.headroom(headroom),
    )
    cpu_memory = None if cpu_memory is None else checks.byte_count("cpu_memory", cpu_memory, 1)
    gpu_memory = setup.gpu_memory
    show = partial(units.format_bytes, unit=units.unit_name(unit))
    needs, reasons = _per_stage_lines(held, act, gpu_memory, show)
    limit = room.budget(gpu_memory, share)
    stage, bare = memory.lowest_fitting(held, limit, act), memory.lowest_fitting(held, gpu_memory, act)
    if bare is not None and bare != stage:
        reasons.append(room.thin_fit(bare.label, needs[bare], gpu_memory, share, show))
    if stage is None and held[Stage.ZERO3].total > limit:
        advice = partial(Advice, needs=needs, gpu_memory=gpu_memory, activations=act, headroom=share)
        return _offload(setup, advice, act, share, (cpu_memory, gpus_per_node), show, reasons, bare is None)
    rule = "activations" if stage is None else _rule(setup, stage, act, share, show, reasons)
    if act and stage is not None and act > held[stage].total:
        reasons.append(OUTWEIGH)
    higher = [(s.label, needs[s]) for s in Stage if stage is not None and s > stage]
    warnings = (
        *(() if stage is None else room.warning(needs[stage], gpu_memory, "per GPU", show, higher)),
        *room.estimator_warning(setup, stage, act, share, show),
        *room.whole_model_warning(setup, stage, share, show),
        *(() if act else (NO_ACTIVATIONS,)),
    )
    return Advice(stage, rule, needs, gpu_memory, act, tuple(reasons), warnings=warnings, headroom=share)


def _per_stage_lines(
    held, act: Fraction, gpu_memory: Fraction, show
) -> tuple[tuple[Fraction, ...], list[str]]:
    """Each stage's bytes per GPU (model state + `act`), and a line for each with the sum written out."""
    needs = tuple(state.total + act for state in held)
    return needs, [
        f"{s.label}: {show(held[s].total)} model state + {show(act)} activations = {show(needs[s])} "
        f"of {show(gpu_memory)} per GPU"
        for s in Stage
    ]


def _rule(setup: Setup, stage: Stage, act: Fraction, share: Fraction, show, reasons: list[str]) -> str:
    """The article's rule that picks `stage`, adding its reason when it is stage 3."""
    if stage is Stage.DP:
        return "replicate"
    if stage is not Stage.ZERO3:
        return "partition-optimizer"
    whole = setup.recipe.weight_bytes * setup.params + act
    if whole > room.budget(setup.gpu_memory, share):
        kept = f" with {room.percent(share)}% of it left free" if share else ""
        reasons.append(
            f"whole 16-bit weights (2Ψ) plus activations need {show(whole)}, more than a card holds{kept}: "
            f"only stage 3 splits them"
        )
        return "partition-parameters"
    enough = room.fewest(setup, Stage.ZERO2, act, share)
    more = f"; stage 2 would fit on {enough:,} GPUs{room.leaving(share)}" if enough else ""
    reasons.append(
        f"whole 16-bit weights (2Ψ) and activations, {show(whole)} in all, would fit, but not with stage 2's "
        f"gradient and optimizer shards on {setup.gpus} GPUs{more}"
    )
    return "stage-3-or-more-gpus"


def _offload(
    setup: Setup,
    advice: partial,
    act: Fraction,
    share: Fraction,
    host: tuple[Fraction | None, int],
    show,
    reasons: list[str],
    name_thin: bool,
) -> Advice:
    """Advice when not even stage 3 fits with the headroom: the least offload that does, on GPU and host.

    `advice` makes the Advice with the numbers filled in; `host` is (host memory per node or None, GPUs per
    node); `name_thin` asks for a reason naming an earlier offload that fits with less than the headroom.
    """
    (cpu, per_node), limit = host, room.budget(setup.gpu_memory, share)
    fewest, plans = room.fewest(setup, Stage.ZERO3, act, share), offload.plans(setup, act, per_node)
    more = f"stage 3 would fit on {fewest:,} GPUs" if fewest else "no number of GPUs fits"
    reasons.append(more + room.leaving(share))
    if cpu is None:
        reasons.append("no host memory given, so offload was not considered")
    tried: list[str] = []
    found = None if cpu is None else host_check.least_offload(setup, act, cpu, per_node, show, tried, limit)
    at = len(plans) if found is None else offload.ORDER.index((found[0].stage, found[0].offload))
    if name_thin and cpu is not None:
        reasons += room.thin_offload(setup, act, cpu, per_node, share, show, at)
    reasons, tail = reasons + tried, () if act else (NO_ACTIVATIONS,)
    if found is None:
        why = "untried" if cpu is None else "host" if any(p.gpu <= limit for p in plans) else "gpu"
        helps = ("more GPUs, " if fewest else "") + HELP[why]  # GPUs help unless activations fill a card
        reasons.append(f"what would help: {helps}{'or ' if helps else ''}a smaller model or batch")
        blocker = "" if cpu is None else why
        return advice(None, "does-not-fit", reasons=tuple(reasons), warnings=tail, blocker=blocker)
    warnings = _offload_warnings(setup, found, plans[at + 1 :], (cpu, per_node, share), show) + tail
    return advice(
        found[0].stage, "offload", reasons=tuple(reasons), offload=found[0].offload, warnings=warnings
    )


def _offload_warnings(setup: Setup, found, later, host: tuple, show) -> tuple[str, ...]:
    """Thin headroom on the GPU (naming a `later` plan with room) and on the host, and zero.Init's caveat:
    the host's (which names the GPU's too when the whole model does not fit a card), else the GPU's alone.
    `host` is (host memory per node, GPUs per node, the headroom share)."""
    (plan, ds_host), (cpu, per_node, share) = found, host
    zero_init = host_check.zero_init_warning(setup, plan, cpu, per_node, show)
    roomier = [
        (f"{p.stage.label} with {p.offload} offload", p.gpu)
        for p in later
        if host_check.fits_both(setup, p, cpu, per_node)
    ]
    return (
        *room.warning(plan.gpu, setup.gpu_memory, "per GPU", show, roomier),
        *room.warning(Fraction(max(plan.host, ds_host)), cpu, "of host memory per node", show),
        *((zero_init,) if zero_init else room.whole_model_warning(setup, plan.stage, share, show)),
    )


def advise_model(
    model: Transformer,
    gpus: int,
    gpu_memory: units.Size,
    *,
    recompute: str = "none",
    attention: str = "unfused",
    **options,
) -> Advice:
    """`advise` for a transformer and its batch: the activations come from `activations.activation_bytes`."""
    checks.instance("model", model, Transformer, "an activations.Transformer")
    act = activation_bytes(model, recompute, attention=attention)
    return advise(model.params, gpus, gpu_memory, activations=act, **options)
