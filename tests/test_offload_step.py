"""One offload step in seconds: the trips down hide behind the backward pass; the rest waits."""

from fractions import Fraction

import pytest

from zero_lessons import units
from zero_lessons.planning import bucket_tail, counts, offload_step

PSI = 7_500_000_000
SHARD = PSI // 8  # 9.375e8 elements a GPU owns on 8 GPUs


def tail(window, per_element, bucket=offload_step.BUCKET_ELEMENTS, elements=SHARD):
    """What `bucket_tail` says a trip adds, least and most, for these hand-worked inputs."""
    return bucket_tail.tail(elements, bucket, Fraction(window), Fraction(per_element))


def test_the_articles_model_worked_by_hand():
    """7.5 B on 8 GPUs, 4,096 tokens each at 150 TFLOP/s, 25 GB/s: compute 6Ψ × 4,096 / 1.5e14 = 1.2288 s;
    down 4 B × Ψ/8 / 25 GB/s = 0.15 s, run bucket by bucket in the backward pass's last 1/8 (0.8192 / 8 =
    0.1024 s, when the first layers' GPU gets its gradients), so it adds what its buckets leave after that:
    at least the 0.0476 s by which it outlasts it; Adam 10 s × 7.5/18; back 2 B × Ψ/8 / 25 GB/s = 0.075 s."""
    step = offload_step.step(PSI, 8, 4096, 150 * 10**12, "25 GB/s")
    compute, down, adam, back = step.phases
    assert (compute.seconds, down.seconds, back.seconds) == (
        Fraction("1.2288"),
        Fraction(3, 20),
        Fraction(3, 40),
    )
    least, most = tail("0.1024", Fraction(4, 25 * 10**9))
    assert (down.adds, down.most) == (least, most) and least > Fraction("0.0476")
    assert adam.seconds == Fraction(25, 6) and adam.estimated
    assert step.total == Fraction("1.2288") + least + Fraction(25, 6) + Fraction(3, 40)
    assert step.most == step.total - least + most
    assert step.rows()[2][3] == (
        "partly: it outlasts the backward pass's last 1/8, when the first layers' gradients arrive"
    )
    counted = [units.format_number(Fraction("1.3038") + x) for x in (least, most)]  # compute and back
    assert step.rows()[-1][-1].startswith(
        f"**{counted[0]} to {counted[1]} + the CPU's step** (guess: about 5."
    )
    assert step.rows()[3][2] == "guess: about 4.2"
    # the table itself says where the CPU's step comes from; a measured one is not labelled
    assert step.rows()[3][0] == "the CPU's Adam step (measure it; guessed here from one slow report)"


def test_a_small_batch_lets_the_gradients_outlast_the_backward_pass():
    """256 tokens: compute 0.0768 s, backward two thirds of it (0.0512 s), its last 1/8 0.0064 s; the 0.15 s
    trip adds at least 0.1436. On one GPU the whole backward pass is the window: at least 1.2 − 0.8192."""
    step = offload_step.step(PSI, 8, 256, 150 * 10**12, "25 GB/s", cpu_step=2)
    least, _ = tail("0.0064", Fraction(4, 25 * 10**9))
    assert step.phases[1].adds == least >= Fraction("0.1436") and not step.phases[2].estimated
    assert step.total == Fraction("0.0768") + least + 2 + Fraction("0.075") and step.table().count("\n") == 6
    one = offload_step.step(PSI, 1, 4096, 150 * 10**12, "25 GB/s", stage=1, cpu_step=2)  # no slices
    assert (one.phases[1].adds, one.phases[1].most) == tail("0.8192", Fraction(4, 25 * 10**9), elements=PSI)
    assert one.phases[1].adds >= Fraction("1.2") - Fraction("0.8192")  # 4 B × Ψ at 25 GB/s, the whole pass
    assert one.phases[1].why == "partly: it outlasts the backward pass"


def test_stage_3_adds_a_16_bit_round_trip_that_still_hides():
    """stage3.py's partition_grads: 2 B down to the host buffer, 2 B back, then 4 B of fp32 down: 8 B × Ψ/8
    at 25 GB/s = 0.3 s, inside the backward pass's 0.8192 s, as each GPU gets a slice of every gradient; only
    its last slices of a bucket (5e8 / 8 elements) end after it, so the step is shorter than stage 2's."""
    zero2 = offload_step.step(PSI, 8, 4096, 150 * 10**12, "25 GB/s")
    zero3 = offload_step.step(PSI, 8, 4096, 150 * 10**12, "25 GB/s", stage="ZeRO-3")
    trips = zero3.phases[1]
    assert (trips.pcie, trips.seconds) == (8, Fraction(3, 10))
    assert (trips.adds, trips.most) == tail("0.8192", Fraction(8, 25 * 10**9), Fraction(5 * 10**8, 8))
    assert trips.most == Fraction(5 * 10**8, 8) * 8 / (25 * 10**9)  # one full slice of a bucket: 0.02 s
    assert trips.pcie + zero3.phases[3].pcie == 10  # offload.deepspeed_pcie_bytes's 10 B at stage 3
    assert (
        zero2.total - zero3.total == zero2.phases[1].adds - trips.adds > 0  # stage 2's first-layer GPU waits
        and offload_step.step(PSI, 8, 4096, 10**14, 10**9, stage=1).phases[1].pcie == 4
    )
    small = offload_step.step(PSI, 8, 256, 150 * 10**12, "25 GB/s", stage=3, cpu_step=1)
    assert small.phases[1].adds >= Fraction("0.3") - Fraction("0.0512")  # the backward pass of 256 tokens


def test_parameter_offload_brings_the_weights_up_for_each_pass_and_none_back():
    """70 B on 8 GPUs, 4,096 tokens each at 150 TFLOP/s, 25 GB/s: a shard is 8.75e9 elements. Its weights
    come up for the forward pass, 2 B × 8.75e9 / 25 GB/s = 0.7 s, inside that pass's third of 11.4688 s; the
    backward pass's 10 B (8 of gradient trips, 2 of weights again) take 3.5 s, inside its two thirds, all
    but its last buckets' copies. Nothing comes back after the CPU's step, at least 28 B × 70e9 / 200 GB/s =
    9.8 s."""
    params = 70 * 10**9
    step = offload_step.step(
        params, 8, 4096, 150 * 10**12, "25 GB/s", stage=3, host_bandwidth="200 GB/s", parameters=True
    )
    compute, up, backward, adam = step.phases
    assert compute.seconds == Fraction("11.4688") and adam.floor == Fraction("9.8")
    assert (up.pcie, up.seconds, up.adds) == (2, Fraction("0.7"), 0)
    assert (backward.pcie, backward.seconds) == (10, Fraction("3.5"))
    window, per_element = Fraction("11.4688") * 2 / 3, Fraction(10, 25 * 10**9)
    assert (backward.adds, backward.most) == tail(window, per_element, Fraction(5 * 10**8, 8), params // 8)
    assert backward.most == Fraction(5 * 10**8, 8) * per_element  # a full slice of a bucket: 0.025 s
    assert up.pcie + backward.pcie == max(counts.PARAMS_PCIE)  # the cautious end of the range, 10 to 12
    assert step.total == compute.seconds + backward.adds + adam.seconds
    assert "at least 21.28 to 21.29" in step.table()  # 11.4688 + the last buckets + 9.8
    slow = offload_step.step(params, 8, 4096, 150 * 10**12, "1 GB/s", stage=3, cpu_step=10, parameters=True)
    assert slow.phases[1].adds == Fraction(17.5) - Fraction("11.4688") / 3  # the forward pass waits on PCIe


def test_the_cpu_step_has_a_floor_in_host_memory_bandwidth():
    """28 B per parameter (read weight, gradient, two moments; write three back): 7.5e9 × 28 B at 200 GB/s =
    1.05 s, below the scaled report's 4.17 s; twice the bandwidth halves it."""
    floor = offload_step.cpu_adam_floor(PSI, "200 GB/s")
    assert floor == Fraction(21, 20) and offload_step.CPU_ADAM_BYTES == 4 * 4 + 3 * 4
    assert (
        floor < offload_step.cpu_adam_seconds(PSI)
        and offload_step.cpu_adam_floor(PSI, 4 * 10**11) == floor / 2
    )
    with pytest.raises(ValueError, match="params_per_node must be"):
        offload_step.cpu_adam_floor(0, "200 GB/s")
    with pytest.raises(ValueError, match="bandwidth"):
        offload_step.cpu_adam_floor(PSI, "fast")


def test_the_step_table_gives_the_cpu_step_its_floor_instead_of_the_guess():
    """With host_bandwidth the CPU's row reads 'at least 1.05' and the step 'at least 2.40' (1.351 counted +
    1.05); the probably-too-slow report's 4.2 s is not shown beside it."""
    step = offload_step.step(PSI, 8, 4096, 150 * 10**12, "25 GB/s", host_bandwidth="200 GB/s")
    adam = step.phases[2]
    assert adam.floor == offload_step.cpu_adam_floor(PSI, "200 GB/s") == Fraction(21, 20) and adam.estimated
    assert (
        adam.seconds == adam.adds == adam.floor
        and step.total == Fraction("1.2288") + step.phases[1].adds + Fraction("0.075") + adam.floor
    )
    assert step.rows()[3][2] == "at least 1.05" and "guess" not in step.table()
    assert step.rows()[3][0] == f"the CPU's Adam step ({offload_step.FLOOR})"
    assert step.rows()[-1][-1].endswith("+ the CPU's step** (at least 2.44 to 2.46)")
    measured = offload_step.step(PSI, 8, 4096, 150 * 10**12, "25 GB/s", cpu_step=2, host_bandwidth=10**11)
    # a measurement wins
    assert measured.phases[2].floor is None and measured.rows()[-1][-1] == "**3.389 to 3.406**"
    with pytest.raises(ValueError, match="host_bandwidth"):  # checked even when a measurement makes it unused
        offload_step.step(PSI, 8, 4096, 150 * 10**12, "25 GB/s", cpu_step=2, host_bandwidth="quick")
    two_nodes = offload_step.step(PSI, 16, 4096, 150 * 10**12, "25 GB/s", host_bandwidth="200 GB/s")
    assert two_nodes.phases[2].floor == Fraction(21, 40)  # each node's CPUs update half of Ψ


def test_the_cpu_step_scales_with_the_parameters_one_node_updates():
    assert offload_step.cpu_adam_seconds(18 * 10**9) == 10  # the issue's own figure
    two_nodes = offload_step.step(PSI, 16, 4096, 150 * 10**12, "25 GB/s")
    assert two_nodes.phases[2].seconds == Fraction(25, 12)  # each node's CPUs update half of Ψ


def test_full_recomputation_runs_8_psi_per_token_three_quarters_in_the_backward_pass():
    """A 70 B case: recomputing every layer makes the compute 8Ψ FLOPs per token (15.292 s), the
    backward pass 6Ψ of them; the trips still hide but for their last buckets, and the CPU's floor (9.8 s)
    adds on top: 25.10 s at the least."""
    big = offload_step.step(70 * 10**9, 8, 4096, 150 * 10**12, "25 GB/s", stage=3, host_bandwidth="200 GB/s",
                            parameters=True, recompute=True)  # fmt: skip
    compute = big.phases[0].seconds
    assert compute == Fraction(8 * 70 * 10**9 * 4096, 150 * 10**12) and round(float(compute), 3) == 15.292
    assert big.backward_share == Fraction(3, 4) and big.phases[1].adds == 0 < big.phases[2].adds < Fraction(
        3, 100
    )
    assert round(float(big.total), 2) == 25.1 and big.phases[3].seconds == Fraction(
        28 * 70 * 10**9, 200 * 10**9
    )
    plain = offload_step.step(PSI, 8, 4096, 150 * 10**12, "25 GB/s", host_bandwidth="200 GB/s")
    redone = offload_step.step(
        PSI, 8, 4096, 150 * 10**12, "25 GB/s", host_bandwidth="200 GB/s", recompute=True
    )
    assert redone.phases[0].seconds == plain.phases[0].seconds * 8 / 6
    window = redone.phases[0].seconds * Fraction(3, 4) / 8  # stage 2: the backward pass's last 1/8
    assert (
        redone.phases[1].seconds < window and redone.phases[1].adds < plain.phases[1].adds
    )  # now it fits its window, all but the last buckets' copies
    assert redone.phases[1].most == offload_step.BUCKET_ELEMENTS * Fraction(
        4, 25 * 10**9
    )  # a full bucket: 0.08 s


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"cpu_step": 0}, "cpu_step must be a number > 0"),
        ({"cpu_step": 10**6}, "cpu_step must be at most"),
        ({"tokens_per_gpu": 0}, "tokens_per_gpu must be"),
        ({"bandwidth": "fast"}, "bandwidth"),
        ({"stage": 0}, "offload needs a partitioned optimizer: stage must be 1, 2 or 3, got 0"),
        ({"host_bandwidth": "quick"}, "host_bandwidth"),
        ({"stage": 5}, "stage must be 0, 1, 2 or 3"),
        ({"parameters": True}, "parameter offload needs stage 3, got ZeRO-2"),
        ({"stage": 3, "parameters": "yes"}, "parameters must be True or False"),
        ({"recompute": 1}, "recompute must be True or False"),
    ],
)
def test_bad_input(kwargs, words):
    args = {"params": PSI, "gpus": 8, "tokens_per_gpu": 4096, "flops_per_second": 10**14, "bandwidth": 10**9}
    with pytest.raises((ValueError, TypeError), match=words):
        offload_step.step(**(args | kwargs))


def test_the_last_buckets_copies_give_each_trip_a_range_after_its_pass():
    """Stage 2 with every layer recomputed: the 0.15 s trip fits the pass's last 1/8 (1.2288 / 8 = 0.1536 s)
    bucket by bucket, but the link barely keeps up with the gradients, so about a bucket's copy (5e8 × 4 B at
    25 GB/s = 0.08 s) is always left after the pass: 0.074 to 0.08 s. Stage 3: each GPU's slice of a bucket,
    5e8 / 8 at 8 B, 0.02 s at the most. The rows show the range."""
    args = (PSI, 8, 4096, 150 * 10**12, "25 GB/s")
    zero2 = offload_step.step(*args, recompute=True, cpu_step=1)
    zero3 = offload_step.step(*args, stage=3, recompute=True, cpu_step=1)
    params = offload_step.step(*args, stage=3, parameters=True, recompute=True, cpu_step=1)
    assert offload_step.BUCKET_ELEMENTS == 5 * 10**8
    down = zero2.phases[1]
    assert (down.adds, down.most) == tail("0.1536", Fraction(4, 25 * 10**9)) and down.most == Fraction("0.08")
    assert round(float(down.adds), 3) == 0.074 and down.why.startswith(
        "partly: during the backward pass's last 1/8, when the first layers' gradients arrive, but"
    )
    assert (zero3.phases[1].adds, zero3.phases[1].most) == tail(
        "1.2288", Fraction(8, 25 * 10**9), 5 * 10**8 // 8
    )
    assert params.phases[1].most == 0 and params.phases[2].most == Fraction(5 * 10**8, 8) * 10 / (25 * 10**9)
    assert zero2.most - zero2.total == down.most - down.adds
    assert zero2.rows()[2][-1] == "0.074 to 0.08" and zero2.rows()[-1][-1] == "**2.788 to 2.793**"
    small = offload_step.step(1_500_000_000, 8, 4096, 150 * 10**12, "25 GB/s", recompute=True, cpu_step=1)
    assert small.phases[1].most == Fraction(1_500_000_000, 8) * 4 / (25 * 10**9)  # one bucket holds the shard
