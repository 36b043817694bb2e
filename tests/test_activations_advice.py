"""Activation estimates against the papers, and the advisor against the article's rules."""

import pytest

from zero_lessons import GB
from zero_lessons.planning.activations import (
    GPT2_XL,
    Transformer,
    activation_bytes,
    layer_bytes,
    zero_paper_estimate,
)
from zero_lessons.planning.advice import advise
from zero_lessons.stages import Stage


def test_zero_paper_gpt2_example_is_about_60_gb():
    assert GPT2_XL.params == pytest.approx(1.5e9, rel=0.05)
    assert zero_paper_estimate(GPT2_XL) == pytest.approx(60 * GB, rel=0.01)


def test_korthikanti_formula_by_hand():
    m = Transformer(layers=2, hidden=64, heads=4, seq_len=16, micro_batch=3)
    assert layer_bytes(m) == 16 * 3 * 64 * (34 + 5 * 4 * 16 // 64)
    assert activation_bytes(m) == 2 * layer_bytes(m)
    assert activation_bytes(m, "selective") == 2 * 34 * 16 * 3 * 64
    assert activation_bytes(m, "full") == 2 * 2 * 16 * 3 * 64 + layer_bytes(m)


def test_recomputation_only_shrinks_activations():
    sizes = [activation_bytes(GPT2_XL, r) for r in ("none", "selective", "full")]
    assert sizes == sorted(sizes, reverse=True)


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
    assert advise(7_500_000_000, 8, "30GB").stage == Stage.ZERO2
    pick = advise(7_500_000_000, 8, "20GB")  # 15 GB of whole weights fit, stage 2's 28.125 GB does not
    assert (pick.stage, pick.rule) == (Stage.ZERO3, "stage-3-or-more-gpus")
    # with 10% of each GPU left free, as the headroom warning asks: 15 + 105/N ≤ 18 GB needs N ≥ 35
    assert "stage 2 would fit on 35 GPUs, leaving 10% of each free" in str(pick)
    pick = advise(7_500_000_000, 16, "14GB")  # the whole weights (15 GB) no longer fit a card
    assert (pick.stage, pick.rule) == (Stage.ZERO3, "partition-parameters")
    pick = advise(7_500_000_000, 8, "20GB", activations=10 * GB)
    assert (pick.stage, pick.rule) == (None, "activations")
    pick = advise(7_500_000_000, 8, "10GB")
    assert (pick.stage, pick.rule) == (None, "does-not-fit")  # no cpu_memory given, so offload is not tried
    assert "stage 3 would fit on 14 GPUs, leaving 10% of each free" in str(pick)  # 120 GB / 9 GB = 13.3


def test_activation_warning_when_they_dominate():
    pick = advise(10**9, 8, "80GB", activations=70 * GB)
    assert pick.stage == Stage.ZERO1
    assert any("activations outweigh" in r for r in pick.reasons)
    assert pick.needs[0] == 16 * GB + 70 * GB


def test_advise_model_uses_the_activation_estimate():
    from zero_lessons.planning.advice import advise_model

    model = Transformer(layers=32, hidden=4096, heads=32, seq_len=4096, micro_batch=1)
    pick = advise_model(model, 8, "80GB", recompute="selective")
    assert pick.activations == activation_bytes(model, "selective") and pick.stage == Stage.ZERO1
    assert advise_model(model, 8, "80GB").rule == "activations"
