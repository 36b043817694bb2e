"""Activation estimates against the papers, and the advisor against the article's rules."""

from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from zero_lessons import GB
from zero_lessons.inputs import Setup
from zero_lessons.planning.activations import (
    GPT2_XL,
    Transformer,
    activation_bytes,
    layer_bytes,
    least_recomputation,
    zero_paper_estimate,
)
from zero_lessons.planning.advice import advise, advise_model
from zero_lessons.planning.advice_text import ARTICLE_RULE, RULES
from zero_lessons.stages import Stage


def test_zero_paper_gpt2_example_is_about_60_gb():
    assert GPT2_XL.params == pytest.approx(1.5e9, rel=0.05)
    assert zero_paper_estimate(GPT2_XL) == pytest.approx(60 * GB, rel=0.01)


def test_korthikanti_formula_by_hand():
    m = Transformer(layers=2, hidden=64, heads=4, seq_len=16, micro_batch=3)
    assert layer_bytes(m) == 16 * 3 * 64 * (34 + 5 * 4 * 16 // 64)
    assert activation_bytes(m) == 2 * layer_bytes(m)
    assert activation_bytes(m, "selective") == 2 * 34 * 16 * 3 * 64 + 5 * 4 * 16 * 16 * 3
    assert activation_bytes(m, "full") == 2 * 2 * 16 * 3 * 64 + layer_bytes(m)


def korthikanti(m: Transformer, recompute: str, attention: str) -> Fraction:
    """Korthikanti et al.'s eq. 1 and sec. 4-5, written out: what the layers keep, plus one layer rebuilt."""
    s, b, h, a, n = m.seq_len, m.micro_batch, m.hidden, m.heads, m.layers
    stored = Fraction(5 * a * s, h) if attention == "unfused" else 0  # the 5·a·s/h of eq. 1: s × s matrices
    per_layer = s * b * h * (34 + stored)
    kept = {"none": n * per_layer, "selective": n * s * b * h * 34, "full": n * s * b * h * 2}[recompute]
    rebuilt = {"none": 0, "selective": per_layer - 34 * s * b * h, "full": per_layer}[recompute]
    return kept + rebuilt


SHAPES = [
    Transformer(layers=2, hidden=64, heads=4, seq_len=16, micro_batch=3),
    Transformer(layers=3, hidden=96, heads=8, seq_len=7, micro_batch=1),  # 5·a·s/h not whole
    GPT2_XL,
]


@pytest.mark.parametrize("attention", ["unfused", "flash"])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("m", SHAPES)
def test_every_recompute_and_attention_against_korthikanti(m, recompute, attention):
    got = activation_bytes(m, recompute, attention=attention)
    assert type(got) is int and got == korthikanti(m, recompute, attention)
    assert layer_bytes(m, attention=attention) == korthikanti(m, "none", attention) / m.layers


def test_gpt2_xl_by_attention():
    shown = {
        a: [round(activation_bytes(GPT2_XL, r, attention=a) / GB, 3) for r in ("none", "selective", "full")]
        for a in ("unfused", "flash")
    }
    assert shown == {"unfused": [286.890, 89.758, 11.010], "flash": [85.564, 85.564, 6.816]}


def test_flash_never_stores_the_scores():
    for m in SHAPES:
        flash = [activation_bytes(m, r, attention="flash") for r in ("none", "selective", "full")]
        assert flash[0] == flash[1] == 34 * m.seq_len * m.micro_batch * m.hidden * m.layers
        assert (
            activation_bytes(m, "full", attention="unfused") - flash[2]
            == 5 * m.heads * m.seq_len**2 * m.micro_batch
        )


@pytest.mark.parametrize("attention", ["unfused", "flash"])
def test_recomputation_only_shrinks_activations(attention):
    sizes = [activation_bytes(GPT2_XL, r, attention=attention) for r in ("none", "selective", "full")]
    assert sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: activation_bytes(GPT2_XL, attention="fused"), ValueError, "got 'fused'"),
        (lambda: activation_bytes(GPT2_XL, "full", attention=None), TypeError, "got NoneType None"),
        (lambda: layer_bytes(GPT2_XL, attention="FLASH"), ValueError, "got 'FLASH'"),
        (lambda: least_recomputation(GPT2_XL, Setup(GPT2_XL.params, 8, gpu_memory=80 * GB), attention=1),
         TypeError, "got int 1"),
        (lambda: advise_model(GPT2_XL, 8, "80GB", attention="sdpa"), ValueError, "got 'sdpa'"),
    ],
)  # fmt: skip
def test_an_unknown_attention_is_one_line_naming_the_choices(call, error, words):
    with pytest.raises(error) as refused:
        call()
    message = str(refused.value)
    assert message.startswith("attention must be one of unfused, flash") and words in message
    assert "\n" not in message


def test_least_recomputation_under_flash_never_picks_selective():
    m = Transformer(layers=32, hidden=4096, heads=32, seq_len=4096, micro_batch=1)
    setup = Setup(m.params, 8, gpu_memory=80 * GB)
    assert least_recomputation(m, setup)[:2] == ("selective", Stage.ZERO1)
    recompute, stage, need = least_recomputation(m, setup, attention="flash")
    assert (recompute, stage) == ("none", Stage.ZERO1)
    assert need == 4 * m.params + Fraction(12 * m.params, 8) + 34 * 4096 * 4096 * 32  # stage 1: 4Ψ + 12Ψ/N


@pytest.mark.parametrize(
    "kwargs, words", [({"heads": 7}, "divisible"), ({"layers": 0}, "layers"), ({"seq_len": 2.0}, "seq_len")]
)
def test_transformer_rejects_bad_shapes(kwargs, words):
    with pytest.raises((ValueError, TypeError), match=words):
        Transformer(**({"layers": 2, "hidden": 64, "heads": 4, "seq_len": 16, "micro_batch": 1} | kwargs))


def test_unknown_recompute_mode():
    with pytest.raises(ValueError, match="recompute must be one of"):
        activation_bytes(GPT2_XL, "some")


def test_article_rules():
    # 7.5 B on 8 GPUs: 120 GB replicated, 41.25 under ZeRO-1.
    assert advise(7_500_000_000, 8, "160GB").rule == "replicate"
    pick = advise(7_500_000_000, 8, "80GB")
    assert (pick.stage, pick.rule) == (Stage.ZERO1, "partition-optimizer")
    assert advise(7_500_000_000, 8, "32GB").stage == Stage.ZERO2  # 28.125 GB of 32 GB: 12.1% left free
    pick = advise(7_500_000_000, 8, "20GB")  # 15 GB of whole weights fit, stage 2's 28.125 GB does not
    assert (pick.stage, pick.rule) == (Stage.ZERO3, "stage-3-or-more-gpus")
    # with 10% of each GPU left free, as the advice asks: 15 + 105/N ≤ 18 GB needs N ≥ 35
    assert "stage 2 would fit on 35 GPUs, leaving at least 10% of each free" in str(pick)
    pick = advise(7_500_000_000, 16, "14GB")  # the whole weights (15 GB) no longer fit a card
    assert (pick.stage, pick.rule) == (Stage.ZERO3, "partition-parameters")
    pick = advise(7_500_000_000, 8, "20GB", activations=10 * GB)
    assert (pick.stage, pick.rule) == (None, "activations")
    pick = advise(7_500_000_000, 8, "10GB")
    assert (pick.stage, pick.rule) == (None, "does-not-fit")  # no cpu_memory given, so offload is not tried
    assert "stage 3 would fit on 14 GPUs, leaving at least 10% of each free" in str(
        pick
    )  # 120 GB / 9 GB = 13.3


def test_each_key_names_the_articles_rule_its_sentence_applies():
    assert set(ARTICLE_RULE) == set(RULES)
    for key, name in ARTICLE_RULE.items():
        if name.startswith("Rule "):
            assert RULES[key].startswith(name[:6]), key  # "Rule 1" keys open with Rule 1's sentence
    # ZeRO-1 and ZeRO-2 both answer Rule 1; 20 GB cards take Rule 1 on to stage 3.
    picks = [advise(7_500_000_000, 8, card) for card in ("80GB", "32GB", "20GB")]
    assert [(p.stage, p.article_rule) for p in picks] == [
        (Stage.ZERO1, "Rule 1"),
        (Stage.ZERO2, "Rule 1"),
        (Stage.ZERO3, "Rule 1, taken to stage 3"),
    ]
    # what stage 2 holds that does not fit: the whole 16-bit weights plus its gradient and optimizer shards
    assert "stage 2 keeps the whole 16-bit weights beside its shards" in picks[2].explanation


def test_activation_warning_when_they_dominate():
    pick = advise(10**9, 8, "80GB", activations=60 * GB)  # ZeRO-1: 4 + 12/8 = 5.5 GB of model state
    assert pick.stage == Stage.ZERO1
    assert any("activations outweigh" in r for r in pick.reasons)
    assert pick.needs[0] == 16 * GB + 60 * GB


#: Lesson 04's first case: a 1.3 B GPT, 4 x 2,048 tokens per GPU, every layer recomputed, on 8 x 24 GB.
SMALL = Transformer(layers=24, hidden=2048, heads=16, seq_len=2048, micro_batch=4)


def test_the_advice_leaves_ten_percent_free_and_says_what_it_passed_over():
    """Fresh readers saw the advice pick plain data parallelism with 1.3% of the card free, and the lesson
    then run ZeRO-1. Now the pick is ZeRO-1, and one reason says why data parallelism was passed over."""
    pick = advise_model(SMALL, 8, "24GB", recompute="full")
    assert (pick.stage, pick.rule, pick.headroom) == (Stage.ZERO1, "partition-optimizer", Fraction(1, 10))
    free = 24 * GB - (16 * SMALL.params + activation_bytes(SMALL, "full"))  # data parallel: 16 bytes/param
    assert round(free / GB, 3) == 0.308 and round(100 * free / (24 * GB), 1) == 1.3
    assert (
        "data parallel would leave only 0.308 GB (1.3%) free: under 10%, the margin kept for the CUDA "
        "context, buffers and at least part of a step's transient peaks (lesson 12); pass headroom=0 "
        "(--headroom 0) for the article's bare rule"
    ) in pick.reasons
    assert pick.warnings == ()  # ZeRO-1 leaves 14 GB free: the thin-headroom warning has nothing to say


def test_headroom_zero_is_the_articles_bare_rule():
    """headroom=0 gives the old pick, data parallel, and the thin-headroom warning naming ZeRO-1."""
    bare = advise_model(SMALL, 8, "24GB", recompute="full", headroom=0)
    assert (bare.stage, bare.rule) == (Stage.DP, "replicate")
    assert not any("would leave only" in r for r in bare.reasons)
    (warning,) = bare.warnings
    assert warning.startswith("only 0.308 GB of 24 GB per GPU is left free, under 10%")
    assert warning.endswith("; ZeRO-1 would leave 14.072 GB free")


def _by_hand(params: int, gpus: int, card: int, act: int, share: Fraction) -> Stage | None:
    """The policy written out from the article's formulas: the lowest stage whose bytes leave `share` free."""
    per_stage = [16 * params, 4 * params + Fraction(12 * params, gpus)]
    per_stage += [2 * params + Fraction(14 * params, gpus), Fraction(16 * params, gpus)]
    fits = [s for s in Stage if per_stage[s] + act <= card * (1 - share)]
    return fits[0] if fits else None


@pytest.mark.parametrize("share", [0, Fraction(1, 20), Fraction(1, 10), Fraction(1, 4), Fraction(9, 10)])
def test_the_pick_is_the_lowest_stage_that_leaves_the_headroom_free(share):
    for params in (10**9, 7_500_000_000, 13 * 10**9, 70 * 10**9):
        for gpus in (1, 4, 8, 64):
            for card in (16 * GB, 24 * GB, 30 * GB, 40 * GB, 80 * GB):
                for act in (0, 2 * GB):
                    pick = advise(params, gpus, card, activations=act, headroom=share)
                    assert pick.stage == _by_hand(params, gpus, card, act, share), (params, gpus, card, act)


def test_the_headroom_moves_the_pick():
    """7.5 B on 8 x 30 GB: ZeRO-2's 28.125 GB leaves 6.25% free. Enough for 5%, not for the default 10%."""
    pick = advise(7_500_000_000, 8, "30GB")
    assert (pick.stage, pick.rule) == (Stage.ZERO3, "stage-3-or-more-gpus")
    assert any(r.startswith("ZeRO-2 would leave only 1.875 GB (6.3%) free: under 10%") for r in pick.reasons)
    for share in (0, "5%", 0.05):
        lower = advise(7_500_000_000, 8, "30GB", headroom=share)
        assert (lower.stage, lower.rule) == (Stage.ZERO2, "partition-optimizer")
        assert lower.warnings[0].startswith("only 1.875 GB of 30 GB per GPU is left free, under 10%")
    stricter = advise(7_500_000_000, 8, "80GB", headroom="50%")  # ZeRO-1's 41.25 GB of 80 GB leaves 48%
    assert (
        stricter.stage == Stage.ZERO2
        and "ZeRO-1 would leave only 38.75 GB (48.4%) free: under 50%, the headroom asked for"
        in str(stricter)
    )
    assert stricter.to_dict()["headroom"] == 0.5


@pytest.mark.parametrize(
    "value, error",
    [
        (Fraction(95, 100), ValueError),
        (-0.1, ValueError),
        (10, ValueError),
        ("10", ValueError),
        ("95%", ValueError),
        ("ten%", ValueError),
        (True, TypeError),
        (None, TypeError),
        ([0.1], TypeError),
    ],
)
def test_headroom_is_a_share_from_0_to_90_percent(value, error):
    with pytest.raises(error, match="headroom") as refused:
        advise(7_500_000_000, 8, "80GB", headroom=value)
    assert "0% to 90%" in str(refused.value)  # every refusal names the range


def test_advise_model_uses_the_activation_estimate():
    model = Transformer(layers=32, hidden=4096, heads=32, seq_len=4096, micro_batch=1)
    pick = advise_model(model, 8, "80GB", recompute="selective")
    assert pick.activations == activation_bytes(model, "selective") and pick.stage == Stage.ZERO1
    assert advise_model(model, 8, "80GB").rule == "activations"
    flash = advise_model(model, 8, "80GB", attention="flash")  # no s × s matrices stored: fits with none
    assert flash.activations == activation_bytes(model, attention="flash") and flash.stage == Stage.ZERO1


#: Lesson 04's rule rows as tests in symbols, in order (B = 0.9 M), with the rule key `advise` records.
SYMBOL_ROWS = (
    ("replicate", lambda p, n, a, b: 16 * p + a <= b),
    (
        "partition-optimizer",
        lambda p, n, a, b: 4 * p + Fraction(12 * p, n) + a <= b or 2 * p + Fraction(14 * p, n) + a <= b,
    ),
    ("stage-3-or-more-gpus", lambda p, n, a, b: Fraction(16 * p, n) + a <= b and 2 * p + a <= b),
    ("partition-parameters", lambda p, n, a, b: Fraction(16 * p, n) + a <= b < 2 * p + a),
    ("activations", lambda p, n, a, b: Fraction(16 * p, n) <= b < Fraction(16 * p, n) + a),
    ("does-not-fit", lambda p, n, a, b: b < Fraction(16 * p, n)),
)


@settings(max_examples=300, deadline=None)
@example(params=7_500_000_000, gpus=8, card_gb=160, act_gb=0)  # lesson 04's cards, one row each
@example(params=7_500_000_000, gpus=8, card_gb=32, act_gb=0)
@example(params=7_500_000_000, gpus=8, card_gb=30, act_gb=0)
@example(params=7_500_000_000, gpus=8, card_gb=12, act_gb=0)
@example(params=7_500_000_000, gpus=8, card_gb=40, act_gb=30)
@example(params=7_500_000_000, gpus=8, card_gb=24, act_gb=20)
@example(params=7_500_000_000, gpus=16, card_gb=16, act_gb=0)  # 2Ψ over the budget: Rule 2
@given(
    params=st.integers(10**6, 10**12),
    gpus=st.integers(1, 512),
    card_gb=st.integers(1, 200),
    act_gb=st.integers(0, 100),
)
def test_lesson_04s_rules_in_symbols_are_the_advisors(params, gpus, card_gb, act_gb):
    budget, act = Fraction(9, 10) * card_gb * GB, act_gb * GB
    first = next(key for key, holds in SYMBOL_ROWS if holds(params, gpus, act, budget))
    assert advise(params, gpus, card_gb * GB, activations=act).rule == first
