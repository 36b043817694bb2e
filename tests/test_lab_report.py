"""The lab's tables, without ranks: rows whose measurements are the predictions themselves render as the
lessons show them (the real measurements are checked against the same predictions in tests/test_lab.py)."""

from dataclasses import replace

from zero_lessons import lab
from zero_lessons.lab import modes, predict_deepspeed, report, runner
from zero_lessons.lab.model import MODEL
from zero_lessons.lab.results import Measured, Results, Row, Traffic


def _results(keys) -> Results:
    rows = []
    for key in keys:
        for gpus in (1, 2, 4):
            for rank in range(gpus):
                found = runner.predict(modes.get(key), gpus, rank)
                measured = Measured(found.held, found.traffic, found.traffic, found.before_reduction)
                rows.append(Row(key, gpus, rank, measured, found))
    return Results(tuple(rows))


def test_the_brief_table_shows_ranges_and_multiples_of_psi():
    brief = report.Brief.of(_results(lab.TORCH_NAMES), lab.TORCH_NAMES)
    text = repr(brief)
    assert text.count("\n") == 3 * len(lab.TORCH_NAMES)  # a header, then one line per setting and N
    assert "12,560–19,240" in text  # ZeroRedundancyOptimizer on 4 ranks: 6020 + 6020 + (520 … 7200)
    assert 6_020 + 6_020 + 520 == 12_560 and 6_020 + 6_020 + 7_200 == 19_240
    assert brief._repr_html_().count("<tr>") == 3 * len(lab.TORCH_NAMES) + 1 and " NO" not in text


def test_deepspeed_brief_rows_use_the_mixed_precision_paper_column():
    text = repr(
        report.Brief.of(_results(("ds_zero0", "ds_zero3_no_reuse")), ("ds_zero0", "ds_zero3_no_reuse"))
    )
    assert "24,080" in text and "3.02Ψ" in text  # 16Ψ bytes; stage 3 without reuse on 4 ranks: 3Ψ, padded


def test_the_brief_table_shows_stage_1s_peak_beside_its_bytes_after_backward():
    """Only DeepSpeed's stage 1 reduces after the backward pass: its cell adds what it held as the reduction
    started, every bf16 gradient whole: the paper's ZeRO-1 (4 + 12/N bytes per parameter) plus padding."""
    keys = ("ds_zero0", "ds_zero1", "ds_zero2")
    lines = {(line[0], line[1]): line[3] for line in report.Brief.of(_results(keys), keys).grid()}
    assert lines["DeepSpeed ZeRO-1", "4"] == "8,340–10,200 (before its reduction: 10,570)"
    assert lines["DeepSpeed ZeRO-1", "2"] == "14,240–14,704 (before its reduction: 15,074)"
    assert lines["DeepSpeed ZeRO-2", "4"] == "8,340–10,200" and lines["DeepSpeed ZeRO-0", "4"] == "24,080"
    psi = MODEL.param_count
    padded = predict_deepspeed.padded_flat(psi, 4)
    assert 10_570 == 2 * padded + 2 * psi + 12 * padded // 4 == 4 * psi + 12 * psi // 4 + 2 * 7 + 12 * 7 // 4


def test_the_full_report_folds_on_request():
    results = _results(("ddp",))
    assert report.Report.of(results, ("ddp",), folded=True)._repr_html_().startswith("<details><summary>")
    assert "<details>" not in report.Report.of(results, ("ddp",))._repr_html_()


def test_both_tables_say_what_matched_and_group_thousands():
    """The last column says what was compared (the package's prediction, not the paper's); every count of
    four digits or more is written with a comma, in the folded table as in the brief one."""
    results = _results(("ddp", "zero_redundancy_optimizer"))
    brief = repr(report.Brief.of(results, ("ddp", "zero_redundancy_optimizer")))
    full = repr(report.Report.of(results, ("ddp", "zero_redundancy_optimizer")))
    assert brief.splitlines()[0].endswith("matches the package's prediction (not the paper)")
    assert full.splitlines()[0].endswith("matches the package's prediction")
    for text in (brief, full):
        assert "24,080" in text and "24080" not in text
    assert "7,200 / 3,120 / 1,200 / 520" in full and "3,010 = 2.000Ψ" in full


def test_one_rank_sends_nothing_on_a_wire_when_asked():
    """With `wire`, both sent columns of a one-rank row read 0 (the paper's (N − 1)/N is 0 there); rows of
    2 and 4 ranks, and the table without `wire` (lesson 10's), keep their multiples of Ψ."""
    keys = ("ds_zero0", "ds_zero3")
    results = _results(keys)
    wired, plain = report.Brief.of(results, keys, wire=True).grid(), report.Brief.of(results, keys).grid()
    for line, old in zip(wired, plain, strict=True):
        if line[1] == "1":
            assert line[4:6] == [report.NO_WIRE, report.NO_WIRE] and old[4:6] != line[4:6]
        else:
            assert line == old
    assert [line[4] for line in plain if line[1] == "1"] == ["2Ψ", "3Ψ"]
    assert report.NO_WIRE in report.Brief.of(results, keys, wire=True)._repr_html_()


NAMES = ("W0", "b0", "W1", "b1", "W2", "b2")
STAGE3 = ("ds_zero3", "ds_zero3_short_reuse", "ds_zero3_reuse0", "ds_zero3_no_reuse")


def test_the_gather_trace_counts_what_the_predicted_gathers_move():
    """Each tensor is gathered in the trace as often as the gathers (which the lab's ranks match message by
    message in tests/test_lab.py) bring it in; every tensor has one forward and one backward use."""
    for key in STAGE3:
        rows = report.GatherTrace(key, NAMES).grid()[1:]
        assert len(rows) == 2 * len(NAMES) and [r[0] for r in rows][::2] == ["1", "2", "3", "4", "5", "6"]
        gathered = [r[2] for r in rows if r[3] == "gathered"]
        elements = sum(MODEL.sizes[NAMES.index(name)] for name in gathered)
        counted = runner.predict(modes.get(key), 4, 0).traffic.elements["all_gather"]
        padded = sum(4 * predict_deepspeed.shard(MODEL.sizes[NAMES.index(name)], 4) for name in gathered)
        assert padded == counted and elements <= counted


def test_the_gather_trace_of_reuse_distance_0_says_why():
    """Distance 0 on the lab's knobs (prefetch 500, live limit 1,000): only L2 is reused, because the
    prefetcher walked past its backward use; L1 and L0 are dropped and prefetched again."""
    rows = {(r[0], r[2]): r[3:] for r in report.GatherTrace("ds_zero3_reuse0", NAMES).grid()[1:]}
    assert [key for key, (how, _) in rows.items() if how == "reused"] == [("4", "W2"), ("4", "b2")]
    assert rows["4", "W2"][1] == "kept after use 3: the prefetcher walked past this use after use 2"
    assert rows["2", "b1"] == ["gathered", "prefetched after use 1 (room 100)"]  # W1's 900 of 1,000 live
    assert rows["5", "W1"][1].startswith("dropped after use 2 (next use 310 elements away ≥ distance 0)")
    default = {(r[0], r[2]): r[3] for r in report.GatherTrace("ds_zero3", NAMES).grid()[1:]}
    assert {how for (use, _), how in default.items() if int(use) > 3} == {"reused"}
    none = report.GatherTrace("ds_zero3_no_reuse", NAMES).grid()[1:]
    assert {r[4].split("; ")[-1] for r in none} == {"gathered as the layer ran"}
    assert "| use | pass |" in report.GatherTrace("ds_zero3", NAMES)._repr_markdown_()


def test_the_scale_check_compares_ds_scale_with_the_labs_bf16_messages():
    """ds_scale's rules, run on the lab's model and knobs, list the same bf16 messages as the lab's own
    predictions; a changed message shows as DIFFERENT."""
    keys = ("ds_zero0", "ds_zero1", "ds_zero2", "ds_zero3")
    results = _results(keys)
    check = report.scale_check(results)
    assert list(check) == [f"ZeRO-{s}, N = {n}" for n in (2, 4) for s in range(4)]
    assert all(v.endswith(", same") for v in check.values())
    assert check["ZeRO-0, N = 2"] == "1 message, same"  # one all-reduce of all 1,505 gradients
    emptied = replace(results.get("ds_zero2", 4).measured, traffic=Traffic.of(()))
    rows = tuple(replace(r, measured=emptied) if (r.mode, r.gpus) == ("ds_zero2", 4) else r for r in results)
    assert report.scale_check(Results(rows))["ZeRO-2, N = 4"] == "0 messages, DIFFERENT"
