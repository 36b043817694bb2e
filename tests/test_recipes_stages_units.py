"""Recipes, stages, units and the safe parsers."""

from fractions import Fraction

import pytest

from zero_lessons import recipes, units
from zero_lessons.stages import Stage, as_stage


def test_presets_add_up_to_their_conventions():
    totals = {name: r.total_bytes for name, r in recipes.PRESETS.items()}
    assert totals == {
        "mixed-adam": 16,
        "megatron-18": 18,
        "infinity-20": 20,
        "fp32-adam": 16,
        "mixed-adam-8bit": 10,
        "mixed-sgd-momentum": 12,
    }
    adam = recipes.MIXED_ADAM
    assert (adam.weight_bytes, adam.grad_bytes, adam.optimizer_bytes) == (2, 2, 12)
    assert (
        recipes.FP32_ADAM.weight_bytes,
        recipes.FP32_ADAM.grad_bytes,
        recipes.FP32_ADAM.optimizer_bytes,
    ) == (4, 4, 8)
    assert recipes.MEGATRON_18.grad_bytes == 4
    assert all(r.source for r in recipes.PRESETS.values())


def test_custom_recipe_is_exact():
    r = recipes.custom(0.5, 2, Fraction(13, 2))
    assert (r.weight_bytes, r.grad_bytes, r.optimizer_bytes) == (Fraction(1, 2), 2, Fraction(13, 2))
    assert r.total_bytes == 9


@pytest.mark.parametrize(
    "bad, error",
    [
        (-1, ValueError),
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (True, TypeError),
        ("2", TypeError),
        (None, TypeError),
    ],
)
def test_custom_recipe_rejects_bad_bytes(bad, error):
    with pytest.raises(error, match="grad_bytes"):
        recipes.custom(2, bad, 12)


def test_unknown_recipe_lists_the_presets():
    with pytest.raises(ValueError, match="mixed-adam"):
        recipes.get("adam-ish")


def test_stage_partitions_in_order():
    assert [s.partitioned for s in Stage] == [
        (),
        ("optimizer",),
        ("optimizer", "gradients"),
        ("optimizer", "gradients", "weights"),
    ]
    assert Stage.ZERO2.partitions("gradients") and not Stage.ZERO2.partitions("weights")
    assert [s.label for s in Stage] == ["data parallel", "ZeRO-1", "ZeRO-2", "ZeRO-3"]


@pytest.mark.parametrize(
    "text, stage",
    [(0, 0), ("3", 3), ("ZeRO-2", 2), ("zero1", 1), ("z3", 3), ("dp", 0), ("DDP", 0), (Stage.ZERO1, 1)],
)
def test_as_stage_reads_common_names(text, stage):
    assert as_stage(text) == stage


@pytest.mark.parametrize("bad", [4, -1, True, 1.0, "zero-4", "", None, "ZeRO"])
def test_as_stage_rejects_the_rest(bad):
    with pytest.raises(ValueError, match="stage must be 0, 1, 2 or 3"):
        as_stage(bad)


@pytest.mark.parametrize(
    "text, count",
    [
        ("7.5B", 7_500_000_000),
        ("7.5e9", 7_500_000_000),
        ("175 billion", 175 * 10**9),
        ("70M", 70 * 10**6),
        ("1T", 10**12),
        ("1_000_000", 10**6),
        ("1.5k", 1500),
        (" 13b ", 13 * 10**9),
        ("2", 2),
    ],
)
def test_parse_count_accepts_human_forms(text, count):
    assert units.parse_count(text) == count


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "7.5",
        "abc",
        "7.5 bn",
        "1__0",
        "__import__('os')",
        "1e999",
        "-5B",
        "7.5BB",
        "2**30",
        "1/2",
        "nan",
        "inf",
    ],
)
def test_parse_count_rejects_with_accepted_forms(bad):
    with pytest.raises(ValueError, match='"7.5B"'):
        units.parse_count(bad)


def test_parse_size_knows_decimal_from_binary():
    assert units.parse_size("80GB") == 80 * 10**9
    assert units.parse_size("80 GiB") == 80 * 2**30
    assert units.parse_size("512 MiB") == 2**29
    assert units.parse_size("1.5 TB") == Fraction(3, 2) * 10**12
    for bad in ["80", "80G", "eighty GB", "80 GHz", "-1GB"]:
        with pytest.raises(ValueError, match="GiB = 2\\*\\*30"):
            units.parse_size(bad)


def test_parse_bandwidth_bits_and_bytes():
    assert units.parse_bandwidth("100 Gb/s") == Fraction(100 * 10**9, 8)
    assert units.parse_bandwidth("25 GB/s") == 25 * 10**9
    assert units.parse_bandwidth("900GBps") == 900 * 10**9
    with pytest.raises(ValueError, match="bandwidth"):
        units.parse_bandwidth("fast")
    with pytest.raises(ValueError, match="> 0"):
        units.parse_bandwidth("0 GB/s")


def test_units_are_named_right():
    assert units.format_bytes(41_250_000_000, "GB") == "41.25 GB"
    assert units.format_bytes(120 * 10**9, "gib") == "111.759 GiB"
    assert units.format_bytes(2**30, "GiB") == "1 GiB"
    assert units.format_number(Fraction(1, 3)) == "0.333"
    assert units.format_number(Fraction("28.125")) == "28.125"
    assert units.format_number(-Fraction(5, 2)) == "-2.5"
    assert units.format_count(7_500_000_000) == "7.5B"
    assert units.format_count(999) == "999"
    with pytest.raises(ValueError, match="unit must be one of"):
        units.unit_size("Gb/s")


def test_format_number_groups_thousands_only_when_asked():
    assert units.format_number(Fraction(16555, 2), grouped=True) == "8,277.5"
    assert units.format_number(Fraction(16555, 2)) == "8277.5"
    assert units.format_number(-(10**7), grouped=True) == "-10,000,000"
    with pytest.raises(TypeError, match="grouped must be True or False"):
        units.format_number(1, grouped="yes")
