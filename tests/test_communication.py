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
