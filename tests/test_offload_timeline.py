"""`present.offload_timeline`: each phase of an offloaded step placed in time, from `planning.offload_step`,
so that the drawing ends where the step's sum does and shows which trips hide and which the step waits for."""

from fractions import Fraction

import pytest

from zero_lessons.planning import offload_step
from zero_lessons.present.offload_timeline import LANES, plot_offload_steps, spans

PSI = 7_500_000_000  # lesson 08's model on 8 GPUs, 4,096 tokens per GPU at 150 TFLOP/s, PCIe at 25 GB/s
RATES = (PSI, 8, 4096, 150 * 10**12, "25 GB/s")


def step(**kw):
    return offload_step.step(*RATES, **kw)


STEPS = {
    "ZeRO-2": step(stage=2, host_bandwidth="200 GB/s"),
    "ZeRO-3": step(stage=3, host_bandwidth="200 GB/s"),
    "ZeRO-3, parameters": step(stage=3, parameters=True, host_bandwidth="200 GB/s"),
    "ZeRO-2, measured CPU step": step(stage=2, cpu_step=3),
    "ZeRO-2, guessed CPU step": step(stage=2),
}


@pytest.mark.parametrize("name", STEPS)
def test_the_drawing_ends_where_the_step_does(name):
    drawn = spans(STEPS[name])
    assert max(s.end for s in drawn) == STEPS[name].total
    assert all(s.lane in LANES and s.start < s.end for s in drawn)
    (cpu,) = [s for s in drawn if s.lane == "CPU"]
    trips_before = [s for s in drawn if s.lane == "PCIe" and s.start < cpu.start and not s.last]
    assert cpu.start == max(s.end for s in [*trips_before, *(s for s in drawn if s.lane == "GPU")])
    # a last bucket's outline runs from where its trip stops adding to where it adds the most
    outlines = [s for s in drawn if s.last]
    assert STEPS[name].total + sum(s.end - s.start for s in outlines) == STEPS[name].most


def test_stage_2_waits_for_the_first_layers_gradients():
    """Lesson 08's table: the trip runs in the backward pass's last 1/8; after the pass it is solid for what
    it adds at the least and outlined up to the most (its last buckets' copies), labelled after both."""
    compute = Fraction("1.2288")
    trip = STEPS["ZeRO-2"].phases[1]
    gpu, (hidden, down, last, back), cpu = (
        [s for s in spans(STEPS["ZeRO-2"]) if s.lane == lane] for lane in LANES
    )
    assert gpu[1].end == compute and gpu[0].end == compute / 3
    assert (hidden.start, hidden.end, hidden.spread) == (compute - compute * 2 / 3 / 8, compute, True)
    assert hidden.label == "4 B, 0.15 s of copies, from here on" and trip.adds > Fraction(
        "0.0476"
    )  # outlasts its window
    assert (down.start, down.end, down.spread, down.label) == (compute, compute + trip.adds, False, "")
    assert (last.start, last.end, last.last) == (down.end, compute + trip.most, True)
    assert last.label == "adds 0.085 to 0.102 s (its last buckets)"
    assert cpu[0].start == down.end and cpu[0].label == "the CPU's Adam step, at least 1.05 s"
    assert (back.start, back.label) == (cpu[0].end, "weights back: 2 B, 0.075 s")


def test_hidden_trips_spread_over_their_pass():
    compute = Fraction("1.2288")
    trips = [s for s in spans(STEPS["ZeRO-3, parameters"]) if s.lane == "PCIe" and s.spread]
    assert [(s.start, s.end, s.spread) for s in trips] == [
        (0, compute / 3, True),
        (compute / 3, compute, True),
    ]  # weights up in the forward pass; the backward pass's 10 B
    assert [s.label for s in trips] == ["2 B, 0.075 s", "10 B, 0.375 s of copies, from here on"]
    (three,) = [s for s in spans(STEPS["ZeRO-3"]) if s.lane == "PCIe" and s.spread]
    assert (three.start, three.end, three.label) == (
        compute / 3,
        compute,
        "8 B, 0.3 s of copies, from here on",
    )


def test_with_recomputation_the_forward_pass_is_a_quarter_of_the_compute():
    redone = offload_step.step(*RATES, stage=3, parameters=True, host_bandwidth="200 GB/s", recompute=True)
    forward, backward = [s for s in spans(redone) if s.lane == "GPU"]
    assert (
        forward.end == redone.phases[0].seconds / 4 == backward.start
        and backward.end == redone.phases[0].seconds
    )
    assert max(s.end for s in spans(redone)) == redone.total


def test_the_cpu_step_says_what_it_is():
    labels = {name: next(s.label for s in spans(st) if s.lane == "CPU") for name, st in STEPS.items()}
    assert labels["ZeRO-2, measured CPU step"] == "the CPU's Adam step, 3 s"
    assert labels["ZeRO-2, guessed CPU step"] == "the CPU's Adam step, about 4.167 s (a guess)"


def test_the_figure_has_a_panel_per_step_and_marks_its_end():
    fig = plot_offload_steps({k: STEPS[k] for k in ("ZeRO-2", "ZeRO-3")}, "title")
    assert len(fig.axes) == 2
    for ax, name in zip(fig.axes, ("ZeRO-2", "ZeRO-3"), strict=True):
        least = [line.get_xdata()[0] for line in ax.get_lines()]  # the least: a dashed line
        shaded = [patch.get_x() + patch.get_width() for patch in ax.patches if patch.get_alpha() == 0.3]
        assert least == [float(STEPS[name].total)] and ax.get_title(loc="left") == name
        assert shaded == [pytest.approx(float(STEPS[name].most))]  # shaded on to the most
        assert f"{float(STEPS[name].most):.3f} s" in " ".join(t.get_text() for t in ax.texts)
    with pytest.raises(TypeError, match="steps must be a non-empty dict of name -> Step"):
        plot_offload_steps({})
    with pytest.raises(TypeError, match="step must be"):
        spans("ZeRO-2")


def test_a_stage_2_trip_that_hides_is_drawn_in_the_last_1_over_n_only():
    """With 16 times the tokens, the 0.15 s trip fits the backward pass's last 1/8, and is drawn there; only
    its last buckets' copies, at most one bucket's 0.08 s, come after."""
    long = offload_step.step(PSI, 8, 16 * 4096, 150 * 10**12, "25 GB/s", stage=2, host_bandwidth="200 GB/s")
    (hidden,) = [s for s in spans(long) if s.lane == "PCIe" and s.spread]
    compute = long.phases[0].seconds
    assert long.phases[1].seconds < long.phases[1].window == compute * 2 / 3 / 8
    assert long.phases[1].adds < long.phases[1].most == Fraction(8, 100)
    assert (hidden.start, hidden.end) == (compute - compute * 2 / 3 / 8, compute)
