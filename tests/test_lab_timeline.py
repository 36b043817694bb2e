"""Memory over one step, measured on the lab's ranks and set beside the planning model (issue 16).

The timelines are measured in the same ranks as the lab's matrix, after its modes: in a full test
session `test_lab.py`'s run asks for them and this module reuses that run (`zero_lessons.lab.reuse`);
run alone, it measures only the timelines. The counter itself is checked first, in this process.
"""

import os
from fractions import Fraction

import pytest

from conftest import need_module
from zero_lessons import lab
from zero_lessons.lab import reuse
from zero_lessons.lab.timeline_compare import allowances, compare, mesh_bytes, modelled, table
from zero_lessons.lab.timeline_setup import BUCKET, BY_KEY, SPEC

torch = need_module("torch")
need_module("deepspeed")

from zero_lessons.lab.live_bytes import LiveBytes  # noqa: E402  (imports torch)

#: The most the timeline may add to the lab matrix, in seconds (issue 16, item 5).
BUDGET = 30


def test_the_counter_counts_storages_once_from_birth_to_death():
    with LiveBytes() as counter:
        a = torch.zeros(10)  # 40 B
        view = a[2:5]  # a view: no new storage
        b = a * 2  # 40 B more
        counter.mark("stretch")
        c = torch.ones(25)  # 100 B, live only inside the stretch
        del c
        counter.mark(None)
        level = counter.level
        del b
        after = counter.level
        a.untyped_storage().resize_(0)  # as FSDP2 frees its gathered weights
        resized = counter.level
    assert (level, after, resized) == (80, 40, 0)
    assert [(s.name, s.level, s.peak) for s in counter.spans] == [("stretch", 80, 180)]
    assert counter.counted([a, view]) == 0 and counter.unseen == {}


class _AtPeak(LiveBytes):
    """The counter, also keeping what was live at its highest point since `most` was last set: (op, bytes)."""

    most, ops = 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self.level > self.most:
            self.most, self.ops = self.level, sorted((self.made_by[k], n) for k, n in self.sizes.items())
        return out


def test_the_losss_four_fp32_copies_are_its_backward_temporaries():
    """Lesson 12's loss fold: `y.float().pow(2).mean()` and its backward hold, at their highest, four copies
    of fp32 logits beyond y: the mean's gradient (a div), y ** (2 - 1) (pow's backward makes it anew), the
    factor 2y and their product, y's gradient. y ** 2 itself is gone once the mean is taken."""

    logits = torch.randn(32, 32, requires_grad=True)
    with _AtPeak() as counter:
        y = logits * 1.0  # the logits, made under the counter: 4,096 B
        counter.most = counter.level
        y.float().pow(2).mean().backward()
    ops = [op for op, _ in counter.ops]
    ops.remove("aten.mul.Tensor")  # y itself
    big = [op for op in ops if op not in ("aten.mean.default", "aten.ones_like.default")]  # 4 B scalars
    assert sorted(big) == ["aten.div.Scalar", "aten.mul.Scalar", "aten.mul.Tensor", "aten.pow.Tensor_Scalar"]
    assert counter.most - 4_096 - 4 - 4 == 4 * 4_096  # y, the loss and its gradient of 1 aside


def test_a_cross_entropy_on_bf16_logits_holds_three_fp32_copies():
    """timeline_view.CROSS_ENTROPY_COPIES: PyTorch's cross-entropy on bf16 logits cast to fp32 holds, at
    its highest, three fp32 copies of the logits beyond them: log-softmax's output (saved for the backward
    pass), the loss's gradient (nll_loss_backward, as large as the logits) and log-softmax's gradient. The
    fp32 cast is gone once log-softmax has run; the bf16 gradient comes once the loss's gradient is freed."""
    from zero_lessons.lab import timeline_view

    tokens, vocab = 64, 1_000
    logits = torch.randn(tokens, vocab, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, vocab, (tokens,))
    with _AtPeak() as counter:
        y = logits * 1  # the bf16 logits, made under the counter
        counter.most, counter.ops = counter.level, []
        torch.nn.functional.cross_entropy(y.float(), targets).backward()
    fp32 = tokens * vocab * 4
    big = sorted(op for op, nbytes in counter.ops if nbytes >= fp32)
    assert big == [
        "aten._log_softmax.default",
        "aten._log_softmax_backward_data.default",
        "aten.nll_loss_backward.default",
    ]
    copies = Fraction(counter.most - fp32 // 2, fp32)  # beyond the bf16 logits themselves
    assert int(copies) == timeline_view.CROSS_ENTROPY_COPIES == 3 and copies - 3 < Fraction(1, 1_000)


def test_the_counter_refuses_a_storage_it_never_saw_made():
    outside = torch.zeros(4)
    with LiveBytes() as counter, pytest.raises(RuntimeError, match="never saw made"):
        counter.counted([outside])


def test_pytorchs_own_mem_tracker_agrees_with_the_counter():
    # An independent count: torch.distributed._tools.mem_tracker.MemTracker tracks the same step of a small
    # MLP with foreach Adam, told beforehand of the model, the optimizer and the batch. Its level after the
    # step and its peak during it equal the counter's, to the byte.
    from torch.distributed._tools.mem_tracker import MemTracker

    def step(model, optimizer, x):
        optimizer.zero_grad(set_to_none=True)
        model(x).pow(2).mean().backward()
        optimizer.step()

    with LiveBytes() as counter:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
        optimizer, x = torch.optim.Adam(model.parameters(), foreach=True), torch.randn(32, 32)
        step(model, optimizer, x)  # Adam's state exists from here on
        counter.mark("step")
        tracker = MemTracker()
        tracker.track_external(model, optimizer, x)
        with tracker:
            step(model, optimizer, x)
        counter.mark(None)
    cpu = torch.device("cpu")
    level, peak = (tracker.get_tracker_snapshot(kind)[cpu]["Total"] for kind in ("current", "peak"))
    assert (level, peak) == (counter.level, counter.spans[0].peak)
    assert peak - level > 4 * 2112  # foreach Adam's sqrt(v) over every parameter, among others


def test_unknown_timelines_are_refused_before_any_rank_starts():
    with pytest.raises(ValueError, match="steps must be a tuple of timeline keys from step_ddp, .*got"):
        lab.run((1,), steps=("nonsense",))


@pytest.fixture(scope="module")
def measured():
    """Every setup's timeline on 1, 2 and 4 ranks: from the session's kept lab run, else measured alone."""
    modes = tuple(lab.MODE_NAMES) if os.environ.get(reuse.ENV) else ()
    results, _ = lab.run((1, 2, 4), modes=modes, steps=tuple(lab.STEP_NAMES))
    return results.timelines


@pytest.fixture(scope="module")
def rows(measured):
    return compare(measured)


def test_every_setup_rank_and_world_size_was_measured(measured):
    found = {(m.key, m.gpus, m.rank) for m in measured}
    assert found == {(key, n, r) for key in lab.STEP_NAMES for n in (1, 2, 4) for r in range(n)}
    assert all(m.unseen == 0 for m in measured)  # no storage appeared that no op was seen making


def test_the_counter_counts_what_the_labs_snapshot_counts(measured):
    # At each boundary the lab's own snapshot (counting.by_field over the same tensors) and the counter's
    # tracked bytes for those storages agree, byte for byte, on every rank.
    for m in measured:
        for b in m.boundaries:
            held = b.held
            snapshot = held.weights + held.gradients + held.optimizer + held.step_counters + held.other
            assert b.counted == snapshot > 0, (m.key, m.gpus, m.rank, b.name)


def test_the_phases_are_marked_in_step_order(measured):
    m = next(m for m in measured if m.key == "step_ddp" and m.gpus == 2)
    forward = [f"forward {kind} {i}" for i in (1, 2, 3) for kind in ("linear", "relu")] + ["forward linear 4"]
    backward = ["backward linear 4"] + [
        f"backward {kind} {i}" for i in (3, 2, 1) for kind in ("relu", "linear")
    ]
    assert [s.name for s in m.spans] == [
        "start of step",
        "before forward",
        *forward,
        "loss",
        *backward,
        "gradient reduction",
        "before optimizer step",
        "optimizer step",
        "after optimizer step",
    ]


def test_boundaries_equal_the_model_exactly(rows):
    boundaries = [r for r in rows if r.kind == "boundary"]
    assert len(boundaries) == len(lab.STEP_NAMES) * 3 * 3
    wrong = [
        (r.key, r.gpus, r.phase, r.model, r.measured) for r in boundaries if set(r.measured) != {r.model}
    ]
    assert wrong == []


def test_what_the_snapshot_does_not_see_is_the_models_buckets_and_fsdp2s_mesh(measured):
    # Beyond the lab's snapshot and the batch, a boundary holds DDP's buckets and stage 3's bucket (the
    # model counts both) and FSDP2's DeviceMesh (which it leaves out): nothing else.
    for m in measured:
        setup, phases = BY_KEY[m.key], modelled(BY_KEY[m.key], m.gpus)
        for b in m.boundaries:
            expected = phases.phase(b.name).bytes_of("gradient buckets") + mesh_bytes(setup, m.gpus)
            assert sum(n for _, n in b.beyond) == expected, (m.key, m.gpus, m.rank, b.name, b.beyond)


def test_every_peak_is_at_or_above_the_model_within_the_tolerance(rows):
    peaks = [r for r in rows if r.kind != "boundary"]
    assert len(peaks) == sum(len(modelled(s, n).phases) - 3 for s in BY_KEY.values() for n in (1, 2, 4))
    assert [r for r in peaks if not r.holds] == [], "\n" + table(rows)


def test_the_loss_which_the_model_leaves_out_rises_by_four_fp32_logits(measured):
    # The planning model leaves out the logits and the loss; here the logits are as wide as a layer, so the
    # loss's stretch holds four fp32 copies at once (the square, the mean's gradient, the square's gradient
    # and its factor), in bf16 also the cast's gradient, and the loss with its seed. DeepSpeed's ranks peak
    # here on 2 and 4 ranks: the step's highest point is in a stretch the model does not describe.
    logits = SPEC.batch * SPEC.widths[-1]
    for m in measured:
        loss = m.span("loss")
        bf16 = BY_KEY[m.key].dtype_bytes == 2
        assert loss.peak - loss.level == 4 * 4 * logits + (2 * logits + 16 if bf16 else 8), (m.key, m.gpus)


def test_the_tolerance_is_small_beside_the_step(rows):
    # No tolerance exceeds four activation-sized tensors, or two and three buckets; the peak is far above it.
    for r in rows:
        setup = BY_KEY[r.key]
        output = SPEC.batch * SPEC.widths[1] * setup.dtype_bytes
        assert r.tolerance <= max(4 * output, 2 * output + 3 * BUCKET * 2 + 64)
        assert r.tolerance < modelled(setup, r.gpus).peak.total / 4
    assert allowances(BY_KEY["step_ddp"], "boundary") == ()


def test_the_timeline_adds_at_most_thirty_seconds_to_the_lab_matrix(measured):
    # The ranks run in step, so each world size adds its slowest rank's time; start-up is the lab's own.
    if not os.environ.get(reuse.ENV):
        pytest.skip("measured alone, the timelines also pay the start-up the lab's modes pay in a full run")
    added = sum(
        max(sum(m.seconds for m in measured if m.gpus == n and m.rank == r) for r in range(n))
        for n in (1, 2, 4)
    )
    print(f"\nstep timelines: {added:.1f} s inside the lab's ranks")
    assert added <= BUDGET


def test_a_setup_measured_first_in_its_ranks_measures_the_same_step(measured):
    # FSDP2 measured alone is the first setup its ranks build. Its first step imports Dynamo, and an import
    # under the counter left a reference cycle holding that step's last reduce-scatter output: every stretch
    # of the measured step sat 4,224 B higher than when FSDP2 followed DDP. `measure` imports Dynamo first.
    alone, _ = lab.run((2,), modes=(), steps=("step_fsdp",))
    together = [m for m in measured if m.key == "step_fsdp" and m.gpus == 2]
    for first, after in zip(alone.timelines, together, strict=True):
        assert [(s.name, s.level, s.peak) for s in first.spans] == [
            (s.name, s.level, s.peak) for s in after.spans
        ]


def test_the_losss_copies_under_deepspeed_are_the_recorded_four_and_a_half(measured):
    """Lesson 12 reports timeline_view.DEEPSPEED_LOSS_COPIES for the lab's mean-square loss: the lab still
    measures it, on every DeepSpeed rank of every world size, and four under PyTorch's fp32 setups."""
    from zero_lessons.lab import timeline_view

    deepspeed = [m for m in measured if m.key.startswith("step_zero")]
    assert timeline_view.loss_copies(deepspeed) == timeline_view.DEEPSPEED_LOSS_COPIES == Fraction(9, 2)
    assert timeline_view.loss_copies([m for m in measured if m not in deepspeed]) == 4
