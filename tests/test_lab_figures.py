"""The lab's figures: the cuts they draw agree with the lab's own predictions (checked on real ranks in
tests/test_lab.py), and each renders; the PNGs land in test-artifacts/ for a person to look at."""

from math import prod
from pathlib import Path

import pytest

from zero_lessons.lab import modes, predict_deepspeed, predict_torch, report, runner
from zero_lessons.lab.model import MODEL
from zero_lessons.planning import ds_traffic
from zero_lessons.present import gather_figure, lab_figures

NAMES = ["W0", "b0", "W1", "b1", "W2", "b2"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_flat_slices_are_equal_and_pad_the_last_rank(gpus):
    spans = lab_figures.flat_slices(MODEL.sizes, gpus)
    per_rank = [sum(s.length for s in spans if s.rank == r) for r in range(gpus)]
    assert per_rank == [predict_deepspeed.slice_len(MODEL.param_count, gpus)] * gpus
    padding = sum(s.length for s in spans if s.padding)
    assert padding == predict_deepspeed.padded_flat(MODEL.param_count, gpus) - MODEL.param_count
    assert all(s.rank == gpus - 1 for s in spans if s.padding)


@pytest.mark.parametrize("gpus", [2, 4])
def test_zero3_pieces_match_the_lab_prediction(gpus):
    for n in MODEL.sizes:
        spans = lab_figures.zero3_pieces(n, gpus)
        assert sum(s.length for s in spans if not s.padding) == n
        assert {sum(s.length for s in spans if s.rank == r) for r in range(gpus)} == {
            predict_deepspeed.shard(n, gpus)
        }


def test_fsdp2_padding_is_uneven_by_rank_as_the_lab_measures():
    """On 4 ranks: 0, 0, 31 and 152 padding elements; 183 in all, not 45.75 on each rank."""
    padding = lab_figures.fsdp2_padding(MODEL.shapes, 4)
    assert padding == [0, 0, 31, 152] and sum(padding) == 183
    padded = sum(predict_torch.fsdp_padded(s, 4) for s in MODEL.shapes)
    real = [sum(predict_torch.chunk_rows(s[0], 4, r) * prod(s[1:]) for s in MODEL.shapes) for r in range(4)]
    assert [padded - n for n in real] == padding


@pytest.mark.parametrize("gpus", [2, 4])
def test_the_flat_buffer_numbers_the_slices_borders(gpus):
    ticks = list(lab_figures.plot_flat_buffer(MODEL.sizes, gpus, NAMES).axes[0].get_xticks())
    part = predict_deepspeed.slice_len(MODEL.param_count, gpus)
    assert ticks == [rank * part for rank in range(gpus + 1)]  # on 4 ranks: 0, 378, 756, 1,134, 1,512


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="gpus must be a whole number from 1 to 8, got 9"):
        lab_figures.plot_flat_buffer(MODEL.sizes, 9)
    with pytest.raises(ValueError, match="sizes must be a non-empty list"):
        lab_figures.zero3_pieces(0, 2)


def test_the_figures_render():
    ARTIFACTS.mkdir(exist_ok=True)
    figures = {
        "lab-flat-buffer.png": lab_figures.plot_flat_buffer(MODEL.sizes, 4, NAMES),
        "lab-zero3-pieces.png": lab_figures.plot_zero3_pieces(MODEL.sizes, 4, NAMES),
        "lab-fsdp2-chunks.png": lab_figures.plot_fsdp2_chunks(MODEL.shapes, 4, NAMES),
    }
    for name, fig in figures.items():
        assert len(fig.axes) == 1 and fig.axes[0].get_title()
        fig.savefig(ARTIFACTS / name, dpi=90)
        assert (ARTIFACTS / name).stat().st_size > 10_000


STAGE3 = ("ds_zero3", "ds_zero3_short_reuse", "ds_zero3_reuse0", "ds_zero3_no_reuse")


@pytest.mark.parametrize("key", STAGE3)
def test_the_gather_figure_holds_every_use_and_gathers_as_the_trace_says(key):
    """Each use falls inside one held stretch; a tensor's stretches are as many as the trace's "gathered"
    lines and its gathers in the predicted all-gathers, whose elements the lab's ranks match."""
    knobs = report.stage3_knobs(key)
    spans = gather_figure.holds(MODEL.layers, *knobs)
    order = ds_traffic.trace(MODEL.layers)
    for step, used in enumerate(order):
        for t in used:
            assert sum(1 for h in spans if h.tensor == t and h.gathered <= step <= h.released) == 1
    gathered = [
        NAMES.index(r[2]) for r in report.GatherTrace(key, tuple(NAMES)).grid()[1:] if r[3] == "gathered"
    ]
    flat = [t for g in ds_traffic.stage3_gathers(MODEL.layers, *knobs) for t in g]
    assert sorted(h.tensor for h in spans) == sorted(gathered) == sorted(flat)
    moved = sum(4 * predict_deepspeed.shard(MODEL.sizes[h.tensor], 4) for h in spans)
    expected = runner.predict(modes.get(key), 4, 0).traffic.elements["all_gather"]
    assert moved == expected


def test_the_gather_figure_shows_once_at_the_default_and_twice_without_reuse():
    twice = {}
    for key in STAGE3:
        tensors = [h.tensor for h in gather_figure.holds(MODEL.layers, *report.stage3_knobs(key))]
        twice[key] = sorted({t for t in tensors if tensors.count(t) == 2})
    assert twice == {
        "ds_zero3": [],
        "ds_zero3_short_reuse": [0, 1],  # L0
        "ds_zero3_reuse0": [0, 1, 2, 3],  # L0 and L1
        "ds_zero3_no_reuse": [0, 1, 2, 3, 4, 5],
    }
    labels = gather_figure.module_labels(MODEL.layers)
    assert labels == ["start", "L0", "act", "L1", "act", "L2", "loss", "L2", "act", "L1", "act", "L0"]
    with pytest.raises(ValueError, match="settings must name 1 or more settings and names 6 tensors"):
        gather_figure.plot_gathers(MODEL.layers, {}, NAMES)
    with pytest.raises(ValueError, match="names 6 tensors"):
        gather_figure.plot_gathers(MODEL.layers, {"x": (500, 1_000, 0)}, NAMES[:5])
    with pytest.raises(ValueError, match="key must name a stage 3 mode"):
        report.stage3_knobs("ds_zero2")


def test_the_gather_figure_renders():
    ARTIFACTS.mkdir(exist_ok=True)
    settings = {key: report.stage3_knobs(key) for key in STAGE3}
    fig = gather_figure.plot_gathers(MODEL.layers, settings, NAMES)
    assert len(fig.axes) == len(STAGE3) and all(ax.get_title(loc="left") for ax in fig.axes)
    fig.savefig(ARTIFACTS / "lab-stage3-gathers.png", dpi=90)
    assert (ARTIFACTS / "lab-stage3-gathers.png").stat().st_size > 10_000


def test_the_gather_figure_puts_each_marker_and_bar_start_on_its_module_tick():
    settings = {key: report.stage3_knobs(key) for key in STAGE3}
    fig = gather_figure.plot_gathers(MODEL.layers, settings, NAMES)
    ticks = list(fig.axes[-1].get_xticks())
    assert ticks == list(range(len(gather_figure.module_labels(MODEL.layers))))
    for ax, knobs in zip(fig.axes, settings.values(), strict=True):
        spans = gather_figure.holds(MODEL.layers, *knobs)
        markers = sorted(float(line.get_xdata()[0]) for line in ax.lines if line.get_marker() in ("v", "o"))
        starts = sorted(patch.get_x() for patch in ax.patches)
        assert markers == starts == sorted(float(h.gathered) for h in spans)
        assert all(m in ticks for m in markers)
        ends = sorted(patch.get_x() + patch.get_width() for patch in ax.patches)
        assert ends == sorted(h.released + 0.5 for h in spans)  # freed between a module and the next


def test_the_gather_figure_puts_the_loss_on_the_forward_side_of_its_divider():
    fig = gather_figure.plot_gathers(MODEL.layers, {"x": report.stage3_knobs("ds_zero3")}, NAMES)
    labels = gather_figure.module_labels(MODEL.layers)
    (divider,) = [line for line in fig.axes[0].lines if line.get_linestyle() == "--"]
    at = float(divider.get_xdata()[0])
    assert labels.index("loss") < at < labels.index("loss") + 1  # after the loss, before backward's L2
    assert all(labels[i] != "loss" for i in range(len(labels)) if i > at)


def test_the_forward_walk_at_max_reuse_distance_0_keeps_only_the_layer_whose_backward_use_it_passed():
    """Max reuse distance 0, live limit 1,000: the walk reaches a backward use (L1's) only after L0 and L1
    are released, so only L2 stays whole for backward; as the gather figure and the lab's ranks show."""
    walk = gather_figure.forward_walk(MODEL.layers, report.stage3_knobs("ds_zero3_reuse0"), NAMES)
    assert walk.grid() == [
        list(gather_figure.WALK_HEAD),
        ["start", "0", "500", "W0, b0, W1", "1,320", "L1 (forward)", "—"],
        ["L0", "1,320", "0", "—", "1,320", "L1 (forward)", "releases W0, b0"],
        ["act", "900", "100", "b1, W2", "1,080", "L2 (forward)", "—"],
        ["L1", "1,080", "0", "—", "1,080", "L2 (forward)", "releases W1, b1"],
        ["act", "150", "500", "b2, W1", "1,055", "L1 (backward)", "—"],
        ["L2", "1,055", "0", "—", "1,055", "L1 (backward)", "keeps W2, b2"],
    ]  # room = min(500, 1,000 − gathered), as lesson 11 writes it; after the prefetch, + its sizes
    whole = gather_figure.forward_walk(
        MODEL.layers, report.stage3_knobs("ds_zero3_reuse0"), NAMES, whole=True
    )
    assert whole.grid()[: len(walk.grid())] == walk.grid() and len(whole.rows) == 2 * len(walk.rows)
    backward = whole.grid()[len(walk.grid()) :]  # loss, then L2 back to L0: L0 and L1 gathered again
    assert [line[3] for line in backward] == ["—", "—", "b1, W0", "—", "b0", "—"]
    assert [line[6] for line in backward if line[0].startswith("L")] == [
        "releases W2, b2",
        "releases W1, b1",
        "releases W0, b0",
    ]
    held = [h.tensor for h in gather_figure.holds(MODEL.layers, *report.stage3_knobs("ds_zero3_reuse0"))]
    assert [NAMES[t] for t in range(6) if held.count(t) == 2] == ["W0", "b0", "W1", "b1"]  # the released
    assert walk._repr_markdown_().count("\n") == 7


def test_the_forward_walk_names_gathers_on_demand():
    walk = gather_figure.forward_walk(MODEL.layers, report.stage3_knobs("ds_zero3"), NAMES)
    assert [line[3] for line in walk.grid()[1:]] == [
        "W0, b0, W1",
        "—",
        "—",
        "on demand: b1",
        "—",
        "on demand: W2, b2",
    ]
    assert [line[6] for line in walk.grid()[1:] if line[0].startswith("L")] == [
        "keeps W0, b0",
        "keeps W1, b1",
        "keeps W2, b2",
    ]
    assert repr(walk).splitlines()[0].startswith("module  gathered  room")
