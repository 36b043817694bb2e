"""Every exercise accepts its answer in the usual spellings; typical wrong answers get the right feedback."""

import pytest

from zero_lessons import GB, GiB
from zero_lessons.exercises import EXERCISES, MISTAKES, UNANSWERED, check


def test_there_are_ten_to_fifteen_exercises_with_traps():
    assert 10 <= len(EXERCISES) <= 15
    assert all(ex.traps and ex.working and ex.prompt.endswith("?") for ex in EXERCISES.values())
    assert {trap[0] for ex in EXERCISES.values() for trap in ex.traps} <= set(MISTAKES)


@pytest.mark.parametrize(
    "exercise_id, answers",
    [
        ("article-zero1", [41.25, "41.25", "41.3", "41.25 GB", "41.25GB", "38.417 GiB"]),
        ("zero2-13b-16", ["37.375 GB", 37.4]),
        ("zero3-70b-64-gib", ["16.3", "16.298 GiB", "17.5 GB"]),
        ("dp-megatron-7b", [126, "126 GB"]),
        ("comm-dp-elements", ["15B", "15e9", 15_000_000_000, "15 billion"]),
        ("comm-zero3-bytes", ["78", "78 GB"]),
        ("zero2-ceiling", [8, "8x", "8"]),
        ("largest-zero3-8x80", ["40B", 40e9, "40 billion"]),
        ("fewest-gpus-70b", [14, "14"]),
        ("which-stage-24gb", [3, "ZeRO-3", "z3", "3", "stage 3", "ZeRO 3", "zero3", "Stage-3"]),
        ("offload-host-node", ["90 GB", 90]),
        ("offload-link-time", [0.15, "0.15 s", "0.15"]),
    ],
)
def test_right_answers_in_any_spelling(exercise_id, answers):
    for answer in answers:
        feedback = check(exercise_id, answer)
        assert feedback.correct and feedback.message == "Correct.", (answer, feedback.message)


@pytest.mark.parametrize(
    "exercise_id, answer, mistake",
    [
        ("article-zero1", 41.25 * GB / GiB, "gib-for-gb"),
        ("article-zero1", "26.25", "forgot-gradients"),  # 2 + 0 + 12/8 per parameter
        ("article-zero1", "28.125", "stage-confused"),
        ("article-zero1", "106.875", "wrong-states"),  # gradients divided, optimizer kept whole
        ("zero3-70b-64-gib", "17.5", "gb-for-gib"),
        ("dp-megatron-7b", "98", "forgot-gradients"),
        ("comm-dp-elements", "30B", "bytes-vs-elements"),
        ("comm-zero3-bytes", "39", "bytes-vs-elements"),
        ("comm-zero3-bytes", "52", "stage-confused"),
        ("zero2-ceiling", 4, "stage-confused"),
        ("largest-zero3-8x80", "42.95B", "gib-for-gb"),
        ("largest-zero3-8x80", "21.33B", "stage-confused"),
        ("fewest-gpus-70b", 13, "forgot-gradients"),
        ("which-stage-24gb", "ZeRO-2", "does-not-fit"),
        ("offload-host-node", 11.25, "per-gpu-not-node"),
        ("offload-link-time", 1.2, "node-not-per-gpu"),
        ("offload-link-time", 0.075, "one-direction"),
    ],
)
def test_typical_wrong_answers_get_the_intended_feedback(exercise_id, answer, mistake):
    feedback = check(exercise_id, answer)
    assert not feedback.correct and feedback.mistake == mistake
    if mistake != "does-not-fit":  # that one names the stage's own numbers (below)
        assert MISTAKES[mistake] in feedback.message


@pytest.mark.parametrize(
    "answer, said",
    [
        (2, "ZeRO-2 needs 28.125 GB per GPU, which does not fit in 24 GB"),
        ("stage 1", "ZeRO-1 needs 41.25 GB per GPU, which does not fit in 24 GB"),
        ("ZeRO 0", "data parallel needs 120 GB per GPU, which does not fit in 24 GB"),
        ("dp", "data parallel needs 120 GB per GPU, which does not fit in 24 GB"),
    ],
)
def test_a_stage_that_does_not_fit_is_named_with_its_numbers(answer, said):
    feedback = check("which-stage-24gb", answer)
    assert feedback.message == f"Not yet: {said}: take the lowest stage that fits."
    assert "different stage" not in feedback.message


def test_right_wrong_and_unanswered_differ_in_words_and_colour_not_only_an_emoji():
    right, wrong, blank = (check("which-stage-24gb", a) for a in ("ZeRO 3", "ZeRO-2", None))
    assert [f.state for f in (right, wrong, blank)] == ["correct", "not yet", "unanswered"]
    assert right.message == "Correct." and wrong.message.startswith("Not yet: ")
    assert blank.message == UNANSWERED and blank.message.startswith("Not answered yet: ")
    pages = [f._repr_html_() for f in (right, wrong, blank)]
    assert '<strong style="color: #1a7f37">Correct.</strong>' in pages[0]
    assert '<strong style="color: #b42318">Not yet:</strong>' in pages[1]
    assert '<strong style="color: #57606a">Not answered yet:</strong>' in pages[2]
    assert not any(mark in page for page in pages for mark in ("✅", "❌"))


def test_other_answers_and_working():
    assert check("article-zero1", None).message.startswith("Not answered yet")
    odd = check("article-zero1", 77)
    assert not odd.correct and odd.mistake is None and "show_working=True" in odd.message
    assert odd.message.startswith("Not yet: it does not match a common slip.")
    assert odd.working is None
    assert "41.25 GB" in check("article-zero1", 77, show_working=True).working
    assert check("article-zero1", "forty").message.startswith("Not yet: could not read that answer")
    assert "could not read" in check("comm-dp-elements", "lots").message
    with pytest.raises(ValueError, match="exercise_id must be one of"):
        check("no-such-exercise", 1)
