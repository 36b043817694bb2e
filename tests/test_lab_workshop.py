"""The three predict-then-measure exercises on real ranks: the lab measures what `check` grades against.

One case per exercise, each on two CPU ranks: the right answer passes against the measurement too,
and a typical slip gets the same feedback from the measurement as from the package's prediction.
"""

import time

import pytest

from conftest import need_module
from zero_lessons.workshop import check
from zero_lessons.workshop.measure import FAMILIES, compare, run_case
from zero_lessons.workshop.sheets import question

need_module("torch")
need_module("deepspeed")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_exercise_is_graded_against_a_real_run(family):
    seed = next(s for s in range(100) if dict(question(family, s).given)["gpus"] == 2)
    q = question(family, seed)
    start = time.monotonic()
    measured = run_case(q)
    print(f"{family}, seed {seed}, {dict(q.given)}: the lab ran in {time.monotonic() - start:.1f} s")
    right = compare(q, q.answers(), measured)
    assert right.correct and right.note == "the lab measured exactly what the package predicts.", right
    part = next(p for p in q.parts if p.slips)
    slip = part.slips[0]
    wrong = q.answers() | {part.name: float(slip.value)}
    against_lab, against_prediction = compare(q, wrong, measured), check(seed, family, wrong)
    assert not against_lab.correct and against_lab.marks == against_prediction.marks
    assert next(m for m in against_lab.marks if m.part == part.name).slip == slip.key
