"""Stage 3's prefetch walk, step by step: the coordinator's record of each step, and lesson 09's table."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from test_step import LAB_LAYERS, LAB_Z3
from zero_lessons.planning.step import Layer, Model
from zero_lessons.planning.step_coordinator import replay, trace_order, walk
from zero_lessons.planning.step_knobs import DeepSpeed
from zero_lessons.present.walk_tables import held_table, walk_table

LAB = Model("lab MLP", LAB_LAYERS)


def test_the_lab_walk_follows_deepspeeds_rule_worked_by_hand():
    # Worked from the rule: walk the recorded trace (forward, then backward in reverse), adding tensors not
    # yet gathered until the walk has added at least its room, min(prefetch_bucket_size, max_live_parameters
    # minus what is gathered); tensors already gathered are passed at no cost.
    root, linear1, relu1, linear2 = walk(LAB, LAB_Z3)[:4]
    assert (root.budget, root.prefetched, root.live) == (1200, ((0, 1024), (0, 32), (2, 1024)), 2080)
    assert linear1.prefetched == ((2, 32), (4, 1024), (4, 32), (6, 1024)) and linear1.live == 4192
    assert linear1.released == ((0, 1024), (0, 32))  # 4,192 - 1,056 = 3,136 gathered when relu 1 starts
    assert relu1.budget == 3600 - 3136 == 464
    assert relu1.prefetched == ((6, 32), (0, 1024))  # 32 < 464 walks on; 1,056 >= 464 stops it
    assert [(layer, step) for layer, _, step in relu1.passed] == [
        (6, 9),
        (6, 9),
        (4, 11),
        (4, 11),
        (2, 13),
        (2, 13),
    ]
    assert relu1.live == 4192 > LAB_Z3.max_live_parameters  # the limit stops the walk; it frees nothing
    assert linear2.budget < 0 and not linear2.prefetched and not linear2.released  # kept: use passed


def test_the_walk_and_the_snapshots_count_the_same_gathered_elements():
    steps, _ = replay(LAB, LAB_Z3)
    visits = [v for v in walk(LAB, LAB_Z3) if v.layer < len(LAB.layers)]
    assert [s.layer for s in steps] == [v.layer for v in visits]
    assert [s.own + s.prefetched + s.kept for s in steps] == [v.live for v in visits]


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.lists(st.integers(1, 400), max_size=3), min_size=1, max_size=6),
    bucket=st.integers(0, 800),
    live=st.integers(1, 1500),
    reuse=st.integers(0, 1500),
)
def test_every_step_adds_up(sizes, bucket, live, reuse):
    layers = [(1,), *sizes]  # at least one parameter
    model = Model("m", tuple(Layer(f"layer {i}", tuple(t)) for i, t in enumerate(layers)))
    fw = DeepSpeed(
        stage=3,
        prefetch_bucket_size=bucket,
        max_live_parameters=live,
        max_reuse_distance=reuse,
        param_persistence_threshold=0,
    )
    visits = walk(model, fw)
    assert [v.step for v in visits] == list(range(len(trace_order(model))))
    held = 0
    for v in visits:
        added = sum(e for _, e in v.fetched + v.prefetched)
        assert v.live == held + added
        assert not v.prefetched or (
            v.budget > 0 and sum(e for _, e in v.prefetched) - v.prefetched[-1][1] < v.budget
        )
        held = v.live - sum(e for _, e in v.released)
    assert held == 0  # every gathered tensor is released by the end of backward


def test_the_table_shows_the_walk_that_gathers_linear_4s_bias_with_linear_1s_weight():
    table = walk_table(LAB, LAB_Z3, steps=7)
    assert len(table.body) == 7 and table.head[5] == "gathered (max_live_parameters = 3,600)"
    relu1 = dict(zip(table.head, table.body[2], strict=True))
    assert relu1["step"] == "fwd relu 1" and relu1["walk's room"] == "3,600 − 3,136 = 464"
    assert relu1["walk gathers (one all-gather)"] == "linear 4 (32), linear 1 (1,024) = 1,056"
    assert relu1["walk passes"] == "bwd linear 4, bwd linear 3, bwd linear 2"
    assert table.body[3][-1] == "kept: the walk passed its backward use"
    assert table.body[1][-1] == "freed" and table.body[0][2] == "1,200 (prefetch_bucket_size)"
    assert "| fwd relu 1 |" in table._repr_markdown_()


def test_the_table_refuses_bad_input_by_name():
    with pytest.raises(TypeError, match="fw"):
        walk_table(LAB, "stage 3")
    with pytest.raises(TypeError, match="model"):
        walk_table("lab", LAB_Z3)
    with pytest.raises(ValueError, match="steps"):
        walk_table(LAB, LAB_Z3, steps=0)


def test_at_relu_3_the_held_table_names_each_tensors_roles_as_worked_by_hand():
    # Worked from the walk table: linear 1's walk brought linear 2's bias, linear 3 and linear 4's weight
    # in one buffer, alive until linear 4's weight is used; relu 1's walk brought linear 4's bias and
    # linear 1's weight, not yet waited on. Linear 2 and 3 are kept (the walk passed their backward use);
    # linear 2's weight came in the root module's buffer, freed once linear 2 used it.
    table = held_table(LAB, LAB_Z3, "relu 3")
    rows = [(r[0], r[1], r[2], r[3], r[4]) for r in table.body]
    assert rows == [
        ("linear 1", "1,024", "—", "relu 1's walk", "1,024"),
        ("linear 2", "1,024", "kept for reuse", "—", "1,024"),
        ("linear 2", "32", "kept for reuse", "linear 1's walk", "64"),
        ("linear 3", "1,024", "kept for reuse", "linear 1's walk", "2,048"),
        ("linear 3", "32", "kept for reuse", "linear 1's walk", "64"),
        ("linear 4", "1,024", "prefetched, copied out", "linear 1's walk", "2,048"),
        ("linear 4", "32", "—", "relu 1's walk", "32"),
        ("total", "4,192", "", "", "6,304"),
    ]


@pytest.mark.parametrize("at", ["linear 1", "relu 2", "linear 3", "relu 3", "linear 4"])
def test_the_held_table_adds_up_to_the_snapshots_copies_and_buffers(at):
    index = [layer.name for layer in LAB.layers].index(at)
    snap = replay(LAB, LAB_Z3)[0][index]
    table = held_table(LAB, LAB_Z3, at)
    copies = sum(int(r[1].replace(",", "")) for r in table.body[:-1] if r[2] != "—")
    buffers = sum(int(r[1].replace(",", "")) for r in table.body[:-1] if r[3] != "—")
    assert copies == snap.own + snap.prefetched + snap.kept - snap.in_flight
    assert buffers <= snap.flat and table.body[-1][-1] == f"{copies + buffers:,}"


def test_the_held_table_refuses_bad_input_by_name():
    with pytest.raises(ValueError, match="at must name one of the model's layers"):
        held_table(LAB, LAB_Z3, "relu 9")
    with pytest.raises(TypeError, match="fw"):
        held_table(LAB, "stage 3", "relu 3")
