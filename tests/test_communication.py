"""Communication volumes against the ZeRO paper's section 7 counts."""

from fractions import Fraction

import pytest

from zero_lessons import communication as comm
from zero_lessons.stages import Stage

PSI = 7_500_000_000


def test_paper_volumes_in_elements():
    assert [comm.volume_elements(PSI, 8, s) for s in Stage] == [2 * PSI, 2 * PSI, 2 * PSI, 3 * PSI]
    assert comm.relative_to_dp(3) == Fraction(3, 2)
    assert comm.relative_to_dp(1) == comm.relative_to_dp(2) == 1


def test_all_reduce_is_reduce_scatter_plus_all_gather():
    dp = comm.collectives(Stage.DP)
    z1 = comm.collectives(Stage.ZERO1)
    assert [c.op for c in dp] == ["all-reduce"]
    assert [c.op for c in z1] == ["reduce-scatter", "all-gather"]
    assert sum(c.multiple for c in dp) == sum(c.multiple for c in z1)
    assert [c.op for c in comm.collectives(3)] == ["all-gather", "all-gather", "reduce-scatter"]


def test_ring_factor():
    assert comm.ring_factor(1) == 0
    assert comm.ring_factor(8) == Fraction(7, 8)
    assert comm.volume_elements(PSI, 8, 0, ring=True) == 2 * PSI * Fraction(7, 8)
    assert comm.volume_elements(PSI, 1, 3, ring=True) == 0


def test_bytes_and_time_at_a_bandwidth():
    assert comm.volume_bytes(PSI, 8, 0, "bf16") == 4 * PSI
    assert comm.volume_bytes(PSI, 8, 3, "fp32") == 12 * PSI
    # 30 GB over 100 Gb/s (12.5 GB/s) takes 2.4 s.
    assert comm.step_time(PSI, 8, 0, "100 Gb/s") == Fraction(12, 5)
    assert comm.step_time(PSI, 8, 3, 25 * 10**9, dtype=2) == Fraction(9, 5)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: comm.volume_bytes(PSI, 8, 0, "fp12"), "dtype must be one of"),
        (lambda: comm.volume_bytes(PSI, 8, 0, 0), "dtype bytes"),
        (lambda: comm.step_time(PSI, 8, 0, 0), "bandwidth must be a number > 0"),
        (lambda: comm.step_time(PSI, 8, 0, float("nan")), "bandwidth must be a finite"),
        (lambda: comm.volume_elements(PSI, 8, 5), "stage must be"),
        (lambda: comm.ring_factor(0), "gpus must be"),
    ],
)
def test_bad_communication_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_gradient_accumulation_breaks_the_one_and_a_half():
    # Four micro-batches: DP and stage 1 still talk once per step; stage 2 reduce-scatters each
    # micro-batch; stage 3 gathers and scatters every micro-batch.
    volumes = [comm.volume_elements(PSI, 8, s, micro_batches=4) for s in Stage]
    assert volumes == [2 * PSI, 2 * PSI, 5 * PSI, 12 * PSI]
    assert comm.volume_elements(PSI, 8, 3, micro_batches=1) == 3 * PSI
    with pytest.raises(ValueError, match="micro_batches"):
        comm.volume_elements(PSI, 8, 3, micro_batches=0)


def test_every_collective_has_a_phase_in_step_order():
    for plan in [comm.collectives(s) for s in Stage] + [comm.deepspeed_collectives(s) for s in Stage]:
        order = [comm.PHASES.index(c.phase) for c in plan]
        assert order == sorted(order)
    assert [c.phase for c in comm.collectives(3)] == ["forward", "backward", "backward"]
    with pytest.raises(ValueError, match="phase must be one of"):
        comm.Collective("all-gather", "weights", "sometime", "lunch")


def test_deepspeed_defaults_follow_the_lab_rules():
    # The DeepSpeed lab's prediction rules (lab/predict_deepspeed.py, pinned by the lab tests) give each
    # stage's steady-state messages; their bf16 elements, with the paper's ×2 for an all-reduce, are the
    # multiples of Ψ that deepspeed_collectives states (scalars such as the norm left out).
    from zero_lessons.lab import modes, predict_deepspeed
    from zero_lessons.lab.model import MODEL

    for key, stage in [("ds_zero0", 0), ("ds_zero1", 1), ("ds_zero2", 2), ("ds_zero3", 3)]:
        sent = sum(
            comm.multiple(m.op) * m.elements
            for m in predict_deepspeed.messages(modes.get(key), 4)
            if m.dtype == "bfloat16"
        )
        assert round(Fraction(sent, MODEL.param_count)) == comm.multiple_of_psi(
            comm.deepspeed_collectives(stage)
        )
    assert [comm.multiple_of_psi(comm.deepspeed_collectives(s)) for s in Stage] == [2, 3, 3, 2]
    assert [comm.multiple_of_psi(comm.collectives(s)) for s in Stage] == [2, 2, 2, 3]


def _replay(buffers, steps):
    """Run a ring schedule on numpy arrays, independently of the package's bookkeeping."""
    import numpy as np

    n = len(buffers)
    chunks = [np.array_split(b.astype(float), n) for b in buffers]
    for step in steps:
        moving = [chunks[r][c].copy() for r, c in enumerate(step.sends)]
        for r, c in enumerate(step.sends):
            dest = chunks[(r + 1) % n]
            dest[c] = dest[c] + moving[r] if step.phase == "reduce-scatter" else moving[r]
    return [np.concatenate(c) for c in chunks]


@pytest.mark.parametrize("gpus", [1, 2, 3, 4, 8])
def test_ring_steps_sum_every_buffer_in_two_n_minus_one_steps(gpus):
    import numpy as np

    from zero_lessons import simulate

    steps = comm.ring_steps(gpus)
    assert len(steps) == 2 * (gpus - 1)
    assert [s.phase for s in steps] == ["reduce-scatter"] * (gpus - 1) + ["all-gather"] * (gpus - 1)
    rng = np.random.default_rng(gpus)
    buffers = [rng.standard_normal(4 * gpus) for _ in range(gpus)]
    for result in _replay(buffers, steps):
        assert np.allclose(result, np.sum(buffers, axis=0))
    # One chunk of Ψ/N per rank per step: the same total the numpy brute force counts.
    assert len(steps) * (4 * gpus) // gpus == simulate.ring_all_reduce(buffers)[1]


def test_ring_holdings_track_ownership():
    held = comm.ring_holdings(4)
    assert len(held) == 2 * 3 + 1
    assert all(held[0][r][c] == {r} for r in range(4) for c in range(4))
    after_scatter = held[3]
    for r in range(4):  # each rank owns exactly one finished chunk, chunk (r + 1) mod 4
        assert [c for c in range(4) if after_scatter[r][c] == set(range(4))] == [(r + 1) % 4]
    assert all(chunk == set(range(4)) for row in held[-1] for chunk in row)
    with pytest.raises(ValueError, match="gpus must be"):
        comm.ring_steps(comm.MAX_RING_RANKS + 1)
