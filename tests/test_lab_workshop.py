"""The three predict-then-measure exercises on real ranks: the lab measures what `check` grades against.

Lesson 19's sheet (seed 45, every case on two CPU ranks) runs the lab once for its three cases, a PyTorch,
a DeepSpeed stage 1/2 and a DeepSpeed stage 3 setting in one set of ranks: the right answer passes against
each measurement, and a typical slip gets the same feedback from the measurement as from the prediction.
"""

import time

from conftest import need_module
from zero_lessons.workshop import sheet
from zero_lessons.workshop.measure import FAMILIES

need_module("torch")
need_module("deepspeed")

SEED = 45  #: the seed lesson 19 shows: its three cases all run on two ranks


def test_one_lab_run_grades_the_three_exercises_of_a_sheet():
    my = sheet(SEED, only=list(FAMILIES))
    assert {dict(q.given)["gpus"] for q in my.questions} == {2}
    first = next(iter(FAMILIES))
    start = time.monotonic()
    right = my.measure(first, my[first].answers())
    modes = [dict(q.given)["mode"] for q in my.questions]
    print(f"seed {SEED}: the lab ran {modes} in {time.monotonic() - start:.1f} s")
    assert set(my.measured) == set(FAMILIES)  # one run measured all three cases
    assert right.correct and right.note == "the lab measured exactly what the package predicts.", right
    for family in FAMILIES:
        q = my[family]
        again = time.monotonic()
        feedback = my.measure(family, q.answers())
        assert time.monotonic() - again < 5  # graded against the kept measurement, not a second run
        assert feedback.correct and feedback.note == "the lab measured exactly what the package predicts."
        part = next(p for p in q.parts if p.slips)
        slip = part.slips[0]
        wrong = q.answers() | {part.name: float(slip.value)}
        against_lab, against_prediction = my.measure(family, wrong), my.check(family, wrong)
        assert not against_lab.correct and against_lab.marks == against_prediction.marks
        assert next(m for m in against_lab.marks if m.part == part.name).slip == slip.key
