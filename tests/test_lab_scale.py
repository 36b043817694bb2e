"""DeepSpeed at real size (`planning.ds_scale`): the lab's verified rules on the course's 7.5 B model
(`step_choices.MODELS["7.5b"]`, 32 blocks × 4,352) and 8 GPUs.

tests/test_lab.py checks, on real ranks, that the same function at the lab's size gives every measured
message; these tests pin what the rules then say at 7.5 B, and check it against independent counts.
"""

from fractions import Fraction

import pytest

from zero_lessons import memory
from zero_lessons.planning import DeepSpeed, ds_scale, ds_traffic, step_model, timeline, transformer_model
from zero_lessons.planning.step_choices import MODELS
from zero_lessons.recipes import MIXED_ADAM

MODULES = ds_scale.gpt_modules()
PSI = sum(n for m in MODULES for n in m)


@pytest.fixture(scope="module")
def rows():
    return ds_scale.predict(gpus=8)


def test_the_model_is_the_courses_7_5b_preset():
    """The same Ψ as the `step` command's and lesson 12's model, counted by their own path; within 0.1% of
    the article's 7.5 B, so the paper's figures come out slightly under its 120 / 41.25 / 28.125 / 15 GB."""
    h = 4_352
    assert PSI == 50_257 * h + 32 * (12 * h * h + 13 * h) == 7_493_452_032
    assert PSI == step_model.transformer_model(MODELS["7.5b"]).params
    assert abs(PSI - 7_500_000_000) < 7_500_000_000 // 1_000
    paper_gb = [float(memory.per_gpu(PSI, 8, stage, MIXED_ADAM).total) / 1e9 for stage in range(4)]
    assert [round(gb, 2) for gb in paper_gb] == [119.9, 41.21, 28.1, 14.99]


def test_the_paper_column_is_the_papers_accounting(rows):
    for row in rows:
        assert row.paper_bytes == memory.per_gpu(PSI, 8, row.stage, MIXED_ADAM).total
        assert row.paper_sent == (3 if row.stage == 3 else 2) * PSI
    assert rows[0].paper_bytes == 16 * PSI and rows[3].paper_bytes == 2 * PSI


def test_stages_1_and_2_all_reduce_every_bucket_so_send_3_psi(rows):
    """17 buckets of at most 500,000,000 elements, each all-reduced, then the flat buffer gathered. A bucket
    is sent when the next tensor would overflow it; with tensors of up to 4h² elements, every bucket but
    the first and last holds about two blocks (2 × 227,335,424 = 454,670,848 elements)."""
    h = 4_352
    for stage in (1, 2):
        reduces = [n for op, n in rows[stage].messages if op == "all_reduce"]
        assert sum(reduces) == PSI and len(reduces) == 17 and max(reduces) <= 500_000_000
        assert all(500_000_000 - 4 * h * h < n for n in reduces[1:-1])
        assert reduces.count(2 * (12 * h * h + 13 * h)) >= 14
        assert rows[stage].sent == 2 * PSI + ds_traffic.padded_flat(PSI, 8)
        assert Fraction(rows[stage].sent, PSI) - 3 < Fraction(1, 10**8)
    owners = ds_scale.predict(gpus=8, knobs=ds_scale.Knobs(multi_rank_all_reduce=False))[2]
    assert owners.sent == PSI + ds_traffic.padded_flat(PSI, 8)  # reduce to owners: the paper's 2Ψ


def test_stage_3_gathers_most_layers_twice_at_real_size(rows):
    """At the lab's size the default reuse distance keeps everything (2Ψ); at 7.5 B it keeps only the
    last few blocks, so a step sends about 2.87Ψ: much nearer the paper's 3Ψ than the lab's 2Ψ."""
    pieces = ds_traffic.pieces([n for m in MODULES for n in m], 8)
    gathered = sum(n for op, n in rows[3].messages if op == "all_gather")
    scattered = sum(n for op, n in rows[3].messages if op == "reduce_scatter")
    assert scattered == pieces
    assert pieces < gathered < 2 * pieces
    assert round(rows[3].sent / PSI, 2) == 2.87
    no_reuse = ds_scale.Knobs(prefetch_bucket_size=0, max_reuse_distance=0)
    assert ds_scale.predict(gpus=8, knobs=no_reuse)[3].sent == 3 * pieces  # the paper's 3Ψ, padded


def test_what_stage_3_keeps_for_backward_and_why(rows):
    """At 7.5 B, the reuse distance alone keeps the last two blocks and the MLP output layer before them; the
    prefetcher, walking past those kept tensors into backward at the end of forward, keeps two blocks more."""
    kept, h = ds_scale.reuse(), 4_352
    block, out_layer = 12 * h * h + 13 * h, 4 * h * h + h  # one block; its MLP's h x 4h output layer and bias
    assert kept.params == PSI and kept.by_distance == 2 * block + out_layer and kept.by_prefetch == 2 * block
    # the distance rule by hand: elements the step uses between a tensor's forward and backward uses
    assert (
        2 * (2 * block) < 10**9 < 2 * (2 * block + out_layer)
    )  # the output layer stays; the layer before does not
    gathered = sum(n for op, n in rows[3].messages if op == "all_gather")
    assert gathered == PSI + kept.gathered_twice  # every piece is whole at 8 GPUs: no padding
    assert (
        round(kept.gathered_twice / PSI, 3) == 0.869
        and round((kept.params - kept.gathered_twice) / PSI, 3) == 0.131
    )
    no_prefetch = ds_scale.reuse(knobs=ds_scale.Knobs(prefetch_bucket_size=0))
    assert no_prefetch.by_prefetch == 0 and no_prefetch.by_distance == kept.by_distance
    with pytest.raises(TypeError, match="knobs must be a ds_scale.Knobs"):
        ds_scale.reuse(knobs={})


def test_what_stage_3_holds_gathered_in_the_last_blocks_backward():
    """While the backward pass runs block 32, the kept tensors (blocks 29 to 32 at 7.5 B) and block 28's two
    MLP matrices, gathered ahead, are held: 8h² more than the step model's four whole blocks."""
    h, held = 4_352, ds_scale.gathered_in_backward()
    assert held == 4 * 12 * h * h + 2 * 4 * h * h  # the 13·h of biases and norms per block stay whole
    step = timeline(transformer_model(MODELS["7.5b"]), DeepSpeed(stage=3), 8)
    assert step.peak.name == "backward block 32"
    assert 2 * held - step.peak.bytes_of("gathered parameters") == 2 * 8 * h * h  # 0.30 GB in bf16
    off = ds_scale.Knobs(
        max_reuse_distance=0, prefetch_bucket_size=0
    )  # only the running module: an MLP matrix
    assert ds_scale.gathered_in_backward(knobs=off) == 4 * h * h
    sharded = ds_scale.gathered_in_backward(
        threshold=0
    )  # the biases and norms of what is held are gathered too
    assert 0 < sharded - held < 100 * h
    at_loss = ds_scale.gathered_at_loss()  # between the passes: the same tensors, block 28's two matrices in
    assert (
        at_loss == held and 2 * at_loss - step.after_forward.bytes_of("gathered parameters") == 2 * 8 * h * h
    )
    assert ds_scale.gathered_at_loss(knobs=off) == 0  # nothing kept, nothing gathered ahead
    by_module = (
        ds_scale.held_at_loss()
    )  # modules: 0 the embedding, then ln1, qkv, proj, ln2, fc1, fc2 per block
    names = ("ln1", "qkv", "proj", "ln2", "fc1", "fc2")
    held_names = {(1 + (m - 1) // 6, names[(m - 1) % 6]) for m in by_module}
    matrices = {(b, n) for b in range(29, 33) for n in ("qkv", "proj", "fc1", "fc2")}  # blocks 29 to 32 whole
    assert held_names == matrices | {
        (28, "fc1"),
        (28, "fc2"),
    }  # and block 28's two MLP matrices, fetched ahead
    assert sum(by_module.values()) == at_loss and by_module[1 + 27 * 6 + 4] == 4 * h * h
    assert ds_scale.held_at_loss(knobs=off) == {}
    with pytest.raises(ValueError, match="last must be a whole number from 1 to 193"):
        ds_scale.gathered_in_backward(last=0)


def test_bytes_per_rank(rows):
    assert rows[0].held == 16 * PSI
    slice_ = ds_traffic.padded_flat(PSI, 8) // 8
    for stage in (1, 2):  # after backward: whole bf16 weights, the fullest rank's gradients, a slice of fp32
        assert rows[stage].weights == 2 * 8 * slice_ and rows[stage].optimizer == 12 * slice_
        assert 2 * slice_ <= rows[stage].gradients < 2 * slice_ + 2 * 2 * 4 * 4_352**2
    assert rows[3].held == 16 * ds_traffic.pieces([n for m in MODULES for n in m], 8) // 8


def test_stage_1_peaks_at_the_papers_zero_1_before_its_reduction(rows):
    """As its reduction starts stage 1 holds every bf16 gradient whole, as the paper's ZeRO-1 does all step:
    at 7.5 B (Ψ a multiple of 2N, no padding) exactly the paper's 4 + 12/N bytes per parameter."""
    assert rows[1].before_reduction == memory.per_gpu(PSI, 8, 1, MIXED_ADAM).total == 4 * PSI + 12 * PSI // 8
    assert rows[1].before_reduction - rows[1].held == 2 * PSI - rows[1].gradients > 0
    assert [r.before_reduction for r in rows if r.stage != 1] == [None] * 3
    assert (
        "| ZeRO-1 | 41.21 | 28.35 (before its reduction: 41.21) |" in ds_scale.comparison()._repr_markdown_()
    )


def test_comparison_renders(rows):
    shown = ds_scale.comparison()
    text = shown._repr_markdown_()
    assert text.count("\n") == 5 and "| ZeRO-3 | 14.99 | 14.99 | 3.00Ψ | 2.87Ψ |" in text
    assert "ZeRO-1" in repr(shown)


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="gpus must be a whole number from 2"):
        ds_scale.predict(gpus=1)
    with pytest.raises(ValueError, match="reduce_bucket_size must be a whole number from 1"):
        ds_scale.Knobs(reduce_bucket_size=0)
    with pytest.raises(ValueError, match="modules must be a non-empty list"):
        ds_scale.predict([(0,)])
    with pytest.raises(TypeError, match="multi_rank_all_reduce must be True or False"):
        ds_scale.Knobs(multi_rank_all_reduce=1)
    with pytest.raises(ValueError, match="blocks must be a whole number"):
        ds_scale.gpt_modules(blocks=0)


def test_the_trace_positions_name_the_loss_and_each_backward_use():
    modules = [(3, 1), (4,), (5, 2)]  # flat tensor indices (0, 1), (2,), (3, 4)
    order = ds_traffic.trace(modules)
    count = len(modules)
    assert order[ds_traffic.loss_entry(count)] == () and order[ds_traffic.loss_entry(count) - 1] == (3, 4)
    assert [order[ds_traffic.backward_entry(count, m)] for m in range(count)] == [(0, 1), (2,), (3, 4)]
    assert ds_traffic.backward_entry(count, count - 1) == ds_traffic.loss_entry(count) + 1
