"""The explorer's pure side: settings, verdicts, traffic and the SVG charts."""

import re
from fractions import Fraction

import pytest

from zero_lessons import GB, communication, recipes
from zero_lessons.explorer.views import (
    PRESETS,
    Settings,
    advice_html,
    comm_html,
    compute_view,
    plot_comm,
    plot_memory_bars,
    plot_scaling,
    verdict,
)
from zero_lessons.memory import per_gpu
from zero_lessons.present.figures import SCALING_GPUS
from zero_lessons.present.table import stage_table
from zero_lessons.stages import Stage


def test_default_view_is_the_article():
    view = compute_view(Settings())
    assert [row.held.total for row in view.table.rows] == [
        120 * GB,
        Fraction("41.25") * GB,
        Fraction("28.125") * GB,
        15 * GB,
    ]
    assert view.verdict == "lowest stage that fits: ZeRO-1 (41.25 GB of 80 GB)"
    assert [r.elements for r in view.comm] == [
        communication.volume_elements(7_500_000_000, 8, s, ring=True) for s in Stage
    ]
    assert view.comm[3].seconds == Fraction("3.15")  # 3Ψ·7/8 elements, 2 bytes each, at 12.5 GB/s


def test_the_advice_names_the_verdicts_stage_when_it_passes_it_over_for_headroom():
    """The verdict is the bare fit; the advice leaves 10% of each GPU free. On 30 GB cards they pick different
    stages, and the advice says why in one reason, so the two views never disagree without saying so."""
    view = compute_view(Settings(gpu_memory="30GB"))
    assert view.verdict == "lowest stage that fits: ZeRO-2 (28.125 GB of 30 GB, only 6.3% free)"
    assert view.advice.stage == Stage.ZERO3 and view.advice.headroom == Fraction(1, 10)
    assert any(r.startswith("ZeRO-2 would leave only 1.875 GB (6.3%) free") for r in view.advice.reasons)
    roomy = compute_view(Settings())  # 80 GB: ZeRO-1 leaves 48% free, and both views agree
    assert roomy.advice.stage == Stage.ZERO1 and roomy.verdict.startswith("lowest stage that fits: ZeRO-1")


def test_the_tables_traffic_column_says_it_is_the_papers_count_without_the_ring():
    """The table's last column is the ZeRO paper's 2Ψ and 3Ψ, and its label says so; the traffic view shows
    the same traffic with the ring factor 7/8 on 8 GPUs, 1.75Ψ and 2.625Ψ: the two never contradict."""
    view = compute_view(Settings())
    head, *rows = view.table.cells()
    assert head[-1] == "comm (paper, no ring)"
    assert [row[-1] for row in rows] == ["2Ψ", "2Ψ", "2Ψ", "3Ψ"]
    shown = comm_html(view)
    assert [shown.count(f">{multiple}Ψ<") for multiple in ("1.75", "2.625")] == [3, 1]


def test_verdict_when_nothing_fits_says_how_many_gpus_would():
    table = stage_table(7_500_000_000, 8, gpu_memory="10GB")
    assert (
        verdict(table)
        == "nothing fits: even ZeRO-3 needs 15 GB of 10 GB per GPU; ZeRO-3 would fit on 12 GPUs"
    )


def test_verdict_matches_the_example_in_the_issue():
    table = stage_table(7_500_000_000, 8, gpu_memory="30GB")
    assert verdict(table) == "lowest stage that fits: ZeRO-2 (28.125 GB of 30 GB, only 6.3% free)"
    assert (
        verdict(stage_table(7_500_000_000, 8, unit="GiB", gpu_memory="30GiB"))
        == "lowest stage that fits: ZeRO-2 (26.193 GiB of 30 GiB)"
    )


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("params", 0, "params must be"),
        ("gpus", 2.0, "gpus must be"),
        ("gpu_memory", "lots", "gpu_memory: cannot read"),
        ("unit", "GHz", "unit must be"),
        ("dtype", "fp13", "dtype must be"),
        ("bandwidth", "0 Gb/s", "> 0"),
        ("recipe", "adam-ish", "recipe must be"),
        ("activations", "lots", "activations: cannot read 'lots'"),
        ("activations", -1, "activations must be"),
    ],
)
def test_settings_reject_bad_fields(field, value, words):
    with pytest.raises((ValueError, TypeError), match=words):
        Settings(**{field: value})


def test_activations_change_the_verdict_and_the_advice_and_both_say_so():
    # Lesson 04's point: 45 GB of activations beside 7.5B's model state on 8 x 80 GB. Without them ZeRO-1
    # fits (41.25 GB); with them ZeRO-1 needs 86.25 GB, ZeRO-2 73.125 GB (8.6% free: under the advice's 10%
    # headroom), so the verdict's bare rule says ZeRO-2 and the advice says ZeRO-3 (60 GB).
    bare, busy = compute_view(Settings()), compute_view(Settings(activations="45GB"))
    assert bare.verdict == "lowest stage that fits: ZeRO-1 (41.25 GB of 80 GB)" and bare.advice.stage == 1
    assert busy.settings.activations == 45 * GB
    assert busy.verdict == (
        "lowest stage that fits: ZeRO-2 (28.125 GB model state + 45 GB activations = 73.125 GB of 80 GB, "
        "only 8.6% free)"
    )
    assert busy.advice.stage == Stage.ZERO3 and busy.advice.activations == 45 * GB
    assert "ZeRO-3: 15 GB model state + 45 GB activations = 60 GB of 80 GB per GPU" in advice_html(busy)
    assert "activations were left at 0" in advice_html(bare) and "left at 0" not in advice_html(busy)


def test_activations_that_fill_a_card_leave_no_gpu_count_that_helps():
    more = compute_view(Settings(activations="79GB")).verdict
    assert more.endswith(
        "15 GB model state + 79 GB activations = 94 GB of 80 GB per GPU; ZeRO-3 would fit on 120 GPUs"
    )
    full = compute_view(Settings(activations="80GB")).verdict
    assert full.endswith("no GPU count helps: checkpoint the activations or use a smaller batch (rule 3)")
    assert compute_view(Settings(activations="80GB")).advice.stage is None
    with pytest.raises(TypeError, match="activations must be bytes"):
        verdict(stage_table(7_500_000_000, 8, gpu_memory="80GB"), "45GB")


def test_presets_are_valid_settings():
    for name, case in PRESETS.items():
        view = compute_view(Settings(**case))
        assert view.table.params == case["params"], name


def test_charts_draw_what_the_table_says():
    view = compute_view(Settings())
    bars = plot_memory_bars(view)
    assert bars.count("class='bar'") == 4 * 3
    assert re.findall(r"class='total'[^>]*>([^<]+)<", bars) == ["120", "41.25", "28.125", "15"]
    assert "class='limit'" in bars
    # the card less the advice's 10% headroom: the band's line at 72 of the 80 GB, as the matplotlib bars
    top = 120 * 1.12  # the axis's top: the tallest bar and 12% above it
    (band_y,) = re.findall(r"<line class='band' x1='\d+' y1='([\d.]+)'", bars)
    assert abs(float(band_y) - (28 + (260 - 28 - 50) * (1 - 72 / top))) < 0.1 and "keeping 10% free" in bars
    hatched = bars.index("<rect class='band'")  # grey hatching, as the figures draw it, behind the columns
    assert "fill='url(#zero-band-hatch)'" in bars and hatched < bars.index("class='bar'")
    busy = plot_memory_bars(compute_view(Settings(activations=Fraction(5 * GB))))  # activations drawn on top
    assert busy.count("class='bar'") == 4 * 4 and "data-series='activations'" in busy
    assert re.findall(r"class='total'[^>]*>([^<]+)<", busy) == ["125", "46.25", "33.125", "20"]
    scaling = plot_scaling(view)
    assert scaling.count("class='curve'") == 4 and "class='marker'" in scaling
    assert plot_comm(view).count("class='bar'") == 4
    assert comm_html(view).count("<tr>") == 5


def test_scaling_curve_is_the_memory_model():
    view = compute_view(Settings(recipe=recipes.MEGATRON_18))
    points = re.search(r"data-series='ZeRO-3' points='([^']+)'", plot_scaling(view))[1].split()
    assert len(points) == len(SCALING_GPUS)
    first_y = float(points[0].split(",")[1])
    # At one GPU every stage holds the same 18 B × Ψ, so every curve starts at the same height.
    assert all(
        re.search(rf"data-series='{s.label}' points='[\d.]+,{first_y}", plot_scaling(view)) for s in Stage
    )
    assert per_gpu(7_500_000_000, 1, 3, recipes.MEGATRON_18).total == 135 * GB


def test_axis_ticks_never_mix_exponents_with_plain_numbers():
    for params, gpus in ((7_500_000_000, 8), (175 * 10**9, 1024), (10**8, 1)):
        view = compute_view(Settings(params=params, gpus=gpus))
        for chart in (plot_memory_bars(view), plot_scaling(view), plot_comm(view)):
            labels = re.findall(r"fill='#555'>([^<]*)</text>", chart)
            assert labels and not [t for t in labels if "e+" in t or "e-" in t], labels
    scaling = plot_scaling(compute_view(Settings()))
    assert "1,000" in re.findall(r"fill='#555'>([^<]*)</text>", scaling)  # the GPU axis reaches 4,096


def test_comm_table_shows_short_times_in_milliseconds_with_aligned_columns():
    # 7.5B on 8 GPUs in bf16: stages 0-2 send 2 x 7.5e9 x 7/8 x 2 B = 26.25 GB, stage 3 sends 39.375 GB
    fast = comm_html(compute_view(Settings(bandwidth=Fraction(900 * GB))))
    assert fast.count(">29.167 ms<") == 3 and ">43.75 ms<" in fast and "0.0" not in fast  # at 900 GB/s
    assert ">3.15 s<" in comm_html(compute_view(Settings()))  # 39.375 GB at 100 Gb/s = 12.5 GB/s
    cells = re.findall(r"<td style='([^']*)'>", fast)
    assert len(cells) == 20 and all("padding:3px 10px" in c for c in cells)  # columns never run together
    assert ["left" in c for c in cells[:5]] == [True, False, False, False, False]  # text left, numbers right


def test_the_tables_shading_counts_the_activations_as_the_verdict_does():
    view = compute_view(Settings(activations="45GB"))
    assert [row.fits for row in view.table.rows] == [False, False, True, True]
    assert view.verdict.startswith("lowest stage that fits: ZeRO-2")
    assert [row.fits for row in compute_view(Settings()).table.rows] == [False, True, True, True]
