"""Stage 3's prefetch walk, step by step: the coordinator's record of each step."""

from hypothesis import given, settings
from hypothesis import strategies as st

from test_step import LAB_LAYERS, LAB_Z3
from zero_lessons.planning.step import Layer, Model
from zero_lessons.planning.step_coordinator import replay, trace_order, walk
from zero_lessons.planning.step_knobs import DeepSpeed

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


#: Hypothesis strategies for stage 3's gather knobs, in elements.
KNOBS = {"bucket": st.integers(0, 800), "live": st.integers(1, 1500), "reuse": st.integers(0, 1500)}


def _sharded_stage3(bucket: int, live: int, reuse: int) -> DeepSpeed:
    """DeepSpeed's stage 3 with these gather knobs and every parameter sharded (threshold 0)."""
    return DeepSpeed(
        stage=3,
        prefetch_bucket_size=bucket,
        max_live_parameters=live,
        max_reuse_distance=reuse,
        param_persistence_threshold=0,
    )


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.lists(st.integers(1, 400), max_size=3), min_size=1, max_size=6),
    **KNOBS,
)
def test_every_step_adds_up(sizes, bucket, live, reuse):
    layers = [(1,), *sizes]  # at least one parameter
    model = Model("m", tuple(Layer(f"layer {i}", tuple(t)) for i, t in enumerate(layers)))
    fw = _sharded_stage3(bucket, live, reuse)
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


@settings(max_examples=150, deadline=None)
@given(
    modules=st.lists(st.lists(st.integers(1, 400), min_size=1, max_size=3), min_size=1, max_size=6),
    **KNOBS,
)
def test_the_step_models_coordinator_and_ds_traffics_walk_gather_the_same(modules, bucket, live, reuse):
    """Two walks of ZeRO-3's coordinator: the step model's (`step_coordinator`, lesson 11's lab and 12)
    and the traffic model's (`ds_traffic`, lesson 11's 7.5 B predictions). Given the same modules, with a
    parameter-free module between two (ds_traffic's trace has one after every module but the last), every
    all-gather brings the same tensors in the same order."""
    from zero_lessons.planning import ds_traffic

    layers = []
    for i, sizes in enumerate(modules):
        layers += [Layer(f"module {i}", tuple(sizes))] + (
            [Layer(f"act {i}", ())] if i < len(modules) - 1 else []
        )
    fw = _sharded_stage3(bucket, live, reuse)
    coordinator = [
        [n for _, n in g] for v in walk(Model("m", tuple(layers)), fw) for g in (v.fetched, v.prefetched) if g
    ]
    flat = [n for sizes in modules for n in sizes]
    traffic = [[flat[i] for i in g] for g in ds_traffic.stage3_gathers(modules, bucket, live, reuse)]
    assert coordinator == traffic and sum(map(len, traffic)) >= len(
        flat
    )  # every tensor gathered at least once
