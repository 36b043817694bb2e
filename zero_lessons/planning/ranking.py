"""The advice's ranking of the stages: the ZeRO paper's, and what DeepSpeed's defaults send instead.

By the paper's count (lesson 03) stages 0-2 send 2Ψ per GPU per step and stage 3 sends 3Ψ, so among the
stages that fit the lowest sends least. Every text answer ends with `RANKING_LINE`; `RANKING` says it at
length, with DeepSpeed's figures (lessons 10 and 11; the 7.5 B figure is `ds_scale.predict`'s, checked in
tests/test_advisor_config.py).
"""

from __future__ import annotations

from .. import communication
from ..stages import Stage

_PAPER = {stage: sum(c.multiple for c in communication.collectives(stage)) for stage in Stage}
#: The ranking in one line, as every answer ends.
RANKING_LINE = (
    f"Ranking: the ZeRO paper's, lowest stage first (stages 0-2 send {_PAPER[Stage.ZERO2]}Ψ per step, "
    f"stage 3 {_PAPER[Stage.ZERO3]}Ψ); under DeepSpeed's defaults stages 1 and 2 send about 3Ψ and "
    "stage 3 2Ψ to 3Ψ, up to 1.5x stage 0."
)
#: The ranking at length: the paper's, and what DeepSpeed's defaults send instead.
RANKING = (
    f"Ranking: the ZeRO paper's. Stages 0-2 send {_PAPER[Stage.ZERO2]}Ψ per GPU per step and stage 3 "
    f"sends {_PAPER[Stage.ZERO3]}Ψ, so the lowest stage that fits sends least. DeepSpeed's defaults "
    "differ: ZeRO-1/2 send about 3Ψ (a bucketed all-reduce, then the weight all-gather). ZeRO-3 sends "
    "about 2Ψ on lesson 11's small model, where every gathered weight is kept for the backward pass, "
    "and about 2.9Ψ for a 7.5 B GPT, where most are gathered again. So under DeepSpeed stages 1, 2 and 3 "
    "each send between 2Ψ and 3Ψ elements per GPU per step: up to half as much again as plain data "
    "parallelism's 2Ψ, and stage 3 no more than stages 1 and 2."
)
