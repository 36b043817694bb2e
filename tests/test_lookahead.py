"""`planning.ds_lookahead` and its figure: why stage 3 holds each weight matrix as the loss runs, checked
against `ds_traffic`'s walk by other routes (gather counts with and without prefetching, the held sets)."""

from collections import Counter

import matplotlib.colors
import pytest
from matplotlib.figure import Figure

from zero_lessons.planning import DeepSpeed, ds_lookahead, ds_scale, ds_traffic
from zero_lessons.present.lookahead_figure import GAP, MARK_COLOUR, WHY_COLOURS, WHY_NAMES, plot_lookahead
from zero_lessons.run import stage3_plan
from zero_lessons.run.example import SHAPE

H = SHAPE.hidden
QKV, PROJ, MLP = 3 * H * H, H * H, 4 * H * H
SIZES = (QKV, PROJ, MLP, MLP)  #: a block's four weight matrices, in forward order
BIG = tuple(tuple(n for n in m if n > 100_000) for m in stage3_plan.modules())  #: what stage 3 gathers


def _times(prefetch: int, knobs: ds_scale.Knobs) -> Counter:
    """How often each tensor of `BIG` is all-gathered in a step, prefetching `prefetch` elements ahead."""
    gathers = ds_traffic.stage3_gathers(BIG, prefetch, knobs.max_live_parameters, knobs.max_reuse_distance)
    return Counter(i for g in gathers for i in g)


@pytest.mark.parametrize(
    "knobs",
    [ds_scale.Knobs(), ds_scale.Knobs(max_reuse_distance=0), ds_scale.Knobs(max_live_parameters=2 * 10**9)],
)
def test_each_reason_matches_how_often_the_matrix_is_gathered_with_and_without_prefetching(knobs):
    look = ds_lookahead.lookahead(stage3_plan.modules(), knobs, first=1 + 6 * 24)
    with_prefetch, without = _times(knobs.prefetch_bucket_size, knobs), _times(0, knobs)
    held = ds_traffic.stage3_held(
        BIG, knobs.prefetch_bucket_size, knobs.max_live_parameters, knobs.max_reuse_distance
    )
    for m in look.matrices:
        kept = {"reuse distance": (1, 1), "walk": (1, 2)}.get(m.why, (2, 2))
        assert (with_prefetch[m.tensor], without[m.tensor]) == kept, m
        assert (m.tensor in held[look.loss]) == (m.why != "not held")
    assert look.totals[look.loss] == ds_scale.gathered_at_loss(knobs=knobs)


def test_the_held_stretches_are_the_walks_held_sets():
    look = ds_lookahead.lookahead(stage3_plan.modules(), first=1 + 6 * 27)
    held = ds_traffic.stage3_held(BIG, 50_000_000, 10**9, 10**9)
    for m in look.matrices:
        drawn = {p for start, end in m.held for p in range(start, end + 1)}
        assert drawn == {p for p, h in enumerate(held) if m.tensor in h}
        assert m.forward in drawn and m.backward in drawn


def test_at_the_defaults_blocks_30_to_32_are_kept_by_distance_29_by_the_look_ahead_28s_fc1_fetched_back():
    look = stage3_plan.lookahead()
    why = [m.why for m in look.matrices]
    assert why == ["not held"] * 2 + ["fetched back"] + ["walk"] * 8 + ["reuse distance"] * 9
    assert look.at_loss("reuse distance") == 2 * sum(SIZES) + MLP  # blocks 31, 32 and block 30's fc2
    assert look.at_loss("walk") == sum(SIZES) + QKV + PROJ + 2 * MLP  # block 29, 30's first three, 28's fc2
    assert look.at_loss("fetched back") == MLP  # block 28's fc1
    assert look.at_loss() == look.totals[look.loss] == 1_060_634_624
    fc1 = look.matrices[2]
    assert fc1.reach < fc1.backward and fc1.horizon < fc1.backward  # so it is freed after its forward use...
    assert len(fc1.held) == 2 and fc1.held[1][0] < look.loss  # ...and prefetched back before the loss


def test_the_output_layer_as_a_module_moves_the_turn_one_matrix_on():
    look = stage3_plan.lookahead(head=True)
    assert look.name(look.matrices[-1].module) == "output layer" and look.matrices[-1].why == "reuse distance"
    assert look.at_loss() == look.totals[look.loss] == 1_052_074_240
    assert [m.why for m in look.matrices].count("fetched back") == 1 and look.matrices[
        6
    ].why == "fetched back"


def test_without_a_reuse_distance_or_a_look_ahead_nothing_is_kept_for_that_reason():
    assert "reuse distance" not in {
        m.why for m in stage3_plan.lookahead(DeepSpeed(stage=3, max_reuse_distance=0)).matrices
    }
    no_prefetch = stage3_plan.lookahead(DeepSpeed(stage=3, prefetch_bucket_size=0))
    assert {m.why for m in no_prefetch.matrices} == {"reuse distance", "not held"}
    assert all(m.reach < m.forward for m in no_prefetch.matrices)  # the walk never moved


def test_gpt_names_count_blocks_from_one_and_name_the_output_layer():
    names = ds_lookahead.gpt_names(32)
    assert names[0] == "embedding" and names[1 + 6 * 27 + 4] == "28 fc1" and names[6 * 32] == "32 fc2"
    assert names[1 + 6 * 32] == "output layer" and len(names) == 2 + 6 * 32


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ds_lookahead.lookahead(first=10**6), "first must be"),
        (lambda: stage3_plan.lookahead().at_loss("kept"), "why must be"),
        (lambda: stage3_plan.lookahead(blocks=0), "blocks must be"),
        (lambda: ds_lookahead.gpt_names(0), "blocks must be"),
        (lambda: plot_lookahead("look"), "look must be"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(call, message):
    with pytest.raises((TypeError, ValueError)) as raised:
        call()
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_label_dips_names_each_fall_before_the_loss_with_the_count_it_falls_to():
    """Lesson 17's strip: block 28's QKV freed (1,004 M), then its projection and its fc1 (985 M each)."""
    look = stage3_plan.lookahead()
    texts = [t.get_text() for t in plot_lookahead(look, label_dips=True).axes[0].texts]
    assert texts[:3] == ["1,004", "985", "985"] and texts[3] == "1,061 M as the loss runs"
    falls = [p for p in range(1, look.loss) if look.starts[p] < look.totals[p - 1]]
    assert [f"{look.starts[p] / 1e6:,.0f}" for p in falls[-3:]] == texts[:3]  # the drawn ones, from block 28
    with pytest.raises(TypeError, match="label_dips"):
        plot_lookahead(look, label_dips="yes")


def test_the_figure_draws_a_row_per_matrix_a_bar_per_held_stretch_coloured_by_why():
    look = stage3_plan.lookahead()
    fig = plot_lookahead(look)
    assert isinstance(fig, Figure)
    rows = fig.axes[1]
    labels = [t.get_text() for t in rows.get_yticklabels()]
    assert labels == [look.name(m.module) for m in reversed(look.matrices)] and labels[-1] == "28 qkv"
    columns = [t.get_text() for t in rows.get_xticklabels()]
    assert columns.count("the loss") == 1 and len(columns) == 2 * len(look.matrices) + 1
    for why, colour in WHY_COLOURS.items():
        bars = [p for p in rows.patches if matplotlib.colors.to_hex(p.get_facecolor()) == colour]
        assert len(bars) == sum(len(m.held) for m in look.matrices if m.why == why), why
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert [n for n in WHY_NAMES.values() if n in legend] == list(WHY_NAMES.values())
    fetched = [
        p for p in rows.patches if matplotlib.colors.to_hex(p.get_facecolor()) == WHY_COLOURS["fetched back"]
    ]
    first, again = sorted(
        fetched, key=lambda p: p.get_x()
    )  # block 28's fc1: freed, then fetched straight back
    gap = again.get_x() - (first.get_x() + first.get_width())
    assert GAP - 1e-9 <= gap < 1  # a gap that shows (to float rounding), within one column
    text = [t.get_text() for t in fig.axes[0].texts]
    assert text == ["1,061 M as the loss runs", "y axis cut: it starts at 700 M"]
    strip = fig.axes[0]
    assert strip.get_ylim()[0] == 700 and min(strip.lines[0].get_ydata()) > 700  # every count above the cut
    assert (
        round(min(strip.lines[0].get_ydata()[:40])) == 985
    )  # block 28's forward pass: the dips the cut shows


def test_on_a_small_model_every_place_is_a_column_tensors_are_named_weight_and_bias_and_counts_are_whole():
    modules = [(1024, 32)] * 4  # lesson 13's lab walk: four Linears, every tensor gathered
    knobs = ds_scale.Knobs(prefetch_bucket_size=1200, max_live_parameters=3600, max_reuse_distance=1200)
    names = {i: f"linear {i + 1}" for i in range(4)}
    look = ds_lookahead.lookahead(modules, knobs, threshold=0, names=names)
    assert [m.why for m in look.matrices] == ["fetched back", "not held"] + ["walk"] * 4 + [
        "reuse distance"
    ] * 2
    assert (look.starts[2], look.totals[2]) == (
        3_136,
        3_136 + 32 + 1024,
    )  # ReLU 1: linear 4's bias, 1's weight
    fig = plot_lookahead(look, every_place=True, between=["relu 1", "relu 2", "relu 3"])
    strip = fig.axes[0].lines[0].get_ydata()
    assert list(strip[8:12]) == [
        3_136,
        3_136,
        4_192,
        4_192,
    ]  # ReLU 1's column: as it starts, after its prefetch
    rows = fig.axes[1]
    assert [t.get_text() for t in rows.get_yticklabels()][-2:] == ["linear 1 bias", "linear 1 weight"]
    columns = [t.get_text() for t in rows.get_xticklabels()]
    assert len(columns) == look.matrices[0].backward + 1 and columns[:3] == ["start", "linear 1", "relu 1"]
    assert columns[-2:] == ["bwd relu 1", "bwd linear 1"] and columns.count("·") == 0
    loss = columns.index("the loss")  # every name after it is the backward pass's, and says so
    assert all(c.startswith("bwd ") for c in columns[loss + 1 :]) and not any(
        "bwd" in c for c in columns[:loss]
    )
    assert "·" not in rows.get_xlabel() and "·" in plot_lookahead(look, every_place=True).axes[1].get_xlabel()
    assert [t.get_text() for t in fig.axes[0].texts] == ["4,192 as the loss runs"]
    with pytest.raises(TypeError, match="every_place must be"):
        plot_lookahead(look, every_place="yes")


def test_mark_shades_the_first_column_of_that_name_on_both_panels_and_names_it():
    """Lesson 13 marks the lab's peak, at the forward pass's ReLU 3 (the backward pass has a "relu 3" too)."""
    knobs = ds_scale.Knobs(prefetch_bucket_size=1200, max_live_parameters=3600, max_reuse_distance=1200)
    look = ds_lookahead.lookahead([(1024, 32)] * 4, knobs, threshold=0)
    between = ["relu 1", "relu 2", "relu 3"]
    fig = plot_lookahead(look, every_place=True, between=between, mark="relu 3")
    columns = [t.get_text() for t in fig.axes[1].get_xticklabels()]
    first = columns.index("relu 3")
    assert columns.count("relu 3") == columns.count("bwd relu 3") == 1 and first < columns.index("the loss")
    for axis in fig.axes:
        shaded = [p for p in axis.patches if matplotlib.colors.to_hex(p.get_facecolor()) == MARK_COLOUR]
        assert len(shaded) == 1
        left, width = shaded[0].get_x(), shaded[0].get_width()
        assert left < first < left + width and width < 1
    assert "relu 3 here" in [t.get_text() for t in fig.axes[0].texts]
    unmarked = plot_lookahead(look, every_place=True, between=between)
    assert not [
        p
        for a in unmarked.axes
        for p in a.patches
        if matplotlib.colors.to_hex(p.get_facecolor()) == MARK_COLOUR
    ]
    with pytest.raises(ValueError, match="mark must be one of") as raised:
        plot_lookahead(look, every_place=True, between=between, mark="relu 9")
    assert "\n" not in str(raised.value)


def test_at_threshold_0_the_weights_turn_as_at_the_default_and_rows_can_leave_out_small_tensors():
    """Lesson 11's setting: every tensor gathered; the rows keep the weight matrices, the strip counts all."""
    kwargs = {"threshold": 0, "first": 1 + 6 * 27, "names": ds_lookahead.gpt_names(32, start=0)}
    every = ds_lookahead.lookahead(ds_scale.gpt_modules(), **kwargs)
    weights = ds_lookahead.lookahead(ds_scale.gpt_modules(), **kwargs, smallest=100_000)
    assert weights.totals == every.totals and len(every.matrices) == 5 * 12 and len(weights.matrices) == 20
    assert [m.why for m in weights.matrices] == [m.why for m in stage3_plan.lookahead().matrices]
    assert weights.name(weights.matrices[0].module) == "27 qkv"  # blocks counted from 0
    assert [
        m.why for m in every.matrices if m.why != next(n.why for n in every.matrices if n.module == m.module)
    ] == ["not held"]  # one bias parts from its weight: block 27's fc1 bias (blocks from 0)
    with pytest.raises(ValueError, match="start must be"):
        ds_lookahead.gpt_names(32, start=2)
