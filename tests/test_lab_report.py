"""The lab's tables, without ranks: rows whose measurements are the predictions themselves render as the
lessons show them (the real measurements are checked against the same predictions in tests/test_lab.py)."""

from zero_lessons import lab
from zero_lessons.lab import modes, report, runner
from zero_lessons.lab.results import Measured, Results, Row


def _results(keys) -> Results:
    rows = []
    for key in keys:
        for gpus in (1, 2, 4):
            for rank in range(gpus):
                found = runner.predict(modes.get(key), gpus, rank)
                rows.append(Row(key, gpus, rank, Measured(found.held, found.traffic, found.traffic), found))
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
    for text in (brief, full):
        assert text.splitlines()[0].endswith("matches the package's prediction")
        assert "24,080" in text and "24080" not in text
    assert "7,200 / 3,120 / 1,200 / 520" in full and "3,010 = 2.000Ψ" in full
