"""Lesson 4's picks over a step: the stage `advise` picks for a GPT on a card, beside that stage's step.

`advise` sums model state and activations and picks the lowest stage that fits with `headroom` of the card
free. Lesson 15 runs the picked stage through the step model (`timeline`) on the same GPUs, with the same
activation checkpointing, and sets the step's peak beside the sum the pick was made on.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks
from ..stages import Stage
from .activations import Transformer
from .advice import Advice, advise_model
from .step import timeline
from .step_knobs import DDP, DeepSpeed, Framework
from .step_model import transformer_model
from .step_parts import Phase, Timeline

#: The framework that runs each stage in the step model: DDP stands in for stage 0.
STAGE_FRAMEWORKS: dict[Stage, Framework] = {
    Stage.DP: DDP(),
    **{s: DeepSpeed(stage=int(s)) for s in (Stage.ZERO1, Stage.ZERO2, Stage.ZERO3)},
}
#: The headrooms lesson 15 compares: the article's bare rule (0) and `advise`'s default margin.
HEADROOMS = (0, "10%")


@dataclass(frozen=True)
class Pick:
    """One pick of lesson 4 and one step of the stage it picked."""

    card: str  #: the memory per GPU as `advise` was given it, e.g. "24GB"
    headroom: int | str  #: the share of the card the pick had to leave free, as given (0 or "10%")
    advice: Advice  #: `advise_model`'s answer, activations with activation checkpointing (recompute="full")
    step: Timeline  #: one step of the picked stage on the same GPUs, every layer checkpointed

    @property
    def needs(self) -> Fraction:
        """Lesson 4's sum for the picked stage: model state plus activations per GPU, in bytes."""
        return self.advice.needs[self.advice.stage]

    @property
    def peak(self) -> Phase:
        """The step's peak: the phase where the rank holds the most."""
        return self.step.peak

    @property
    def adds(self) -> Fraction:
        """What the step's peak adds to lesson 4's sum, as a share of the card (negative if it holds less)."""
        return self.adds_at(self.peak.total)

    def adds_at(self, peak: int | Fraction) -> Fraction:
        """What a peak of `peak` bytes (a loss counted, say) adds to lesson 4's sum, as a share of a card."""
        return (peak - self.needs) / self.advice.gpu_memory


def pick(shape: Transformer, gpus: int, card: str, headroom: int | str) -> Pick:
    """Lesson 4's pick for the GPT `shape` on `gpus` cards of `card` with activation checkpointing, and
    one step of the picked stage; a ValueError when no stage fits."""
    checks.instance("shape", shape, Transformer, "an activations.Transformer, e.g. MODELS['7.5b']")
    advice = advise_model(shape, gpus, card, recompute="full", headroom=headroom)
    if advice.stage is None:
        raise ValueError(f"no stage fits the GPT on {gpus} × {card} with headroom {headroom}: no step to run")
    step = timeline(transformer_model(shape), STAGE_FRAMEWORKS[advice.stage], gpus, checkpointing=True)
    return Pick(card, headroom, advice, step)


def lesson4_picks(cards: dict, gpus: int, headrooms: tuple = HEADROOMS) -> tuple[Pick, ...]:
    """For each card -> GPT of `cards`, then each of `headrooms`: lesson 4's pick and its step."""
    if not isinstance(cards, dict) or not cards:
        raise TypeError(f"cards must be a non-empty dict of card -> Transformer, got {checks.shown(cards)}")
    return tuple(pick(shape, gpus, card, h) for card, shape in cards.items() for h in headrooms)
