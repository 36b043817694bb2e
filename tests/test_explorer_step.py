"""The explorer's step view: the pure view against the package's timeline built here, its latency, and the
widget driven in-process (no browser) through every framework, knob and bad input; one Chromium picture."""

import re
import statistics
import time

import pytest

from conftest import need_chromium
from zero_lessons import recipes, units
from zero_lessons.explorer.step_view import StepSettings, StepView, compute_step_view, peak_html, plot_step
from zero_lessons.explorer.step_widget import StepExplorer
from zero_lessons.planning import activations
from zero_lessons.planning.step import DDP, FSDP2, KINDS, DeepSpeed, Paper, timeline, transformer_model

# The article's 7.5 B as a 32-block GPT, written out here rather than read from the package's presets.
ARTICLE = transformer_model(
    activations.Transformer(layers=32, hidden=4352, heads=32, seq_len=2048, micro_batch=1)
)
#: Most milliseconds a recomputation may take, as the median (the explorer's target, README).
TARGET_MS = 50


def shown_matches_model(app: StepExplorer) -> None:
    """The chart and the peak's table are what `compute_step_view` gives for the settings last accepted."""
    expected = compute_step_view(app.view.settings)
    assert app.chart.value == plot_step(expected)
    assert app.peak.value == peak_html(expected)


def test_the_view_is_the_package_timeline():
    view = compute_step_view(StepSettings())
    line = timeline(ARTICLE, DeepSpeed(stage=3), 8)
    assert view.timeline == line
    assert view.paper == 16 * ARTICLE.params / 8  # the paper's ZeRO-3: (2 + 2 + 12) Ψ / N
    assert view.peak_rows == tuple((p.kind, units.format_bytes(p.nbytes), p.reason) for p in line.peak.parts)
    assert view.headline == (
        "peak 49.132 GB per rank at backward block 32: 3.28× the paper's table for ZeRO-3 (14.987 GB)"
    )


@pytest.mark.parametrize(
    "framework",
    [Paper(stage=1), DDP(bucket_cap_mb=100), DeepSpeed(stage=2), FSDP2(reshard_after_forward=False)],
)
def test_the_chart_stacks_every_part_of_every_phase(framework):
    view = compute_step_view(StepSettings(framework, gpus=4, checkpointing=True, unit="GiB"))
    line = timeline(ARTICLE, framework, 4, checkpointing=True)
    chart = view.chart
    assert chart.phases == tuple(p.name for p in line.phases) and chart.peak == line.peak_index
    for i, phase in enumerate(line.phases):
        for kind in KINDS:
            assert chart.series.get(kind, [0] * len(line.phases))[i] == pytest.approx(
                float(phase.bytes_of(kind)) / 2**30, abs=1e-12
            )
    svg = plot_step(view)
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    assert titles == [f"{p.name}: {units.format_bytes(p.total, 'GiB')}" for p in line.phases]
    assert f"peak {units.format_bytes(line.peak.total, 'GiB')}: {line.peak.name}" in svg
    assert "GiB per rank" in svg and " GB" not in svg


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("framework", "deepspeed", "framework must be a Paper, DDP, DeepSpeed or FSDP2"),
        ("gpus", 0, "gpus must be a whole number from 1 to 1,000,000"),
        ("model", "gpt5", "model must be one of 7.5b, 7b, gpt2-xl"),
        ("recipe", "bf16-magic", "recipe"),
        ("checkpointing", 1, "checkpointing must be True or False"),
        ("unit", "XB", "unit must be one of"),
    ],
)
def test_settings_refuse_bad_fields(field, value, words):
    with pytest.raises((ValueError, TypeError), match=re.escape(words)):
        StepSettings(**{field: value})
    with pytest.raises(TypeError, match="a StepView"):
        plot_step("not a view")


def test_recomputing_on_a_knob_change_is_fast():
    """Median over 20 knob changes for the 7.5 B at stage 3, the slowest framework to replay.

    Timed as this process's CPU time, so that other jobs sharing the machine's cores do not count;
    the wall time inside a kernel, widget included, is measured as the README says.
    """
    sizes = [10**7 * k for k in range(1, 21)]
    times = []
    for size in sizes:
        settings = StepSettings(DeepSpeed(stage=3, prefetch_bucket_size=size))
        start = time.process_time()
        view = compute_step_view(settings)
        plot_step(view), peak_html(view)
        times.append(time.process_time() - start)
    assert isinstance(view, StepView)
    assert statistics.median(times) * 1000 <= TARGET_MS


def test_starts_on_the_article_at_stage_3():
    app = StepExplorer()
    assert app.view.settings == StepSettings() and app.status.value == ""
    assert "peak 49.132 GB per rank at backward block 32" in app.peak.value
    shown_matches_model(app)


def test_each_framework_shows_its_own_knobs_and_the_step_follows():
    app = StepExplorer()
    for name, kind, visible in [
        ("ddp", DDP(), {"bucket_cap_mb", "gradient_as_bucket_view"}),
        ("fsdp2", FSDP2(reshard_after_forward=True), {"reshard_after_forward"}),
        ("paper", Paper(stage=3), set()),
    ]:
        app.framework.value = name
        assert app.view.settings.framework == kind and app.status.value == ""
        assert {k for k, c in app.knobs.items() if c.layout.display != "none"} == visible
        assert app.stage.disabled == (name in ("ddp", "fsdp2"))
        shown_matches_model(app)


def test_knobs_move_the_view():
    app = StepExplorer()
    app.knobs["max_reuse_distance"].value = "0"
    assert app.view.settings.framework == DeepSpeed(stage=3, max_reuse_distance=0)
    app.stage.value = 2
    assert app.view.settings.framework == DeepSpeed(stage=2)  # stage 3's knobs hidden, not applied
    assert app.knobs["max_reuse_distance"].layout.display == "none"
    app.knobs["overlap_comm"].value = True
    app.knobs["reduce_bucket_size"].value = "2e8"
    assert app.view.settings.framework == DeepSpeed(stage=2, overlap_comm=True, reduce_bucket_size=2 * 10**8)
    app.checkpointing.value, app.gpus.value, app.model.value = True, "64", "gpt2-xl"
    assert (app.view.settings.checkpointing, app.view.settings.gpus, app.view.settings.model) == (
        True,
        64,
        "gpt2-xl",
    )
    shown_matches_model(app)


def test_a_bad_input_is_one_line_and_the_view_keeps_its_last_good_state():
    app = StepExplorer()
    before = (app.chart.value, app.peak.value, app.view)
    for control, value, words in [
        (app.knobs["reduce_bucket_size"], "0", "reduce_bucket_size must be a whole number from 1 to"),
        (app.knobs["prefetch_bucket_size"], "lots", "cannot read 'lots' as a count"),
        (app.gpus, "0", "gpus must be a whole number from 1 to 1,000,000"),
        (app.stage, 0, "stage must be 1, 2 or 3 for DeepSpeed"),
    ]:
        good = control.value
        control.value = value
        assert words in app.status.value and "last valid settings" in app.status.value
        assert (app.chart.value, app.peak.value, app.view) == before
        control.value = good
        assert app.status.value == ""


def test_starting_from_other_settings_sets_the_controls():
    settings = StepSettings(DDP(bucket_cap_mb=50, gradient_as_bucket_view=True), gpus=16, unit="GiB")
    app = StepExplorer(settings)
    assert app.view.settings == settings
    assert app.knobs["bucket_cap_mb"].value == "50" and app.knobs["gradient_as_bucket_view"].value is True
    app.framework.value = "fsdp2"  # its knob starts at FSDP2's own default: reshard after forward
    assert app.view.settings.framework == FSDP2(reshard_after_forward=True)
    with pytest.raises(TypeError, match="StepSettings"):
        StepExplorer("7.5b")
    with pytest.raises(
        ValueError, match="settings.recipe .the view offers the named recipes. must be one of"
    ):
        StepExplorer(StepSettings(recipe=recipes.custom(2, 2, 4)))


@pytest.mark.browser
def test_a_picture_of_the_view_at_stages_3_and_2(browser):
    """Chromium draws the chart and the peak's table; the pictures go to test-artifacts/ to be looked at."""
    need_chromium()
    from conftest import ROOT

    page = browser.new_page(viewport={"width": 800, "height": 700})
    for stage in (3, 2):
        view = compute_step_view(StepSettings(DeepSpeed(stage=stage)))
        page.set_content(f"<body style='font:12px sans-serif'>{plot_step(view)}{peak_html(view)}</body>")
        box = page.locator("svg.zero-step-chart").bounding_box()
        assert (box["width"], box["height"]) == (760, 330)
        assert page.locator("svg.zero-step-chart text.peak").text_content().startswith("peak ")
        page.screenshot(path=str(ROOT / "test-artifacts" / f"step_view_stage{stage}.png"), full_page=True)
    page.close()
