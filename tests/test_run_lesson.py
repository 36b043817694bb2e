"""Lesson 17's key table, its baseline and two narrower tables; lesson 16's formats and their subnormals."""

import pathlib

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
    assert "makes it False at stage 2 and True at stage 3" in cells["other keys"]
    assert "peak per GPU, stage 2" not in cells  # the step model's own peak, without the loss: section 1's
    assert cells["peak per GPU with the loss, stage 2"] == "58.63 GB, at the loss (step model)"
    assert cells["peak per GPU with the loss, stage 3"] == (
        "50.52 GB, at the loss, gathered weights counted by DeepSpeed's rules, matrix by matrix (section 2)"
    )
    assert round(float(keys.peak(micro, micro.default, loss=True)) / 1e9, 2) == 58.63  # the key table agrees
    overlap = table.get("zero_optimization.overlap_comm")
    assert overlap.default is None  # DeepSpeed's own default, resolved per stage
    assert keys.default_shown(overlap) == "None: False at stages 0-2, True at 3"
    # the advisor writes overlap_comm and contiguous_gradients True: only overlap_comm at stage 2 differs
    assert base.advisor_differs(2) == {"overlap_comm": (False, True)} and base.advisor_differs(3) == {}
    assert base.peak(2, advisor=True).total == keys.peak(overlap, True) > base.peak(2).total
    assert base.peak(3, advisor=True).total == base.peak(3).total
    from zero_lessons.planning.advice import advise_model
    from zero_lessons.stages import Stage

    assert advise_model(keys.SHAPE, 8, "80GB").stage == Stage.ZERO2  # the row's name says so
    assert len(cells) == 8  # the settings and the two peaks, nothing the lesson prices later
    assert base.head_line() == "stage 2: 58.99 GB, at backward block 32; stage 3: 50.71 GB, at the loss"
    assert "; ".join(base.advisor_line(s) for s in (2, 3)) == (
        "stage 2: overlap_comm True (default False), peak with the loss 59.55 GB; "
        "stage 3: no key differs, peak with the loss 50.52 GB"
    )
    with pytest.raises(ValueError, match="stage must be 2 or 3"):
        base.peak(1)


def test_the_key_effects_table_shows_each_keys_values_words_and_numbers():
    from zero_lessons.run import keys

    table = keys.KeyTable()
    effects = table.effects()
    assert len(effects.head) == 4 and len(effects.rows) == len(table.rows) == len(table.keys)
    for full, row in zip(table.rows, effects.rows, strict=True):
        assert row == (full[0], f"{full[1]} → {full[3]}", full[5], full[6])
    rows = {r[0]: r for r in effects.rows}
    assert rows["gradient_accumulation_steps"][1:4:2] == (
        "1 → 4",
        "sent per micro-batch, DeepSpeed default: stage 1 3Ψ → 0.75Ψ; stage 2 3Ψ → 2.25Ψ",
    )
    assert effects._repr_markdown_().count("\n") == len(table.keys) + 1
    # split by measure: the peak rows' numbers are all peaks per GPU, the rest's none; together every key once
    peaks, others = table.effects("peak").rows, table.effects("other").rows
    assert all(r[4].startswith("peak per GPU at stage ") for r in peaks) and len(peaks) == 10
    assert not any(r[3].startswith("peak per GPU") for r in others)
    assert sorted([(*r[:3], r[4]) for r in peaks] + list(others)) == sorted(effects.rows)
    # the peak rows lead with the peak once lesson 14's loss is counted: never below the step model's peak,
    # and it changes what two keys do (contiguous_gradients off lowers nothing; overlap_comm adds 0.92, not 1)
    head = table.effects("peak").head
    assert head[3].startswith("peak with the loss") and head[4].startswith("without the loss")
    with_loss = {r[0].split(".")[-1]: r[3] for r in peaks}
    assert with_loss["contiguous_gradients"] == "stage 2: 58.63 GB → 58.63 GB"
    assert with_loss["overlap_comm"] == "stage 2: 58.63 GB → 59.55 GB" and peaks[0][4].endswith(
        "58.55 GB → 89.72 GB"
    )
    assert with_loss["stage3_max_reuse_distance"] == "stage 3: 50.22 GB → 49.31 GB"
    for row in peaks:
        counted, plain = (float(text.split(" GB")[0].split(": ")[-1]) for text in (row[3], row[4]))
        assert counted >= plain
    with pytest.raises(ValueError, match="measure must be one of"):
        table.effects("time")


def test_the_smallest_subnormals_are_the_ieee_and_bfloat16_powers_of_two():
    pytest.importorskip("torch")
    from zero_lessons.run import precision

    formats = precision.formats()
    powers = {"float32": -149, "bfloat16": -133, "float16": -24}  # emin - mantissa bits of each format
    for name, power in powers.items():
        assert formats.get(name).smallest_subnormal == 2.0**power
        assert precision.as_dtype(2.0**power, name) == 2.0**power
        assert precision.as_dtype(2.0 ** (power - 2), name) == 0.0  # a quarter of it rounds to zero


def test_the_contiguous_gradients_row_names_both_parts_that_move():
    from zero_lessons.run import keys

    key = keys.KeyTable().get("zero_optimization.contiguous_gradients")
    on, off = keys.peak_parts(key, True), keys.peak_parts(key, False)
    assert on["gradient buckets"] == 2 * keys.KNOBS.reduce_bucket_size and "gradient buckets" not in off
    saved = keys.peak(key, True) - keys.peak(key, False)
    assert saved == on["gradient buckets"] + on["unreduced gradients"] - off["unreduced gradients"]
    assert "the 1.00 GB bucket goes" in keys.numbers(key)


def test_the_bf16_row_gives_its_traffic_in_both_dtypes():
    from zero_lessons.run import keys

    row = keys.numbers(keys.KeyTable().get("bf16.enabled"))
    assert "stage 2 sends 3Ψ per step, in the training dtype: 89.92 GB → 44.96 GB" in row
    # In fp32, DeepSpeed's stages 1 and 2 still clone an fp32 master partition: 4Ψ + (4 + 4 + 8)Ψ/8 = 6Ψ
    psi = keys.transformer_model(keys.SHAPE).params
    assert "stage 2 model state per GPU: 44.96 GB (fp32, with a cloned fp32 master)" in row
    assert round(6 * psi / 10**9, 2) == 44.96


def test_deepspeeds_stage_1_and_2_clone_the_master_partition_even_in_fp32():
    from conftest import need_module

    source = pathlib.Path(need_module("deepspeed.runtime.zero.stage_1_and_2").__file__).read_text()
    assert (
        "weights_partition = self.parallel_partitioned_bit16_groups[i][partition_id].detach().clone()"
        in source
    )


def test_the_run_legend_explains_every_column_of_a_stage_3_run():
    from zero_lessons.run import legend, predict

    config = {"bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}
    for ranks in (2, 4):
        assert legend.Legend(ranks).held() == predict.expected(config, ranks, 0)
    assert legend.Legend(2).held().gradients == predict.MODEL.param_count  # 2 B × Ψ/2: equal to Ψ
    text = legend.Legend(2)._repr_markdown_()
    assert "283,656 + 43,024 = 326,680" in text and "12 B × 141,828 = 1,701,936" in text
    with pytest.raises(ValueError, match="ranks"):
        legend.Legend(1)


def test_under_bf16_stages_1_and_2_skip_an_overflowing_step_with_a_fixed_scale_of_1():
    """Lesson 16: DeepSpeed's bf16 config checks gradients for inf/NaN by default, the engine hands that to
    stages 1 and 2, whose step skips when it finds one; and a non-fp16 loss scaler is a fixed scale of 1."""
    from conftest import need_module

    read = lambda name: pathlib.Path(need_module(name).__file__).read_text()  # noqa: E731
    assert "check_grad_overflow: bool = True" in read("deepspeed.runtime.precision_config")
    engine = read("deepspeed.runtime.engine")
    assert "check_grad_overflow = self._config.bfloat16_config.check_grad_overflow" in engine
    stage12 = read("deepspeed.runtime.zero.stage_1_and_2")
    assert "if self.check_grad_overflow:\n            self.check_overflow(" in stage12
    assert "loss_scale_value = static_loss_scale if dtype == torch.half else 1.0" in read(
        "deepspeed.runtime.fp16.loss_scaler"
    )


def test_deepspeeds_fp16_hysteresis_spares_the_first_overflow():
    """Lesson 16: fp16's default `hysteresis` is 2, so the first overflow skips the step and keeps the scale
    (it only counts the hysteresis down); the next one halves the scale."""
    from conftest import need_module

    constants = need_module("deepspeed.runtime.constants")
    assert constants.FP16_HYSTERESIS_DEFAULT == 2
    source = pathlib.Path(need_module("deepspeed.runtime.fp16.loss_scaler").__file__).read_text()
    assert "if self.delayed_shift == 1 or self.cur_hysteresis == 1:" in source
    assert "self.cur_hysteresis -= 1" in source
    # after loss_scale_window steps without overflow the scale doubles and the spare comes back
    assert constants.FP16_LOSS_SCALE_WINDOW_DEFAULT == 1000
    assert (
        "self.cur_hysteresis = self.delayed_shift\n                self.cur_scale *= self.scale_factor"
        in source
    )


def test_deepspeeds_stage_3_checks_for_overflow_only_under_fp16():
    """Lesson 16: under bf16 no step is skipped; the inf/NaN flag is allocated but only fp16 reads it."""
    from conftest import need_module

    source = pathlib.Path(need_module("deepspeed.runtime.zero.stage3").__file__).read_text()
    assert "if self.dtype == torch.float16:\n            self.check_overflow()" in source
    assert "self.inf_or_nan_tracker: Tensor = torch.zeros(1, dtype=torch.bool" in source


def test_the_peak_table_splits_by_stage_without_saying_the_stage_in_every_cell():
    """Lesson 17 shows stage 2's keys and stage 3's apart: each key once, the same numbers as the mixed table,
    with the stage said by the table, not by every cell."""
    from zero_lessons.run import keys

    table = keys.KeyTable()
    mixed = {r[0]: r for r in table.effects("peak").rows}
    split = {stage: table.effects("peak", stage=stage).rows for stage in (2, 3)}
    assert sorted(r[0] for rows in split.values() for r in rows) == sorted(mixed)
    for stage, rows in split.items():
        for row in rows:
            assert all(f"stage {stage}:" not in cell for cell in row[3:]), row
            assert mixed[row[0]][3] == f"stage {stage}: {row[3]}"
            assert mixed[row[0]][4] == f"peak per GPU at stage {stage}: {row[4]}"
    assert {r[0] for r in split[3]} == {k.path for k in keys.KEYS if k.stage == 3 and k.measure == "peak"}
    with pytest.raises(ValueError, match="stage must be one of 2, 3, got '4'"):
        table.effects("peak", stage=4)
    with pytest.raises(TypeError, match="stage must be one of 2, 3"):
        table.effects("peak", stage=2.0)


def test_the_offload_row_leads_with_what_deepspeeds_code_sends():
    """Lesson 17 plans the link with DeepSpeed's code (fp32 gradients down): the row gives that first."""
    from zero_lessons.planning import offload
    from zero_lessons.run import keys
    from zero_lessons.run.example import GPUS, SHAPE

    psi = keys.transformer_model(SHAPE).params
    row = keys.numbers(keys.KeyTable().get("zero_optimization.offload_optimizer.device"))
    code, ours = offload.deepspeed_pcie_bytes(psi, GPUS, 2), offload.link_bytes(psi, GPUS, 2)
    assert code > ours and code == ours * 3 / 2  # fp32 gradients down: 4 + 2 bytes per element against 2 + 2
    assert f"over PCIe per step {float(code / 10**9):.2f} GB by DeepSpeed's code" in row
    assert f"({float(ours / 10**9):.2f} GB by the package's count)" in row
