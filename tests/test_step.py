"""Memory over a training step: small cases worked by hand, the paper's table at boundaries, surprises."""

import json
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zero_lessons import memory
from zero_lessons.planning import (
    DDP,
    FSDP2,
    DeepSpeed,
    Paper,
    activations,
    layered_model,
    timeline,
    transformer_model,
)
from zero_lessons.planning.step import Layer, Model
from zero_lessons.planning.step_parts import KINDS
from zero_lessons.planning.step_zero3 import named, replay, runs

# Three layers of one tensor each (10, 20, 30 elements), saving 1, 2 and 3 activation bytes.
TINY = layered_model([(10,), (20,), (30,)], [1, 2, 3])
# Two layers, tensors (6, 2) and (4, 4), saving 10 and 20 bytes: Ψ = 16.
PAIR = layered_model([(6, 2), (4, 4)], [10, 20])
# A 7 B-class transformer (Ψ ≈ 6.65 B), sequence 2,048, one sequence per GPU.
SHAPE_7B = activations.Transformer(layers=32, hidden=4096, heads=32, seq_len=2048, micro_batch=1)
BIG = transformer_model(SHAPE_7B)


def totals(t):
    return [phase.total for phase in t.phases]


def test_zero2_small_case_by_hand():
    # N = 2, 2 + 2 + 12 B. Weights 16·2 = 32, optimizer 16·12/2 = 96, partition gradients 16·2/2 = 16, one
    # bucket of 5 elements = 10 B. Backward meets tensors 4, 4 (layer 2) then 2, 6 (layer 1): the second 4
    # does not fit, so the first bucket is reduced during layer 2's backward; the partition buffer exists
    # from then on.
    t = timeline(PAIR, DeepSpeed(stage=2, reduce_bucket_size=5), 2)
    assert totals(t) == [
        128,  # start: weights + optimizer
        128 + 10,  # forward layer 1: + its saved activations
        128 + 30,  # forward layer 2: + both layers' activations
        128 + 10 + 16 + 4 * 2 + 30,  # backward layer 2: bucket, partition, newest 4-element grad
        128 + 10 + 16 + 6 * 2 + 10,  # backward layer 1: its largest tensor is 6 elements
        128 + 10 + 16,  # reduction: the last bucket
        144,  # before the step: the paper's ZeRO-2, 2Ψ + 14Ψ/N
        144 + 16 + 32,  # step: flat bf16 copy 2·16/2, fp32 copy 4·16/2
        128,  # after the step: the step freed the gradients
    ]
    assert (t.peak.name, t.peak.total) == ("backward layer 2", 192)


def test_zero1_small_case_by_hand():
    # Stage 1 without overlap_comm reduces nothing in backward; after it, forward-order tensors 6, 2, 4, 4
    # fill buckets of 5: the first holds 6 alone, so 10 elements still wait when it is reduced.
    t = timeline(PAIR, DeepSpeed(stage=1, reduce_bucket_size=5), 2)
    assert totals(t)[3:] == [
        128 + 10 + 8 * 2 + 30,
        128 + 10 + 16 * 2 + 10,
        128 + 10 + 16 + 10 * 2,
        144,
        192,
        128,
    ]


def test_an_oversized_tensor_does_not_reduce_an_empty_bucket():
    # Tensors 3 and 9, bucket of 5: backward meets 9 first, with the bucket empty, so nothing is reduced; 3
    # then does not fit beside it, and that first real reduction (in layer 1's backward) allocates the
    # partition.
    t = timeline(layered_model([(3,), (9,)]), DeepSpeed(stage=2, reduce_bucket_size=5), 2)
    assert t.phase("backward layer 2").bytes_of("gradients") == 0
    assert t.phase("backward layer 1").bytes_of("gradients") == 12 * 2 / 2


def test_zero3_trace_without_prefetch_or_reuse():
    # Each step gathers its own layer and releases it right after.
    steps, left = replay(
        TINY, DeepSpeed(stage=3, prefetch_bucket_size=0, max_reuse_distance=0, param_persistence_threshold=0)
    )
    assert [s.own + s.prefetched + s.kept for s in steps] == [10, 20, 30, 30, 20, 10]
    assert left.own + left.prefetched + left.kept == 0


@pytest.mark.parametrize(
    "reuse, gathered",
    [
        (10**9, [10, 30, 60, 60, 30, 10]),
        (25, [10, 20, 30, 30, 20, 10]),
        (60, [10, 20, 30, 30, 20, 10]),
        (61, [10, 20, 50, 50, 20, 10]),
    ],
)
def test_zero3_trace_with_reuse_distance(reuse, gathered):
    # 10**9: every later use lies within reach, so nothing is released before its backward. 25: after layer 1,
    # layers 2 and 3 (50 elements) reach past 25 before layer 1 comes back, so it is released, and so is
    # layer 2; layer 3's backward comes right after its forward, so it is kept. After layer 2's forward the
    # trace runs layer 3 twice (60 elements) before layer 2's backward: the walk stops once it has covered
    # the distance, so 60 releases layer 2 and 61 keeps it.
    steps, _ = replay(
        TINY,
        DeepSpeed(stage=3, prefetch_bucket_size=0, max_reuse_distance=reuse, param_persistence_threshold=0),
    )
    assert [s.own + s.prefetched + s.kept for s in steps] == gathered


def test_zero3_trace_with_prefetch():
    # prefetch_bucket_size 15. The root module runs first and prefetches layers 1 and 2 in one all-gather
    # (10 < 15, then 30 ≥ 15 stops it). Layer 1 waits on it, which copies out both, and prefetches layer 3.
    # Layer 2 passes the backward entries of layers 3 and 2 (gathered already: kept, as the prefetcher passed
    # their later use) and prefetches layer 1 again for backward; nothing more is fetched after that.
    steps, _ = replay(
        TINY, DeepSpeed(stage=3, prefetch_bucket_size=15, max_reuse_distance=0, param_persistence_threshold=0)
    )
    assert [s.own + s.prefetched + s.kept for s in steps] == [60, 60, 60, 60, 30, 10]
    assert [s.prefetched for s in steps] == [50, 40, 10, 10, 10, 0]
    # Prefetched tensors stay in their all-gather buffer until a module waits on them: layer 3 until its
    # forward, layer 1's second fetch until its backward.
    assert [s.in_flight for s in steps] == [30, 40, 10, 10, 10, 0]
    # Buffers at each step's highest point. Layer 1: the root's (30, its layer 2 not yet used) and layer 3's
    # (30). Layer 2: as it starts, the root's buffer is still alive beside layer 3's. Layer 3: layer 3's,
    # while it is copied out, and layer 1's (10), alive until layer 1's backward.
    assert [s.flat for s in steps] == [60, 60, 40, 10, 10, 10]
    # The tensors behind those counts: (layer, elements) of each, copied out or still in their buffer.
    assert [s.ready for s in steps] == [((1, 20),), (), (), (), (), ()]
    assert [s.waiting for s in steps] == [
        ((2, 30),),
        ((0, 10), (2, 30)),
        ((0, 10),),
        ((0, 10),),
        ((0, 10),),
        (),
    ]
    assert [s.kept_tensors for s in steps] == [(), (), ((1, 20),), ((1, 20),), (), ()]
    for s in steps:
        assert sum(n for _, n in s.waiting) == s.in_flight
        assert sum(n for _, n in s.ready) == s.prefetched - s.in_flight


def test_zero3_max_live_parameters_only_stops_the_prefetcher():
    # Budget min(max_live - gathered, prefetch_bucket_size): 20 - 10 = 10 lets layer 2 in after layer 1; then
    # 20 - 20 = 0 and 20 - 30 < 0 stop it, and at layer 1's backward 20 - 10 finds nothing left to fetch.
    fw = DeepSpeed(
        stage=3,
        prefetch_bucket_size=15,
        max_reuse_distance=0,
        max_live_parameters=20,
        param_persistence_threshold=0,
    )
    steps, _ = replay(TINY, fw)
    assert [s.own + s.prefetched + s.kept for s in steps] == [30, 20, 30, 30, 20, 10]


def test_zero3_small_tensors_stay_whole():
    # Threshold 20: tensors of at most 20 elements (10 and 20) are never partitioned: each rank keeps them
    # whole beside its pieces (2·60/2 + 2·30) and only the 30-element tensor is gathered.
    fw = DeepSpeed(stage=3, prefetch_bucket_size=0, max_reuse_distance=0, param_persistence_threshold=20)
    steps, _ = replay(TINY, fw)
    assert [s.own + s.prefetched + s.kept for s in steps] == [0, 0, 30, 30, 0, 0]
    assert timeline(TINY, fw, 2).phase("start of step").bytes_of("weights") == 60 + 60


def test_fsdp2_on_one_rank_by_hand():
    # Nothing is all-gathered or prefetched, but the layer's unsharded weights are still a copy of its shard.
    t = timeline(TINY, FSDP2(), 1)
    assert t.phase("forward layer 3").total == 840 + 60 + 6
    assert t.phase("backward layer 3").total == 840 + 60 + 60 + 6


def test_fsdp2_small_case_by_hand():
    # Shards: weights 60·2/2 = 60, optimizer 60·12/2 = 360, gradients 60. Forward holds the layer gathered
    # twice (its weights and the flat all-gather output); backward holds it again, the previous layer
    # prefetched, its full gradients, and the next layer's reduce-scatter input.
    t = timeline(TINY, FSDP2(), 2)
    assert totals(t) == [
        420,
        420 + 20 + 20 + 1,
        420 + 40 + 40 + 3,
        420 + 60 + 60 + 6,
        420 + 60 + 40 + 60 + 6,
        420 + 40 + 20 + 40 + 30 + 60 + 3,
        420 + 20 + 20 + 50 + 40 + 1,
        420 + 50 + 20 + 20 + 40,  # layer 1's input needs no gradient: gathered and reduced only at the end
        480,
        480 + 120,
        480,
    ]
    assert t.peak.name == "backward layer 2"


def test_fsdp2_without_resharding_by_hand():
    # Gathered weights stay from their forward to their backward, so nothing is gathered again or prefetched.
    t = timeline(TINY, FSDP2(reshard_after_forward=False), 2)
    # Forward layer 3: its weights, its flat all-gather output, layers 1 and 2 kept, activations.
    assert t.phase("forward layer 3").total == 420 + 60 + 60 + (20 + 40) + 6
    # Backward layer 3: its weights, layers 1 and 2 kept, its full gradients, activations.
    assert t.phase("backward layer 3").total == 420 + 60 + (20 + 40) + 60 + 6


@pytest.mark.parametrize("sub_group, largest", [(12, 15), (0, 15), (30, 30), (10**9, 30)])
def test_zero3_optimizer_casts_one_sub_group_at_a_time(sub_group, largest):
    # Pieces of 10/2, 20/2, 30/2 = 5, 10, 15 elements, grouped in order until a group reaches sub_group_size:
    # 12 gives (5 + 10), (15); 0 gives one tensor per group; 30 or more gives one group of 30. The step holds
    # the largest group twice: flattened in bf16 (2 B) and cast to fp32 (4 B).
    t = timeline(TINY, DeepSpeed(stage=3, sub_group_size=sub_group, param_persistence_threshold=0), 2)
    assert t.phase("optimizer step").total - t.phase("before optimizer step").total == largest * (2 + 4)


def test_zero12_step_takes_the_gradient_norm_in_fp64_first():
    # DeepSpeed's get_grad_norm_direct copies each gradient piece of the partition to fp64 before the step
    # flattens and casts the partition. PAIR (Ψ = 16) on 4 ranks: partitions of 4 elements, the largest piece
    # 4, so 8·4 = 32 B beats the flat bf16 and fp32 copies, 2·4 + 4·4 = 24 B. On 2 ranks the pieces can reach
    # 6 elements: 8·6 = 48 B, no more than 2·8 + 4·8 = 48 B, so the copies stand.
    steps = {n: timeline(PAIR, DeepSpeed(stage=2), n) for n in (2, 4)}
    rises = {
        n: t.phase("optimizer step").total - t.phase("before optimizer step").total for n, t in steps.items()
    }
    assert rises == {2: 48, 4: 32}
    assert steps[4].phase("optimizer step").bytes_of("fp32 gradients") == 0


def test_zero3_flattens_each_full_bucket_to_reduce_it():
    # reduce_scatter_coalesced copies a bucket's gradients into one flat tensor, unless the bucket is one
    # tensor that N divides. TINY on 4 ranks, buckets of 25: 30 waits alone and is flushed (copied: 30 is not
    # a multiple of 4) when 20 arrives in layer 2's backward; 20 is flushed uncopied in layer 1's; the last
    # bucket, 10, is copied as backward ends.
    t = timeline(TINY, DeepSpeed(stage=3, reduce_bucket_size=25, param_persistence_threshold=0), 4)
    phases = ("backward layer 3", "backward layer 2", "backward layer 1", "gradient reduction")
    kept = 25 * 2  # the bucket stage 3 keeps from start-up
    assert [t.phase(p).bytes_of("gradient buckets") - kept for p in phases] == [0, 30 * 2, 0, 10 * 2]


def test_zero3_bucket_without_contiguous_gradients():
    # Bucket of 25 elements, gradients 30, 20, 10 in backward order: 30 waits alone (nothing to flush before
    # it), 20 flushes it, 10 flushes 20, and 10 is still waiting when backward ends.
    fw = DeepSpeed(stage=3, reduce_bucket_size=25, contiguous_gradients=False, param_persistence_threshold=0)
    t = timeline(TINY, fw, 2)
    waiting = [t.phase(f"backward layer {i}").bytes_of("unreduced gradients") for i in (3, 2, 1)]
    assert waiting == [30 * 2, 20 * 2, 10 * 2]
    assert t.phase("gradient reduction").bytes_of("unreduced gradients") == 10 * 2
    assert t.phase("start of step").bytes_of("gradient buckets") == 0  # no preallocated bucket


def test_ddp_small_case_and_bucket_cap():
    # Everything whole: 60·(2 + 12) = 840, plus buckets for all gradients, 120, built once.
    expected = [960, 961, 963, 966, 960 + 60 + 6, 960 + 100 + 3, 960 + 120 + 1, 1080, 1080, 1080 + 240, 1080]
    for cap in (1, 25, 1000):  # the cap only splits the buckets
        assert totals(timeline(TINY, DDP(bucket_cap_mb=cap), 2)) == expected
    view = timeline(TINY, DDP(gradient_as_bucket_view=True), 2)
    assert view.phase("before optimizer step").total == 960  # the buckets are the gradients: one copy saved


@pytest.mark.parametrize("gpus", [1, 2, 8, 64])
def test_boundaries_equal_the_papers_table(gpus):
    psi = BIG.params
    table = {s: memory.per_gpu(psi, gpus, s).total for s in range(4)}

    def ready(fw):
        return timeline(BIG, fw, gpus).phase("before optimizer step").model_state

    assert ready(DDP()) == table[0]
    assert ready(DeepSpeed(stage=2)) == table[2]
    # DeepSpeed frees other partitions' gradients after backward at stage 1 too, as the lab measures.
    assert ready(DeepSpeed(stage=1)) == table[2]
    assert ready(DeepSpeed(stage=3, param_persistence_threshold=0)) == table[3]
    assert ready(FSDP2()) == table[3]
    for stage in range(4):
        assert {p.model_state for p in timeline(BIG, Paper(stage), gpus).phases} == {table[stage]}


def test_boundaries_hold_no_transient_part_but_buckets():
    for fw in (DDP(), DeepSpeed(stage=1), DeepSpeed(stage=3), FSDP2(), Paper(3)):
        for phase in timeline(BIG, fw, 8).phases:
            if phase.kind == "boundary":
                assert {p.kind for p in phase.parts} <= {
                    "weights",
                    "gradients",
                    "optimizer",
                    "gradient buckets",
                }


@pytest.mark.parametrize("stage", [2, 3])
def test_peak_grows_with_the_gradient_bucket(stage):
    # Buckets of 5e8 elements or more: the first is reduced only after the last block's backward, where the
    # peak sits, so the peak moves by exactly the bucket's bytes: 2 B per element, twice with overlap_comm
    # (stage 3 keeps a single bucket either way).
    peaks = {
        (size, overlap): timeline(
            BIG, DeepSpeed(stage=stage, reduce_bucket_size=size, overlap_comm=overlap), 8
        ).peak.total
        for size in (500_000_000, 750_000_000, 10**9)
        for overlap in (False, True)
    }
    for overlap in (False, True):
        per_element = 2 * (2 if overlap and stage == 2 else 1)
        assert peaks[10**9, overlap] - peaks[750_000_000, overlap] == 250_000_000 * per_element
        assert peaks[750_000_000, overlap] - peaks[500_000_000, overlap] == 250_000_000 * per_element


def test_a_smaller_zero2_bucket_can_raise_the_peak():
    # Stage 2 allocates its gradient partition (2·Ψ/8 bytes) at the first bucket reduction. A bucket of 3e8
    # elements fills during block 31's backward, while 31 blocks of activations are still alive; one of 5e8
    # fills only at block 30. So the smaller bucket moves the partition into an earlier, fuller phase.
    small, default = (
        timeline(BIG, DeepSpeed(stage=2, reduce_bucket_size=size), 8) for size in (3 * 10**8, 5 * 10**8)
    )
    assert (small.peak.name, default.peak.name) == ("backward block 31", "backward block 32")
    assert small.peak.bytes_of("gradients") == Fraction(BIG.params * 2, 8)
    assert default.peak.bytes_of("gradients") == 0
    assert small.peak.total > default.peak.total


def test_knobs_that_move_only_traffic():
    base = timeline(BIG, DeepSpeed(stage=2), 8)
    assert totals(timeline(BIG, DeepSpeed(stage=2, allgather_bucket_size=10_000), 8)) == totals(base)
    assert totals(timeline(BIG, DDP(bucket_cap_mb=100), 8)) == totals(timeline(BIG, DDP(), 8))


def test_stage3_can_peak_above_stage2():
    # DeepSpeed #3734 and #5305. A 0.35 B model on 2 GPUs with default knobs: the reuse distance (10**9
    # elements) reaches past 2Ψ, so no weight gathered in forward is released before its backward. At the last
    # block's backward stage 3 then holds pieces (Ψ/2 each of weights and gradients) plus every weight
    # gathered, where stage 2 holds all weights once: 2·Ψ/2 + 2·Ψ/2 + 2·Ψ - 2·Ψ = 2Ψ bytes more, the rest
    # being equal.
    model = transformer_model(
        activations.Transformer(layers=24, hidden=1024, heads=16, seq_len=1024, micro_batch=1)
    )
    z2, z3 = (timeline(model, DeepSpeed(stage=s), 2) for s in (2, 3))
    assert z2.peak.name == "backward block 24"
    assert z3.phase("backward block 24").total - z2.peak.total == 2 * model.params > 0
    # Stage 3 peaks a little earlier, at the last block's forward: what it prefetched for backward is held
    # twice there, copied out and in the all-gather buffer that brought it, with no fresh gradient yet.
    flat = sum(p.nbytes for p in z3.peak.parts if p.holder == "buffers")
    assert z3.peak.name == "forward block 24"
    fresh = z2.peak.bytes_of("unreduced gradients")
    assert z3.peak.total - z3.phase("backward block 24").total == flat - fresh
    # Stage 3's gradient buffer exists from start-up, stage 2's only from its first bucket reduction, so at N
    # = 2 the pieces save nothing here: every gathered byte is a byte above stage 2. Without reuse or
    # prefetching, the last block's backward holds only that block's partitioned tensors (those over 100,000
    # elements), twice while they are copied out of their all-gather buffer, and the small tensors every rank
    # keeps whole beside their pieces.
    lean = timeline(model, DeepSpeed(stage=3, max_reuse_distance=0, prefetch_bucket_size=0), 2)
    last = lean.phase("backward block 24")
    partitioned = sum(n for n in model.layers[-1].tensors if n > 100_000)
    assert last.bytes_of("gathered parameters") == 2 * 2 * partitioned
    small = sum(n for layer in model.layers for n in layer.tensors if n <= 100_000)
    assert (
        last.total - z2.phase("backward block 24").total == last.bytes_of("gathered parameters") + 2 * small
    )


def test_more_gpus_do_not_halve_the_peak():
    # DeepSpeed #4093. Activations, buckets and gathered layers do not shrink with N; only the sharded states
    # do, so going from 2 to 4 GPUs lowers the peak by exactly the drop in the paper's stage-3 table.
    model = transformer_model(
        activations.Transformer(layers=24, hidden=2048, heads=16, seq_len=2048, micro_batch=4)
    )
    fw = DeepSpeed(stage=3, param_persistence_threshold=0)
    two, four = timeline(model, fw, 2), timeline(model, fw, 4)
    assert two.peak.name == four.peak.name
    drop = memory.per_gpu(model.params, 2, 3).total - memory.per_gpu(model.params, 4, 3).total
    assert two.peak.total - four.peak.total == drop
    assert four.peak.total > two.peak.total / 2


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("attention", ["unfused", "flash"])
def test_activation_peak_matches_korthikanti(attention, checkpointing):
    model = transformer_model(SHAPE_7B, attention=attention)
    t = timeline(model, Paper(0), 8, checkpointing=checkpointing)
    s, b, h, a, layers = 2048, 1, 4096, 32, 32  # SHAPE_7B, written out
    one_layer = s * b * h * 34 + (
        5 * a * s * s * b if attention == "unfused" else 0
    )  # eq. 1; flash: no s × s
    expected = layers * 2 * s * b * h + one_layer if checkpointing else layers * one_layer
    peak = max(phase.bytes_of("activations") for phase in t.phases)
    mode = "full" if checkpointing else "none"
    assert peak == expected == activations.activation_bytes(SHAPE_7B, mode, attention=attention)


@pytest.mark.parametrize(
    ("attention", "error", "words"),
    [
        ("fused", ValueError, "attention must be one of unfused, flash, got 'fused'"),
        (True, TypeError, "attention must be one of unfused, flash, got bool"),
    ],
)
def test_transformer_model_refuses_an_unknown_attention(attention, error, words):
    with pytest.raises(error) as refused:
        transformer_model(SHAPE_7B, attention=attention)
    assert str(refused.value).startswith(words) and "\n" not in str(refused.value)


def test_transformer_model_counts():
    h, layers = SHAPE_7B.hidden, SHAPE_7B.layers
    # Transformer.params rounds away the biases and norms: 13·h per block.
    assert BIG.params == SHAPE_7B.params + 13 * h * layers
    assert len(BIG.layers) == layers + 1 and BIG.layers[1].largest == 4 * h * h


def test_transformer_model_with_its_head_ties_the_embedding():
    headed = transformer_model(SHAPE_7B, head=True)
    assert headed.tied == SHAPE_7B.vocab * SHAPE_7B.hidden == headed.layers[0].largest and BIG.tied == 0
    assert headed.params == BIG.params and headed.name == "GPT 32×4096 with its tied output layer"
    block = timeline(headed, DeepSpeed(stage=2), 8).phase("backward block 32")
    [part] = [p for p in block.parts if "tied weight" in p.reason]
    assert part.reason == (
        "the output layer's gradient for embedding's tied weight, held by autograd until embedding's "
        "backward adds its own: 2 B × 205,852,672"
    )


def test_one_rank_stage3_gathers_nothing():
    assert all(p.bytes_of("gathered parameters") == 0 for p in timeline(BIG, DeepSpeed(stage=3), 1).phases)


def test_the_documented_example_is_what_the_code_gives():
    from zero_lessons.planning import step

    data = timeline(BIG, DeepSpeed(stage=3), 8).to_dict()
    first = data["phases"][0]
    shown = [data["params"], data["peak"]["index"], data["peak"]["total_bytes"], first["total_bytes"]]
    shown += [first["parts"][0]["bytes"]]
    assert (data["model"], data["peak"]["phase"], first["parts"][0]["kind"]) == (
        "GPT 32×4096",
        "backward block 32",
        "optimizer",
    )
    assert all(f": {number}," in step.__doc__ or f": {number}}}" in step.__doc__ for number in shown)


def test_json_shape():
    # Seven ranks share 60 weights: 120/7 bytes each, not a whole number, so JSON carries the nearest float.
    data = json.loads(
        json.dumps(timeline(TINY, DeepSpeed(stage=3, param_persistence_threshold=0), 7).to_dict())
    )
    assert set(data) == {
        "framework",
        "knobs",
        "model",
        "params",
        "layers",
        "gpus",
        "recipe",
        "checkpointing",
        "peak",
        "phases",
    }
    assert data["knobs"]["overlap_comm"] is True and data["knobs"]["stage"] == 3
    assert data["peak"]["total_bytes"] == max(p["total_bytes"] for p in data["phases"])
    parts = data["phases"][0]["parts"]
    assert all(set(part) == {"kind", "bytes", "reason"} and part["kind"] in KINDS for part in parts)
    assert [p["bytes"] for p in parts if p["kind"] == "weights"] == [float(Fraction(60 * 2, 7))]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: DeepSpeed(stage=0), "stage must be 1, 2 or 3"),
        (lambda: DeepSpeed(stage=5), "stage must be 0, 1, 2 or 3"),
        (lambda: DeepSpeed(reduce_bucket_size=0), "reduce_bucket_size must be a whole number from 1"),
        (lambda: DeepSpeed(prefetch_bucket_size=-1), "prefetch_bucket_size must be a whole number from 0"),
        (lambda: DeepSpeed(max_live_parameters=1.5), "max_live_parameters must be a whole number"),
        (lambda: DeepSpeed(overlap_comm="yes"), "overlap_comm must be True, False or None"),
        (lambda: DDP(bucket_cap_mb=0), "bucket_cap_mb must be a number > 0"),
        (lambda: DDP(bucket_cap_mb=2**21), "bucket_cap_mb must be a number > 0 and at most"),
        (lambda: DDP(gradient_as_bucket_view=1), "gradient_as_bucket_view must be True or False"),
        (lambda: FSDP2(reshard_after_forward=2), "reshard_after_forward must be True, False or None"),
        (lambda: Layer("block 1", (0,)), "tensors of block 1 must be a whole number from 1"),
        (
            lambda: Layer("block 1", (5,), activations=-1),
            "activations of block 1 must be a whole number from 0",
        ),
        (lambda: Model("m", ()), "layers must be a non-empty tuple"),
        (lambda: Model("m", TINY.layers, -1), "tied must be a whole number from 0"),
        (lambda: Model("m", TINY.layers, 11), "tied must be a whole number from 0 to 10"),
        (lambda: Model("m", PAIR.layers, 4), "tied must be 0 or the size of one of layer 1's tensors, got 4"),
        (lambda: transformer_model(SHAPE_7B, head=1), "head must be True or False, got int 1"),
        (lambda: layered_model([(1,), (2,)], [1]), "saved must give one value per layer (2), got 1"),
        (lambda: timeline(TINY, "ddp", 2), "framework must be Paper, DDP, DeepSpeed or FSDP2"),
        (lambda: timeline(TINY, DDP(), 0), "gpus must be a whole number from 1"),
        (lambda: timeline(TINY, DDP(), 2, checkpointing="yes"), "checkpointing must be True or False"),
        (lambda: timeline(TINY, DDP(), 2, "adam-17"), "recipe"),
    ],
)
def test_errors_name_the_field(make, message):
    with pytest.raises((ValueError, TypeError)) as error:
        make()
    assert message in str(error.value)


sizes = st.lists(st.integers(1, 60), min_size=1, max_size=3).map(tuple)
models = st.lists(st.tuples(sizes, st.integers(0, 200), st.integers(0, 50)), min_size=1, max_size=5).map(
    lambda layers: layered_model(
        [t for t, _, _ in layers], [a for _, a, _ in layers], [c for _, _, c in layers]
    )
)
knobs = st.fixed_dictionaries(
    {
        "reduce_bucket_size": st.integers(1, 200),
        "prefetch_bucket_size": st.integers(0, 150),
        "max_live_parameters": st.integers(0, 400),
        "max_reuse_distance": st.integers(0, 400),
        "param_persistence_threshold": st.integers(0, 30),
        "sub_group_size": st.integers(0, 100),
        "overlap_comm": st.booleans(),
        "contiguous_gradients": st.booleans(),
    }
)
frameworks = st.one_of(
    st.builds(Paper, st.integers(0, 3)),
    st.builds(DDP, st.integers(1, 100), st.booleans()),
    st.builds(FSDP2, st.sampled_from([None, True, False])),
    st.tuples(st.integers(1, 3), knobs).map(lambda a: DeepSpeed(stage=a[0], **a[1])),
)


@settings(max_examples=300, deadline=None)
@given(models, frameworks, st.integers(1, 9), st.booleans())
def test_parts_never_negative_and_peak_is_the_highest_phase(model, fw, gpus, checkpointing):
    t = timeline(model, fw, gpus, checkpointing=checkpointing)
    assert all(part.nbytes > 0 for phase in t.phases for part in phase.parts)  # empty parts are left out
    assert t.peak.total == max(phase.total for phase in t.phases)
    assert all(phase.total < t.peak.total for phase in t.phases[: t.peak_index])
    assert all(phase.total == sum(p.nbytes for p in phase.parts) for phase in t.phases)
    assert len(t.phases) == 2 * len(model.layers) + 5


@settings(max_examples=150, deadline=None)
@given(
    models,
    knobs,
    st.integers(2, 9),
    st.sampled_from(["prefetch_bucket_size", "max_live_parameters", "max_reuse_distance"]),
    st.integers(0, 400),
)
def test_zero3_knobs_never_lower_the_most_weights_gathered(model, kw, gpus, knob, more):
    # These knobs buy speed with memory: raising one never lowers the most elements gathered at once.
    low, _ = replay(model, DeepSpeed(stage=3, **kw))
    high, _ = replay(model, DeepSpeed(stage=3, **(kw | {knob: kw[knob] + more})))
    assert max(s.own + s.prefetched + s.kept for s in high) >= max(s.own + s.prefetched + s.kept for s in low)


def test_zero3_keeping_a_weight_can_lower_the_peak():
    # The peak itself can drop: every gather holds its weights twice for a moment (in the all-gather buffer
    # and copied out), so a weight kept from forward costs less in backward than one gathered again. One
    # tensor of 1 element on 2 ranks: prefetching 1 element passes its backward use, so it is kept.
    model = layered_model([(1,)], [0])
    kw = {"max_live_parameters": 2, "max_reuse_distance": 0, "param_persistence_threshold": 0}
    again, kept = (timeline(model, DeepSpeed(stage=3, prefetch_bucket_size=p, **kw), 2) for p in (0, 1))
    assert again.phase("backward layer 1").bytes_of("gathered parameters") == 2 * 2
    assert kept.phase("backward layer 1").bytes_of("gathered parameters") == 2
    assert kept.peak.total < again.peak.total


@pytest.mark.parametrize(
    "framework", [Paper(3), DDP(), DeepSpeed(stage=1), DeepSpeed(stage=2), DeepSpeed(stage=3), FSDP2()]
)
def test_every_byte_count_is_exact(framework):
    """Bytes are ints or Fractions, never floats: Ψ/N on 3 ranks is a Fraction, not 0.333…"""
    for phase in timeline(PAIR, framework, 3).phases:
        for part in phase.parts:
            assert type(part.nbytes) in (int, Fraction), (phase.name, part)


# The lab's stage-3 model (lesson 12): four Linear modules of a 32 × 32 weight and 32 biases, with ReLUs
# between them, and its stage-3 knobs scaled down to a layer or so.
LAB_LAYERS = tuple(
    Layer(name, tensors)
    for name, tensors in [
        ("linear 1", (1024, 32)),
        ("relu 1", ()),
        ("linear 2", (1024, 32)),
        ("relu 2", ()),
        ("linear 3", (1024, 32)),
        ("relu 3", ()),
        ("linear 4", (1024, 32)),
    ]
)
LAB_Z3 = DeepSpeed(
    stage=3,
    reduce_bucket_size=1200,
    prefetch_bucket_size=1200,
    max_live_parameters=3600,
    max_reuse_distance=1200,
    param_persistence_threshold=0,
)


def test_the_lab_zero3_trace_at_the_third_relu():
    # At linear 1's forward the prefetcher (budget min(3,600 - 2,080, 1,200)) fetches linear 2's bias to
    # linear 4's weight in one all-gather; linear 2's wait on its bias copies that all-gather out, linear 4's
    # weight with it. Once linear 1 is released, relu 1 has 3,600 - 3,136 = 464 elements of budget: it fetches
    # linear 4's bias, walks on into the backward half of the trace, past linear 4 to linear 2 (gathered
    # already, so free, and now kept: their next use is passed), and fetches linear 1's weight, used last in
    # backward.
    steps, _ = replay(Model("lab MLP", LAB_LAYERS), LAB_Z3)
    relu3 = steps[5]
    assert relu3.ready == ((6, 1024),)
    assert relu3.waiting == ((0, 1024), (6, 32))
    assert relu3.kept_tensors == ((2, 32), (2, 1024), (4, 32), (4, 1024))
    # max_live_parameters stops the prefetcher; it caps nothing: 4,192 elements are gathered here.
    assert relu3.own + relu3.prefetched + relu3.kept == 4192 > LAB_Z3.max_live_parameters
    assert named(LAB_LAYERS, relu3.ready) == "linear 4's 1,024-element tensor"
    assert (
        named(LAB_LAYERS, relu3.waiting) == "linear 1's 1,024-element tensor and linear 4's 32-element tensor"
    )
    assert named(LAB_LAYERS, relu3.kept_tensors) == "linear 2 to linear 3"


def test_gathered_tensors_are_named_by_layer_or_by_tensor():
    # A layer with some of its gathered tensors is named by them, and breaks a run of whole layers.
    assert named(LAB_LAYERS, ((0, 1024), (0, 32), (2, 1024), (4, 1024), (4, 32))) == (
        "linear 1, linear 2's 1,024-element tensor and linear 3"
    )
    three = (Layer("block 1", (5, 6, 7)), Layer("block 2", (5, 6, 7)))
    assert named(three, ((0, 5), (0, 7), (1, 5), (1, 6), (1, 7))) == "2 of block 1's 3 tensors and block 2"
    # Tensors kept whole (at most the threshold) are never gathered: a layer is whole without them.
    assert named(three, ((0, 7),), threshold=6) == "block 1"
    assert named(three, ()) == ""


def test_gathered_layers_are_named_by_their_unbroken_runs():
    # The lab's stage-3 model steps through Linear and ReLU modules; a ReLU has no tensors: it breaks no run.
    # At the third ReLU's forward the prefetcher holds linear 1 (for backward) and linear 4 (next), not the
    # two between them, kept from their own use: "linear 1 to linear 4" would name all four.
    layers = LAB_LAYERS
    assert runs(layers, (0, 6)) == "linear 1 and linear 4"
    assert runs(layers, (2, 4)) == "linear 2 to linear 3"
    assert runs(layers, (0, 2, 6)) == "linear 1 to linear 2 and linear 4"
    assert runs(layers, (0, 4, 6)) == "linear 1 and linear 3 to linear 4"
    assert (
        runs(layers[::2], (0, 2)) == "linear 1 and linear 3"
        and runs(layers, (0, 4)) == "linear 1 and linear 3"
    )
    assert (
        runs(tuple(Layer(f"block {i}", (9,)) for i in range(1, 6)), (0, 2, 4))
        == "block 1, block 3 and block 5"
    )
    assert runs(layers, ()) == ""


@settings(max_examples=150, deadline=None)
@given(models, frameworks, st.integers(1, 9), st.booleans())
def test_a_tied_output_layer_adds_its_gradient_to_every_backward_phase_and_nowhere_else(
    model, fw, gpus, checkpointing
):
    """Autograd holds the output layer's gradient for the tied weight from before the last layer's
    backward until the first layer's backward adds its own: every backward phase, under every framework,
    and no other."""
    tied = model.layers[0].tensors[-1]
    plain = timeline(model, fw, gpus, checkpointing=checkpointing)
    headed = timeline(Model(model.name, model.layers, tied), fw, gpus, checkpointing=checkpointing)
    for bare, with_head in zip(plain.phases, headed.phases, strict=True):
        added = with_head.total - bare.total
        assert added == (2 * tied if bare.kind == "backward" else 0)  # mixed-adam: 2-byte gradients
        if added:
            assert with_head.bytes_of("unreduced gradients") - bare.bytes_of("unreduced gradients") == added
