"""Choosing a stage from the memory profile, by the article's rules, with the numbers behind it."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from . import checks, ds_config, memory, offload, units
from .recipes import MIXED_ADAM, Recipe, get
from .stages import Stage

#: The article's rules, by the key `Advice.rule` uses.
RULES = {
    "replicate": "Everything fits on every GPU: plain data parallelism, no partitioning needed.",
    "partition-optimizer": "The parameters fit but the optimizer state does not: try stage 1 or 2.",
    "partition-parameters": "Fully replicated parameters do not fit: use stage 3.",
    "stage-3-or-more-gpus": "The parameters fit whole, but stage 2's shards do not on this many GPUs: "
                            "use stage 3, or add GPUs until stage 2 fits.",
    "activations": "Model state fits under stage 3 but activations do not: add activation checkpointing "
                   "or use a smaller micro-batch.",
    "offload": "Not even stage 3 fits on the GPUs: offload state to host memory, at a cost in PCIe traffic.",
    "does-not-fit": "The model state does not fit on these GPUs even under stage 3: add GPUs, offload to "
                    "host memory, or shrink the model or the batch.",
}


@dataclass(frozen=True, repr=False)
class Advice:
    """The lowest stage that fits, the article rule that picked it, and the numbers behind it."""

    stage: Stage | None  #: lowest stage whose model state plus activations fit, or None
    rule: str  #: key into RULES
    needs: tuple[Fraction, ...]  #: per-GPU bytes (model state + activations) for stages 0-3
    budget: Fraction  #: per-GPU memory in bytes
    activations: Fraction  #: activation bytes per GPU, the same under every stage
    reasons: tuple[str, ...]  #: sentences with the numbers, for a reader
    offload: str = "none"  #: "none", "optimizer" or "optimizer+parameters"

    def ds_config(self, micro_batch: int = 1) -> dict:
        """The DeepSpeed config for this choice (stage 3 with no offload when nothing fits at all)."""
        return ds_config.zero_config(self.stage if self.stage is not None else Stage.ZERO3, self.offload,
                                     micro_batch=micro_batch)

    @property
    def headline(self) -> str:
        """The choice in a few words: "use ZeRO-3 with optimizer offload", or "no stage fits"."""
        if self.stage is None:
            return "no stage fits"
        return f"use {self.stage.label}" + (f" with {self.offload} offload" if self.offload != "none" else "")

    def to_html(self) -> str:
        """The advice as an HTML list, for the explorer."""
        from html import escape

        items = "".join(f"<li>{escape(r)}</li>" for r in self.reasons)
        return (f"<div class='zero-advice'><b>{escape(self.headline)}</b>. {escape(RULES[self.rule])}"
                f"<ul>{items}</ul></div>")

    def to_dict(self) -> dict:
        """Plain data for JSON: the choice, the rule, the numbers in bytes, and the reasons."""
        number = units.json_number
        return {"stage": None if self.stage is None else int(self.stage), "offload": self.offload, "rule": self.rule,
                "explanation": RULES[self.rule], "budget_bytes": number(self.budget),
                "activation_bytes": number(self.activations), "needs_bytes": [number(n) for n in self.needs],
                "reasons": list(self.reasons)}

    def __repr__(self) -> str:
        lines = [f"{_capital(self.headline)}. {RULES[self.rule]}", *(f"  - {r}" for r in self.reasons)]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        pick = self.headline if self.stage is None else self.headline.replace(self.stage.label, f"**{self.stage.label}**")
        return "\n".join([f"{_capital(pick)}. {RULES[self.rule]}", "", *(f"- {r}" for r in self.reasons)])


def _capital(text: str) -> str:
    """`text` with its first letter in capitals, to open a sentence."""
    return text[:1].upper() + text[1:]


def advise(params: int, gpus: int, gpu_memory, *, activations=0, recipe: Recipe | str = MIXED_ADAM,
           unit: str = "GB", cpu_memory=None, gpus_per_node: int = 8) -> Advice:
    """Pick the lowest stage whose model state plus `activations` fits in `gpu_memory` per GPU.

    Offload is tried only when no stage fits on the GPUs and `cpu_memory` (per node) is given.
    Every input is checked first, whichever path the advice then takes.
    """
    params, gpus, recipe = checks.params(params), checks.gpus(gpus), get(recipe)
    budget, unit = units.as_bytes("gpu_memory", gpu_memory), units.unit_name(unit)
    act = units.as_bytes("activations", activations, zero=True)
    host = None if cpu_memory is None else units.as_bytes("cpu_memory", cpu_memory)
    per_node = checks.gpus_per_node(gpus_per_node)
    states = [memory.per_gpu(params, gpus, s, recipe).total for s in Stage]
    needs = tuple(state + act for state in states)
    show = lambda b: units.format_bytes(b, unit)  # noqa: E731
    reasons = [f"{s.label}: {show(states[s])} model state + {show(act)} activations = {show(needs[s])} "
               f"of {show(budget)} per GPU" for s in Stage]
    stage = next((s for s in Stage if needs[s] <= budget), None)
    if stage is Stage.DP:
        rule = "replicate"
    elif stage in (Stage.ZERO1, Stage.ZERO2):
        rule = "partition-optimizer"
    elif stage is Stage.ZERO3:
        rule, why = _why_stage_three(params, gpus, budget, act, recipe, show)
        reasons.append(why)
    elif states[Stage.ZERO3] <= budget:
        rule = "activations"
    else:
        fewest = memory.min_gpus(params, budget, Stage.ZERO3, recipe)
        reasons.append(f"stage 3 model state alone would fit on {fewest:,} GPUs" if fewest else
                       "no number of GPUs makes it fit")
        stage, offload, why = _try_offload(params, gpus, budget, act, recipe, host, per_node, show)
        reasons.append(why)
        rule = "offload" if stage is not None else "does-not-fit"
        return Advice(stage, rule, needs, budget, act, tuple(reasons), offload)
    if act and stage is not None and act > states[stage]:
        reasons.append("activations outweigh the model state: checkpointing would save more than a higher stage")
    return Advice(stage, rule, needs, budget, act, tuple(reasons))


def _try_offload(params: int, gpus: int, budget: Fraction, act: Fraction, recipe: Recipe,
                 host: Fraction | None, per_node: int, show) -> tuple[Stage | None, str, str]:
    """The least offload that fits GPU and host memory: optimizer under stage 2, then 3, then parameters too."""
    if host is None:
        return None, "none", "no host memory given, so offload was not considered"
    for stage, what in ((Stage.ZERO2, "optimizer"), (Stage.ZERO3, "optimizer"), (Stage.ZERO3, "optimizer+parameters")):
        on_gpu, off_gpu = offload.offloaded(params, gpus, stage, recipe, parameters=what != "optimizer")
        if on_gpu.total + act <= budget and off_gpu.total * min(per_node, gpus) <= host:
            return stage, what, (f"{stage.label} with {what} offload: {show(on_gpu.total + act)} per GPU, "
                                 f"{show(off_gpu.total * min(per_node, gpus))} of {show(host)} host memory per node")
    return None, "none", f"even offloading optimizer and parameters does not fit {show(host)} of host memory per node"


def _why_stage_three(params: int, gpus: int, budget: Fraction, act: Fraction, recipe: Recipe, show) -> tuple[str, str]:
    """The rule and the reason for stage 3: whole weights too big, or only stage 2's shards on this many GPUs."""
    whole = recipe.weight_bytes * params + act
    if whole > budget:
        return "partition-parameters", (f"whole weights plus activations need {show(whole)}, more than a card "
                                        f"holds: only stage 3 splits them")
    enough = memory.min_gpus(params, budget - act, Stage.ZERO2, recipe) if budget > act else None
    more = f"; stage 2 would fit on {enough:,} GPUs" if enough else ""
    return "stage-3-or-more-gpus", (f"whole weights plus activations ({show(whole)}) would fit, but not with "
                                    f"stage 2's gradient and optimizer shards on {gpus} GPUs{more}")


def advise_model(model, gpus: int, gpu_memory, *, recompute: str = "none", **options) -> Advice:
    """`advise` for a transformer and its batch: the activations come from `activations.activation_bytes`."""
    from .activations import Transformer, activation_bytes

    checks.instance("model", model, Transformer, "an activations.Transformer")
    return advise(model.params, gpus, gpu_memory, activations=activation_bytes(model, recompute), **options)
