"""`present.step_zoom`: a step figure cut to a few columns, each total written on it, so that the loss
on top of the forward pass and the optimizer step's copies can be read at the 7.5 B model's size."""

from fractions import Fraction

import pytest

from conftest import cut_marks
from zero_lessons.lab import timeline_view
from zero_lessons.planning import DeepSpeed, timeline, transformer_model
from zero_lessons.planning.step_choices import MODELS
from zero_lessons.present.step_figure import Panel, plot_step
from zero_lessons.present.step_floor import rises
from zero_lessons.present.step_legend import BOUNDARIES
from zero_lessons.present.step_zoom import SPAN, drawn, floor, plot_zoom, tops, window

SHAPE = MODELS["7.5b"]
LOSS = timeline_view.at_size(SHAPE, timeline_view.CROSS_ENTROPY_COPIES)["loss"]
RUNS = {stage: timeline(transformer_model(SHAPE), DeepSpeed(stage=stage), 8) for stage in (1, 2, 3)}
PANELS = [Panel(f"ZeRO-{s}", t, model_loss=LOSS) for s, t in RUNS.items()]


def test_around_the_loss_the_totals_are_the_phases_and_the_loss_on_the_last_forward_bar():
    for panel, run in zip(PANELS, RUNS.values(), strict=True):
        shown = tops(panel)
        assert list(shown) == ["fwd block 31", "fwd block 32", "loss", "bwd block 32", "bwd block 31"]
        assert shown["loss"] == Fraction(run.phase("forward block 32").total + LOSS) / 10**9
        assert shown["bwd block 32"] == Fraction(run.phase("backward block 32").total) / 10**9
    stage1, stage2, _ = (tops(p) for p in PANELS)
    assert (
        stage1["bwd block 32"] > stage1["loss"] > stage2["bwd block 32"]
    )  # ZeRO-1 peaks one bar after the loss
    assert round(float(stage2["loss"]), 3) == 58.634


def test_at_the_end_the_zoom_shows_the_reduction_and_the_optimizer_step():
    shown = tops(PANELS[1], around="end")
    assert list(shown) == ["bwd embedding", "reduce", "before step", "step", "after step"]
    assert shown["step"] == Fraction(RUNS[2].phase("optimizer step").total) / 10**9
    assert len(window(PANELS[1], "end")) == 2 * SPAN + 1


def test_the_figure_shows_only_the_window_and_writes_each_total():
    fig = plot_zoom(PANELS, "GB", "title")
    for ax, panel in zip(fig.axes[: len(PANELS)], PANELS, strict=True):
        shown = window(panel)
        assert ax.get_xlim() == (shown[0] - 0.6, shown[-1] + 0.6)
        written = [t.get_text() for t in ax.texts if t.get_visible() and t.get_text()[:1].isdigit()]
        assert written == [f"{float(v):.2f}" for v in tops(panel).values()]
        low, high = ax.get_ylim()
        assert 0 < low < min(tops(panel).values()) and high > max(tops(panel).values())
        assert not any(line.get_visible() for line in ax.get_lines() if line.get_gid() == "peak bar")


def test_bad_input_gets_a_one_line_error():
    with pytest.raises(ValueError, match="around must be one of loss, end"):
        window(PANELS[0], "middle")
    with pytest.raises(ValueError, match="needs a panel with a loss column"):
        window(Panel("no loss", RUNS[2]))
    with pytest.raises(TypeError, match="panel must be"):
        tops("ZeRO-2")


def test_a_zoom_given_no_title_gets_one_so_the_legend_keeps_clear_of_the_panels():
    assert plot_zoom(PANELS[1:], "GB")._suptitle.get_text() == "Around the loss"
    assert plot_zoom(PANELS[1:], "GB", around="end")._suptitle.get_text() == "The step's end"


def test_a_zoom_legend_names_only_what_its_columns_draw():
    """Around the loss no optimizer-step copy and no boundary phase is drawn, so the legend leaves them out;
    at the step's end they are drawn, and named."""
    kinds, boundaries = drawn(PANELS[1:])
    assert "fp32 gradients" not in kinds and "optimizer temporaries" not in kinds and not boundaries
    assert {"activations", "gathered parameters", "gradient buckets", "unreduced gradients"} <= kinds
    names = [t.get_text() for t in plot_zoom(PANELS[1:], "GB").legends[0].get_texts()]
    assert "fp32 gradients" not in names and BOUNDARIES not in names
    assert "gathered parameters" in names and "the loss, after the forward pass" in names
    end_kinds, end_boundaries = drawn(PANELS[1:], around="end")
    assert {"fp32 gradients", "optimizer temporaries"} <= end_kinds and end_boundaries
    ends = [t.get_text() for t in plot_zoom(PANELS[1:], "GB", around="end").legends[0].get_texts()]
    assert "fp32 gradients" in ends and BOUNDARIES in ends
    assert "the loss, after the forward pass" not in ends  # the step's end shows no loss column


def test_a_zoom_legend_names_what_lies_wholly_below_its_cut_axis_as_under_the_cut():
    """At the 7.5 B size the model state fills the bars' bottom, far under the cut: its kinds draw nothing the
    reader sees, yet the bars stand on them, so the legend names them "(under the cut)", as the full figure
    does with a floor (a reader took the whole visible bar for activations); a kind that reaches above the cut
    keeps its plain name."""
    kinds, _ = drawn(PANELS[1:])
    assert not {"weights", "gradients", "optimizer"} & kinds
    fig = plot_zoom(PANELS[1:], "GB")
    for ax, panel in zip(fig.axes, PANELS[1:], strict=True):
        assert ax.get_ylim()[0] == floor(panel)
        heights = panel.heights("GB")
        i = panel.timeline.after_forward_index
        below = sum(row[i] for kind, row in heights.items() if kind in ("weights", "gradients", "optimizer"))
        assert below < floor(
            panel
        )  # the model state's top lies under the axis: its kinds are named as under the cut
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "activations" in names and "weights" not in names
    assert {"weights (under the cut)", "optimizer state (under the cut)"} <= set(names)
    assert "gradients (under the cut)" in names  # stage 3 holds its gradient partition from start-up
    alone = [t.get_text() for t in plot_zoom([PANELS[1]], "GB").legends[0].get_texts()]
    assert "weights (under the cut)" in alone
    assert "gradients (under the cut)" not in alone  # stage 2's partition comes later: these columns lack it


def test_a_rise_below_the_cut_axis_is_drawn_on_top_of_its_bars():
    """A small reduce bucket brings stage 2's gradient partition into block 32's backward pass. In its place,
    the bar's bottom, it would grow under the cut and the activations above it would seem to grow; the zoom
    draws it on top of the bars instead, the legend says so, and nothing is left to write at a bar's foot."""
    knobs = DeepSpeed(stage=2, reduce_bucket_size=50_000_000)
    small = Panel("5e7", timeline(transformer_model(SHAPE), knobs, 8), model_loss=LOSS)
    partition = Fraction(2 * transformer_model(SHAPE).params // 8) / 10**9
    line = small.timeline
    order = [
        line.phases.index(line.phase(n))
        for n in ("forward block 32", "backward block 32", "backward block 31")
    ]
    assert rises(small, "GB", floor(small), order) == {order[1]: (partition, ("gradients",))}
    assert (
        rises(PANELS[1], "GB", floor(PANELS[1]), order) == {}
    )  # by default the partition arrives at block 30
    fig = plot_zoom([small], "GB")
    x = small.columns()[0][order[1]]
    (top,) = [
        p for p in fig.axes[0].patches if p.get_gid() == "gradients" and abs(p.get_x() + 0.36 - x) < 1e-9
    ]
    assert abs(top.get_height() - float(partition)) < 1e-9
    assert abs(top.get_y() + top.get_height() - float(line.phases[order[1]].total) / 10**9) < 1e-9  # the top
    assert not [t for t in fig.axes[0].texts if "below the axis" in t.get_text()]
    assert "gradients (drawn on top)" in [t.get_text() for t in fig.legends[0].get_texts()]
    plain = plot_zoom([PANELS[1]], "GB")  # nothing grows under its cut: nothing lifted, no "(drawn on top)"
    assert not any("on top" in t.get_text() for t in plain.legends[0].get_texts())


def test_a_zoom_titles_its_peaks_to_two_decimals_and_its_legend_draws_no_triangle():
    """A zoom writes its totals to two decimals and hides the peak's triangle: its titles give the peak as the
    totals do, and the legend's peak entry is the dashed line alone. The full figure keeps the triangle, and
    titles its peak as the tables write the unit: two decimals in GB, one in kB."""
    knobs = DeepSpeed(stage=2, overlap_comm=True)
    panel = Panel("overlap", timeline(transformer_model(SHAPE), knobs, 8), model_loss=LOSS)
    zoom, full = plot_zoom([panel], "GB"), plot_step([panel], "GB")
    peak = float(panel.peak[0]) / 10**9
    assert zoom.axes[0].get_title(loc="right").startswith(f"peak (loss counted) {peak:.2f} GB at ")
    assert (
        full.axes[0].get_title(loc="right").startswith(f"peak (loss counted) {peak:.2f} GB at ")
    )  # as in GB
    in_kb = plot_step([Panel("kB", timeline(transformer_model(SHAPE), knobs, 8))], "kB").axes[0]
    assert in_kb.get_title(loc="right").split(" kB at ")[0].split(".")[-1].isdigit()
    assert len(in_kb.get_title(loc="right").split(" kB at ")[0].split(".")[-1]) == 1  # one decimal in kB
    markers = [
        [
            h.get_marker()
            for h in fig.legends[0].legend_handles
            if getattr(h, "get_color", lambda: "")() == "crimson"
        ]
        for fig in (zoom, full)
    ]
    assert markers == [[""], ["v"]]


def test_on_one_scale_a_part_that_differs_unseen_between_panels_is_drawn_on_top():
    """Lesson 17's stage-3 knobs on one scale: a persistence threshold of 2 × 10⁷ keeps 1.21 GB more weights
    whole, all under the cut; drawn in place they would lift the activations above them, so with same_floor
    the weights go on top of every panel's bars. Without same_floor, or where a kind shows above the cut in
    some panel (ZeRO-1's weights at the step's end), nothing is moved for it."""
    gpt = transformer_model(SHAPE)
    kept = DeepSpeed(stage=3, param_persistence_threshold=2 * 10**7)
    pair = [
        Panel(n, timeline(gpt, fw, 8), model_loss=LOSS) for n, fw in (("d", DeepSpeed(stage=3)), ("p", kept))
    ]
    on_one = plot_zoom(pair, "GB", same_floor=True)
    tops_of = {
        n: max(p.get_y() + p.get_height() for p in ax.patches if p.get_gid() == "weights")
        for n, ax in zip("dp", on_one.axes[:2], strict=True)
    }
    highest = {
        n: max(float(v) for k, v in tops(panel).items() if k != "loss")
        for n, panel in zip("dp", pair, strict=True)
    }
    assert all(abs(tops_of[n] - highest[n]) < 1e-6 for n in "dp")  # the weights end each bar, at its top
    assert "weights (drawn on top)" in [t.get_text() for t in on_one.legends[0].get_texts()]
    assert "weights (drawn on top)" not in [
        t.get_text() for t in plot_zoom(pair, "GB").legends[0].get_texts()
    ]
    stages = plot_zoom(PANELS, "GB", around="end", same_floor=True)
    assert not any("on top" in t.get_text() for t in stages.legends[0].get_texts())


def test_same_floor_starts_every_panel_at_the_lowest_floor():
    """Lesson 14's step's end: with one floor, equal bars (ZeRO-1's and ZeRO-2's 28.10 GB before the step)
    look equal across panels; without it each panel cuts at its own height."""
    own = [ax.get_ylim()[0] for ax in plot_zoom(PANELS, "GB", around="end").axes[: len(PANELS)]]
    same = [
        ax.get_ylim()[0] for ax in plot_zoom(PANELS, "GB", around="end", same_floor=True).axes[: len(PANELS)]
    ]
    assert len(set(own)) > 1 and same == [min(own)] * len(PANELS)
    tops = [
        ax.get_ylim()[1] for ax in plot_zoom(PANELS, "GB", around="end", same_floor=True).axes[: len(PANELS)]
    ]
    assert len(set(tops)) == 1  # and one top: one scale, so equal bars look equal
    assert own == [floor(p, around="end") for p in PANELS]
    zoomed = plot_zoom(PANELS, "GB", around="end").axes[: len(PANELS)]
    assert [cut_marks(ax) for ax in zoomed] == [2] * len(PANELS)  # every cut axis marked as cut
    with pytest.raises(TypeError, match="same_floor must be True or False"):
        plot_zoom(PANELS, "GB", same_floor="yes")


@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_grey_bands_legend_names_every_boundary_the_step_model_marks(checkpointing):
    """The legend says the grey bands are the start and the moments before and after the step: those must be
    the only boundary phases, and none may hold activations."""
    gpt = transformer_model(MODELS["7.5b"])
    for fw in (DeepSpeed(stage=1), DeepSpeed(stage=2), DeepSpeed(stage=3)):
        phases = timeline(gpt, fw, 8, checkpointing=checkpointing).phases
        grey = [p for p in phases if p.kind == "boundary"]
        assert [p.name for p in grey] == ["start of step", "before optimizer step", "after optimizer step"]
        assert all(p.bytes_of("activations") == 0 for p in grey)
        assert phases.index(grey[1]) + 2 == phases.index(grey[2]) == len(phases) - 1  # around the step
    assert "before and after the step" in BOUNDARIES and "start" in BOUNDARIES
