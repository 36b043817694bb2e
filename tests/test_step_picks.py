"""Lesson 4's picks over a step (`planning.step_picks`, `step_tables.picks_table`): each row checked against
`advise_model` and `timeline` called directly, and the table's numbers against those bytes."""

from fractions import Fraction

import pytest

from zero_lessons.planning import DDP, DeepSpeed, activations, advise_model, timeline, transformer_model
from zero_lessons.planning.step_choices import MODELS
from zero_lessons.planning.step_picks import HEADROOMS, Pick, lesson4_picks, pick
from zero_lessons.present.step_tables import picks_table
from zero_lessons.stages import Stage
from zero_lessons.units import GB

MID = activations.Transformer(layers=24, hidden=2048, heads=16, seq_len=2048, micro_batch=4)  # lesson 4's
CARDS = {"24GB": MID, "32GB": MODELS["7.5b"]}
PICKS = lesson4_picks(CARDS, 8)


def test_each_pick_is_advise_and_the_step_model_called_directly():
    runs = {Stage.DP: DDP(), Stage.ZERO1: DeepSpeed(stage=1), Stage.ZERO2: DeepSpeed(stage=2)}
    runs[Stage.ZERO3] = DeepSpeed(stage=3)
    assert [(p.card, p.headroom) for p in PICKS] == [(c, h) for c in CARDS for h in HEADROOMS]
    for p in PICKS:
        direct = advise_model(CARDS[p.card], 8, p.card, recompute="full", headroom=p.headroom)
        assert p.advice == direct
        step = timeline(transformer_model(CARDS[p.card]), runs[direct.stage], 8, checkpointing=True)
        assert p.peak == step.peak and p.step.checkpointing
        assert p.needs == direct.needs[direct.stage]
        assert p.adds == (step.peak.total - direct.needs[direct.stage]) / direct.gpu_memory


def test_the_picks_lesson_09_shows():
    # with no headroom the bare rule picks lower stages; neither fits at its peak, both do with 10% free
    assert [p.advice.stage for p in PICKS] == [Stage.DP, Stage.ZERO1, Stage.ZERO2, Stage.ZERO3]
    assert [p.peak.total <= p.advice.gpu_memory for p in PICKS] == [False, True, False, True]
    assert all(p.peak.name == "optimizer step" for p in PICKS if p.headroom == 0)
    assert PICKS[1].advice.gpu_memory == 24 * GB and PICKS[3].advice.gpu_memory == 32 * GB


def test_the_table_shows_each_pick_as_computed():
    table = picks_table(PICKS)
    assert table.head[0] == "GPT on card, headroom" and len(table.body) == len(PICKS)
    for p, row in zip(PICKS, table.body, strict=True):
        assert row[:2] == (
            f"{p.step.model.params / 10**9:.1f} B on {p.card}, headroom {p.headroom}",
            p.advice.stage.label,
        )
        assert [float(v) for v in row[2:4]] == [round(float(b / GB), 2) for b in (p.needs, p.peak.total)]
        assert int(row[4]) == round(100 * float(p.adds)) and row[5] == p.peak.name
    assert table.body[3][4] == "16"  # ZeRO-3 on 32 GB: the step adds 16% of the card
    assert [row[0] for row in table.body] == [
        "1.3 B on 24GB, headroom 0",
        "1.3 B on 24GB, headroom 10%",
        "7.5 B on 32GB, headroom 0",
        "7.5 B on 32GB, headroom 10%",
    ]
    assert isinstance(PICKS[0].adds, Fraction)


def test_the_table_can_count_each_cards_loss():
    """With a loss per card, each step peak counts it after the forward pass, as does what the step adds."""
    losses = {"24GB": 7 * GB, "32GB": 2 * GB}
    table = picks_table(PICKS, losses)
    assert table.head[3] == "step peak (loss counted), GB"
    for p, row in zip(PICKS, table.body, strict=True):
        peak = p.step.peak_with_loss(losses[p.card])
        assert float(row[3]) == round(float(peak / GB), 2) and peak >= p.peak.total
        assert int(row[4]) == round(100 * float((peak - p.needs) / p.advice.gpu_memory))
    assert float(table.body[1][3]) > float(
        picks_table(PICKS).body[1][3]
    )  # ZeRO-1's pick: the loss is its peak
    with pytest.raises(ValueError, match="losses must give a loss for every card, got none for '32GB'"):
        picks_table(PICKS, {"24GB": GB})
    with pytest.raises(TypeError, match="losses must be a dict"):
        picks_table(PICKS, [GB])


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="cards must be"):
        lesson4_picks({}, 8)
    with pytest.raises(TypeError, match="shape"):
        pick("7.5b", 8, "32GB", 0)
    with pytest.raises(ValueError, match="no stage fits"):
        pick(MODELS["7.5b"], 1, "8GB", 0)
    with pytest.raises(TypeError, match="picks must be"):
        picks_table([])
    with pytest.raises(TypeError, match="each pick"):
        picks_table([object()])
    assert isinstance(PICKS[0], Pick)
