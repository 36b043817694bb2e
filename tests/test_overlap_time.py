"""`planning.overlap_time`: what `overlap_comm` and stage 3's prefetch do to a step's time, worked by hand for
the 7.5 B model on 8 GPUs (Ψ = 7,493,452,032), 2,048 tokens per GPU at 150 TFLOP/s."""

from fractions import Fraction

import pytest

from zero_lessons.planning import ds_scale, overlap_time

PSI = 7_493_452_032
STEP = {"tokens_per_gpu": 2_048, "flops_per_second": 150 * 10**12}


def test_overlap_comm_hides_the_reductions_behind_the_backward_pass_on_a_fast_link():
    found = overlap_time.overlap_comm(2, bandwidth="450 GB/s", **STEP)
    rate = 450 * 10**9
    assert found.compute == Fraction(6 * PSI * 2_048, 150 * 10**12)
    assert found.backward == found.compute * 2 / 3
    # DeepSpeed's bucket all-reduces cover Ψ elements, sent twice over by the paper's count, 2 B each
    assert found.reductions == Fraction(2 * 2 * PSI, rate) and found.gather == Fraction(2 * PSI, rate)
    assert found.reductions < found.backward  # so, on, they hide whole
    assert found.off == found.compute + found.reductions + found.gather
    assert found.on == found.compute + found.gather and found.saved == found.reductions
    assert [round(float(v), 3) for v in (found.compute, found.reductions, found.off)] == [0.614, 0.067, 0.714]


def test_on_a_slow_link_overlap_comm_saves_at_most_the_backward_pass():
    found = overlap_time.overlap_comm(2, bandwidth="100 Gb/s", **STEP)
    assert found.reductions == Fraction(4 * PSI * 8, 100 * 10**9) > found.backward
    assert found.saved == found.backward  # the reductions outlast the pass they run beside
    assert found.on == found.compute + found.reductions - found.backward + found.gather


def test_stage_1_sends_what_stage_2_sends_and_the_knobs_reach_deepspeeds_rules():
    one, two = (overlap_time.overlap_comm(s, bandwidth="450 GB/s", **STEP) for s in (1, 2))
    assert (one.reductions, one.gather) == (two.reductions, two.gather)
    bigger = overlap_time.overlap_comm(
        2, bandwidth="450 GB/s", knobs=ds_scale.Knobs(reduce_bucket_size=10**8), **STEP
    )
    assert bigger.reductions == two.reductions  # smaller buckets, the same elements in all


def test_stage_3_without_prefetching_waits_for_more_all_gathers():
    default = overlap_time.stage3_time(bandwidth="450 GB/s")
    off = overlap_time.stage3_time(ds_scale.Knobs(prefetch_bucket_size=0), bandwidth="450 GB/s")
    capped = overlap_time.stage3_time(ds_scale.Knobs(max_live_parameters=10**8), bandwidth="450 GB/s")
    predicted = {  # all-gather elements by ds_scale's own messages
        k: sum(n for op, n in ds_scale.predict(knobs=k)[3].messages if op == "all_gather")
        for k in (ds_scale.Knobs(), ds_scale.Knobs(prefetch_bucket_size=0))
    }
    assert default.gathered == predicted[ds_scale.Knobs()] < off.gathered
    assert off.gathered == predicted[ds_scale.Knobs(prefetch_bucket_size=0)] == capped.gathered
    assert default.gathers == Fraction(2 * default.gathered, 450 * 10**9)
    assert default.scatters == Fraction(2 * PSI, 450 * 10**9)
    assert round((off.gathered - default.gathered) / PSI, 2) == 0.06  # gathered again: 6% of Ψ more


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: overlap_time.overlap_comm(3, bandwidth="450 GB/s", **STEP), ValueError, "stage must be"),
        (lambda: overlap_time.overlap_comm(2, bandwidth="fast", **STEP), ValueError, "bandwidth"),
        (
            lambda: overlap_time.overlap_comm(
                2, bandwidth="450 GB/s", tokens_per_gpu=0, flops_per_second=1e12
            ),
            ValueError,
            "tokens",
        ),
        (lambda: overlap_time.stage3_time("default", bandwidth="450 GB/s"), TypeError, "knobs must be"),
    ],
)
def test_bad_input_gets_a_one_line_error(call, error, message):
    with pytest.raises(error, match=message) as raised:
        call()
    assert "\n" not in str(raised.value)
