"""Lesson 17's example at stage 3, counted two ways; and the peak to plan with.

The step model runs each block as one module, so its prefetcher walks a block at a time. DeepSpeed runs
each weight matrix as a module of its own (`ds_scale.gpt_modules`), so its prefetcher walks further ahead,
and a tensor that the prefetcher has walked past stays gathered whatever the reuse distance (the rules
`ds_traffic` holds, which the lab checked on real ranks). The two counts therefore hold different weights
gathered. `at_loss` gives both as the loss runs, and the peak to plan with: the step model's loss column
with DeepSpeed's gathered weights in place of its own, or the step model's own peak where that is higher.
`deepspeed_count` puts DeepSpeed's count in every forward and backward phase of a step, for its figures.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import checks
from ..planning import ds_lookahead, ds_scale, ds_traffic
from ..planning.activations import Transformer
from ..planning.step import DeepSpeed
from ..planning.step_model import transformer_model
from ..planning.step_parts import KINDS, Part, Phase, Timeline
from ..stages import Stage
from .example import SHAPE, example_step, loss_bytes

BF16 = 2  #: bytes per gathered weight element: the example trains in bf16
DEFAULTS = DeepSpeed(stage=3)  #: stage 3 at DeepSpeed's defaults


@dataclass(frozen=True)
class AtLoss:
    """Stage 3 as the example's loss runs, in bytes per GPU."""

    column: int  #: the step model's loss column: its last forward bar, and the loss on top
    step_model: int  #: the gathered weights in that column, by the step model (a block at a time)
    deepspeed: int  #: the gathered weights as the loss runs, by DeepSpeed's rules (a matrix at a time)
    own_peak: int  #: the step model's own peak, the loss left out

    @property
    def plan(self) -> int:
        """The peak to plan with: the loss column holding DeepSpeed's gathered weights instead of the step
        model's, or the step model's own peak where that is higher."""
        return max(self.column - self.step_model + self.deepspeed, self.own_peak)


def knobs(framework: DeepSpeed) -> ds_scale.Knobs:
    """`framework`'s gather and bucket settings, as DeepSpeed's rules (`ds_scale`) read them."""
    return ds_scale.Knobs(
        reduce_bucket_size=framework.reduce_bucket_size,
        prefetch_bucket_size=framework.prefetch_bucket_size,
        max_live_parameters=framework.max_live_parameters,
        max_reuse_distance=framework.max_reuse_distance,
    )


def modules(shape: Transformer = SHAPE, head: bool = False) -> tuple[tuple[int, ...], ...]:
    """`shape`'s modules as DeepSpeed runs them (`ds_scale.gpt_modules`); with `head`, the output layer as one
    more module after the last block (its V·h weights are the embedding's, shared; as the loss runs DeepSpeed
    holds one gathered copy of them, which a module of their own stands for)."""
    checks.instance("shape", shape, Transformer, "an activations.Transformer, e.g. MODELS['7.5b']")
    checks.instance("head", head, bool, "True or False")
    blocks = ds_scale.gpt_modules(shape.layers, shape.hidden, shape.vocab)
    return (*blocks, (shape.vocab * shape.hidden,)) if head else blocks


def _deepspeed_elements(framework: DeepSpeed, shape: Transformer, head: bool) -> int:
    """Weight elements DeepSpeed holds gathered as `shape`'s loss runs under `framework`, by its own rules."""
    threshold = framework.param_persistence_threshold
    return ds_scale.gathered_at_loss(modules(shape, head), knobs(framework), threshold=threshold)


def at_loss(framework: DeepSpeed = DEFAULTS, shape: Transformer = SHAPE, head: bool = False) -> AtLoss:
    """Stage 3 as the loss runs, for `framework` (a stage-3 DeepSpeed; default: its defaults) on `shape`
    (default: the example's 7.5 B GPT) on the example's 8 GPUs; with `head`, DeepSpeed's count walks the
    output layer too (`modules`), which the step model leaves out."""
    checks.instance("framework", framework, DeepSpeed, "a planning.DeepSpeed, e.g. DeepSpeed(stage=3)")
    if framework.stage != Stage.ZERO3:
        raise ValueError(
            f"framework.stage must be 3 (weights are gathered at stage 3), got {int(framework.stage)}"
        )
    step = example_step(shape, framework)
    end = step.after_forward  # the last forward bar: the loss column is it, and the loss
    held = BF16 * _deepspeed_elements(framework, shape, head)
    return AtLoss(end.total + loss_bytes(shape), end.bytes_of("gathered parameters"), held, step.peak.total)


def planned(framework: DeepSpeed, shape: Transformer = SHAPE) -> int:
    """The example's peak per GPU with the loss, to plan with: its step counted by `plan_count` (at stage 3
    with DeepSpeed's own gathered weights, `AtLoss.plan`; below it the step model's own, no weights being
    gathered there)."""
    checks.instance("framework", framework, DeepSpeed, "a planning.DeepSpeed, e.g. DeepSpeed(stage=2)")
    return plan_count(example_step(shape, framework), shape).peak_with_loss(loss_bytes(shape))


def lookahead(
    framework: DeepSpeed = DEFAULTS, shape: Transformer = SHAPE, head: bool = False, blocks: int = 5
) -> ds_lookahead.Lookahead:
    """The example's last `blocks` blocks (and with `head` the output layer) around the turn from forward to
    backward: each weight matrix's uses and held stretches, and why it is gathered as the loss runs; modules
    named as `ds_lookahead.gpt_names` names them ("28 fc1" is block 28's first MLP matrix)."""
    checks.instance("framework", framework, DeepSpeed, "a planning.DeepSpeed, e.g. DeepSpeed(stage=3)")
    checks.whole("blocks", blocks, low=1, high=shape.layers)
    first = 1 + 6 * (shape.layers - blocks)  # the first module of the first block drawn
    threshold = framework.param_persistence_threshold
    names = ds_lookahead.gpt_names(shape.layers)
    return ds_lookahead.lookahead(
        modules(shape, head), knobs(framework), threshold=threshold, first=first, names=names
    )


def deepspeed_count(timeline: Timeline, shape: Transformer = SHAPE, head: bool = False) -> Timeline:
    """`timeline` (a stage-3 DeepSpeed step of `shape`'s GPT, without activation checkpointing) with its
    gathered weights counted by DeepSpeed's own rules, a matrix at a time (`ds_scale.sharded_held`): in each
    forward and backward phase, the most its modules hold gathered (`_spans`); as the loss runs
    (`Timeline.at_loss`), what is held then. So its tables and figures give the peak to plan with."""
    checks.instance(
        "timeline", timeline, Timeline, "a planning Timeline, e.g. timeline(gpt, DeepSpeed(stage=3), 8)"
    )
    framework = timeline.framework
    if not _counts(timeline):
        raise ValueError(
            f"timeline must be DeepSpeed's stage 3 without activation checkpointing, got {framework.label}"
            f"{' with checkpointing' if timeline.checkpointing else ''}"
        )
    if timeline.model.params != transformer_model(shape).params:
        raise ValueError(
            f"timeline must be of shape's GPT ({shape.layers} blocks of {shape.hidden}), "
            f"got {timeline.model.name}"
        )
    walked = modules(shape, head)
    threshold = framework.param_persistence_threshold
    counts = ds_lookahead.totals(walked, knobs(framework), threshold=threshold)  # at each entry of the trace
    spans = _spans(len(walked), shape.layers)
    phases = tuple(
        _with_gathered(p, max(counts[e] for e in spans[p.name]), "its modules hold at most")
        if p.name in spans
        else p
        for p in timeline.phases
    )
    loss = _with_gathered(
        timeline.after_forward, counts[ds_traffic.loss_entry(len(walked))], "held as the loss runs"
    )
    return replace(timeline, phases=phases, at_loss=loss)


def _spans(count: int, blocks: int) -> dict[str, range]:
    """The trace entries (`ds_traffic.trace`, `count` modules) each forward and backward phase of the step
    model spans: the embedding's module, or a block's six, and the parameter-free entries after them."""
    per_block = len(ds_lookahead.BLOCK_PARTS)  # six modules a block, as `ds_scale.gpt_modules` lists them
    owned = {"embedding": (0, 0)}
    owned |= {f"block {b}": (1 + per_block * (b - 1), per_block * b) for b in range(1, blocks + 1)}
    # the trace ends with the first module's backward use
    loss, last = ds_traffic.loss_entry(count), ds_traffic.backward_entry(count, 0) + 1
    out = {}
    for layer, (first, final) in owned.items():
        start = 0 if first == 0 else ds_traffic.forward_entry(first)
        out[f"forward {layer}"] = range(start, min(ds_traffic.forward_entry(final) + 2, loss))
        back = ds_traffic.backward_entry(count, final)
        out[f"backward {layer}"] = range(back, min(ds_traffic.backward_entry(count, first) + 2, last))
    return out


def _with_gathered(phase: Phase, count: int, when: str) -> Phase:
    """`phase` with its gathered weights replaced by `count` bf16 elements, counted by DeepSpeed's rules."""
    held = Part(
        "gathered parameters",
        BF16 * count,
        f"weights gathered, by DeepSpeed's own rules (a matrix at a time), {when}: {count:,} elements",
    )
    kept = [p for p in phase.parts if p.kind != "gathered parameters"]
    return replace(phase, parts=tuple(sorted([*kept, held], key=lambda p: KINDS.index(p.kind))))


def plan_count(timeline: Timeline, shape: Transformer = SHAPE) -> Timeline:
    """`timeline` counted to plan with: `deepspeed_count` where it applies (DeepSpeed's stage 3 without
    activation checkpointing), else unchanged (below stage 3 no weights are gathered; with checkpointing the
    backward pass recomputes each block, an order of uses these rules leave out)."""
    checks.instance(
        "timeline", timeline, Timeline, "a planning Timeline, e.g. timeline(gpt, DeepSpeed(stage=3), 8)"
    )
    return deepspeed_count(timeline, shape) if _counts(timeline) else timeline


def _counts(timeline: Timeline) -> bool:
    """Whether DeepSpeed's own count applies to `timeline`: its stage 3, without activation checkpointing."""
    fw = timeline.framework
    return isinstance(fw, DeepSpeed) and fw.stage == Stage.ZERO3 and not timeline.checkpointing
