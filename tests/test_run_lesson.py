"""Lesson 10's displays: the key table's baseline, its two narrower tables, and the formats' subnormals."""

import pytest


def test_the_baseline_states_the_config_the_key_tables_numbers_start_from():
    from zero_lessons.run import baseline, keys

    base = baseline.Baseline()
    table = keys.KeyTable()
    micro = table.get("train_micro_batch_size_per_gpu")
    reuse = table.get("zero_optimization.stage3_max_reuse_distance")
    assert base.peak(2).total == keys.peak(micro, micro.default)  # the stage-2 rows' left-hand number
    assert base.peak(3).total == keys.peak(reuse, reuse.default)  # the stage-3 rows' left-hand number
    cells = dict(base.cells())
    assert "bf16.enabled true" in cells["precision"] and "2 + 2 B" in cells["precision"]
    assert "micro-batch 1 × sequence 2,048" in cells["batch"]
    assert "False at stage 2, True at stage 3" in cells["other keys"]
    assert cells["peak per GPU, stage 2"].startswith("58.55 GB")  # the figure the key table starts from
    with pytest.raises(ValueError, match="stage must be 2 or 3"):
        base.peak(1)


def test_the_key_table_splits_into_settings_and_effects_without_losing_a_cell():
    from zero_lessons.run import keys

    table = keys.KeyTable()
    settings, effects = table.settings(), table.effects()
    assert len(settings.head) == 5 and len(effects.head) == 3
    for full, left, right in zip(table.rows, settings.rows, effects.rows, strict=True):
        assert list(left) + [right[1], right[2]] == full and right[0] == full[0]
    row = dict((r[0], r[2]) for r in effects.rows)["gradient_accumulation_steps"]
    assert row == "sent per micro-batch, DeepSpeed default: stage 1 3Ψ → 0.75Ψ; stage 2 3Ψ → 2.25Ψ"
    assert settings._repr_markdown_().count("\n") == len(table.keys) + 1


def test_the_smallest_subnormals_are_the_ieee_and_bfloat16_powers_of_two():
    pytest.importorskip("torch")
    from zero_lessons.run import precision

    formats = precision.formats()
    powers = {"float32": -149, "bfloat16": -133, "float16": -24}  # emin - mantissa bits of each format
    for name, power in powers.items():
        assert formats.get(name).smallest_subnormal == 2.0**power
        assert precision.as_dtype(2.0**power, name) == 2.0**power
        assert precision.as_dtype(2.0 ** (power - 2), name) == 0.0  # a quarter of it rounds to zero
