"""The communication figures show what the package computes: the ring's steps and chunks, each plan."""

from fractions import Fraction

import numpy as np
import pytest

from zero_lessons import communication, simulate
from zero_lessons.present import collectives
from zero_lessons.stages import Stage


def _texts(fig) -> list[str]:
    """Every piece of text drawn in a figure: titles, cell labels, tick labels."""
    out = [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]
    return [t for t in out if t]


@pytest.mark.parametrize("gpus", [2, 3, 4, 8])
def test_ring_panels_are_the_start_then_two_n_minus_one_steps(gpus):
    panels = collectives.ring_panels(gpus)
    assert len(panels) == 1 + 2 * (gpus - 1) == 1 + len(communication.ring_steps(gpus))
    assert all(count == 1 for row in panels[0].counts for count in row)
    assert all(len(p.arrived) == gpus for p in panels[1:])  # every rank receives one chunk per step
    finished = panels[gpus - 1].counts  # after the reduce-scatter: one full chunk per rank
    assert [row.count(gpus) for row in finished] == [1] * gpus
    assert all(count == gpus for row in panels[-1].counts for count in row)


def test_ring_panel_counts_grow_by_what_arrives():
    # In a reduce-scatter step a received chunk sums the sender's ranks and the receiver's own.
    panels = collectives.ring_panels(4)
    for before, after in zip(panels[:3], panels[1:4], strict=True):
        for rank, chunk in after.arrived:
            sender = (rank - 1) % 4
            assert after.counts[rank][chunk] == before.counts[sender][chunk] + before.counts[rank][chunk]


def test_ring_figure_draws_every_panel_and_the_chunk_size():
    params, gpus = 12, 4
    fig = collectives.plot_ring_all_reduce(gpus, params)
    grids = [ax for ax in fig.axes if ax.patches]
    assert len(grids) == 2 * (gpus - 1) + 1
    assert all(len(ax.patches) == gpus * gpus for ax in grids)
    texts = _texts(fig)
    sent = simulate.ring_all_reduce([np.ones(params)] * gpus)[1]
    per_step = Fraction(sent, 2 * (gpus - 1))
    assert per_step == Fraction(params, gpus) == 3
    assert any(f"{2 * (gpus - 1)} steps" in t and f"Ψ/N = {per_step} elements" in t for t in texts)
    assert sum(t == "reduce-scatter 3 of 3" for t in texts) == 1


def test_ring_figure_refuses_what_it_cannot_draw():
    with pytest.raises(ValueError, match="gpus must be"):
        collectives.plot_ring_all_reduce(collectives.MAX_DRAWN_RANKS + 1)
    with pytest.raises(ValueError, match="gpus must be"):
        collectives.ring_panels(1)


def test_timeline_rows_follow_the_plans():
    rows = collectives.timeline_rows()
    assert len(rows) == len(Stage) + 2
    for row, stage in zip(rows, Stage, strict=False):
        plan = communication.collectives(stage)
        assert sum(row.by_phase.values(), ()) == plan
        assert row.multiple * 10**9 == communication.volume_elements(10**9, 8, stage)
    assert [r.multiple for r in rows] == [2, 2, 2, 3, 3, 2]
    assert len(collectives.timeline_rows(deepspeed=False)) == len(Stage)


def test_timeline_figure_labels_each_collective_and_total():
    fig = collectives.plot_collective_timeline()
    texts = _texts(fig)
    boxes = sum(len(c) for row in collectives.timeline_rows() for c in row.by_phase.values())
    assert sum(t.split("\n")[0] in collectives.OP_COLOURS for t in texts) == boxes == 1 + 2 + 2 + 3 + 2 + 2
    assert [t for t in texts if t.endswith("Ψ") and "\n" not in t] == ["2Ψ", "2Ψ", "2Ψ", "3Ψ", "3Ψ", "2Ψ"]


def test_plan_table_wraps_in_a_narrow_page():
    table = collectives.plan_table()
    markdown = table._repr_markdown_()
    assert markdown.count("\n") == 1 + len(Stage)  # header, rule, one line per stage
    assert "reduce-scatter of gradients (end of backward)" in markdown
    assert table._repr_html_().count("<tr>") == 1 + len(Stage)
    assert "DeepSpeed" in collectives.plan_table(deepspeed=True)._repr_markdown_()
