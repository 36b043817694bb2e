"""`planning.bucket_tail`: how long a bucketed copy runs past the compute it hides behind, set against a
first-in first-out simulation of the link and against closed forms worked by hand."""

import math
import random
from fractions import Fraction

import pytest

from zero_lessons.planning.bucket_tail import tail


def fifo(elements: int, bucket, first, window, copy) -> Fraction:
    """The link, simulated: buckets end at `first`, `first` + bucket, ... and at `elements`; each is ready
    when its last element arrives (evenly over `window`), and the link copies them one after another."""
    arrive = Fraction(window) / elements
    ends = [
        first + i * bucket for i in range(math.ceil(elements / bucket) + 2) if first + i * bucket < elements
    ]
    link, start = Fraction(0), Fraction(0)
    for end in [*ends, elements]:
        link = max(link, end * arrive) + (end - start) * copy
        start = end
    return link - elements * arrive


def test_a_link_faster_than_the_gradients_leaves_at_most_one_full_bucket_after_the_pass():
    """Lesson 08's stage 3: 9.375e8 elements of a GPU's own arrive over the 1.2288 s backward pass, copied
    at 8 B / 25 GB/s; its slice of a bucket is 5e8 / 8. At the most a full slice is reduced at the pass's end:
    6.25e7 × 3.2e-10 = 0.02 s. At the least the last two buckets' copies balance: a final bucket of
    r = B·c/α elements, so B·c²/α = 0.0048828125 s."""
    elements, bucket, window, copy = (
        937_500_000,
        Fraction(5 * 10**8, 8),
        Fraction("1.2288"),
        Fraction(8, 25 * 10**9),
    )
    arrive = window / elements
    least, most = tail(elements, bucket, window, copy)
    assert most == bucket * copy == Fraction(2, 100)
    assert least == bucket * copy**2 / arrive == Fraction("0.0048828125")


def test_a_link_slower_than_the_gradients_waits_for_the_first_bucket_and_never_catches_up():
    """Lesson 08's stage 2 without recomputation: 9.375e8 elements over the last 1/8 of a 0.8192 s pass
    (0.1024 s), copied at 4 B / 25 GB/s, slower than they arrive. At the most the first bucket is full
    (5e8 elements, ready after 5e8·α) and the link then runs to the end: 5e8·α + E·c − E·α = 0.1022 s, more
    than the 0.0476 s by which the whole trip outlasts its window."""
    elements, bucket, window, copy = 937_500_000, 5 * 10**8, Fraction("0.1024"), Fraction(4, 25 * 10**9)
    arrive = window / elements
    least, most = tail(elements, bucket, window, copy)
    assert most == bucket * arrive + elements * (copy - arrive) == Fraction(3833, 37500)
    assert least >= elements * (copy - arrive) == Fraction("0.0476")


def test_one_bucket_for_the_whole_shard_copies_it_all_after_the_pass_at_the_most():
    """A bucket no smaller than the shard: at the most it holds all of it, ready at the end (E·c). At the
    least one boundary splits it where the two halves' copies balance: E·c²/(α + c)."""
    elements, bucket, window, copy = 1_000, 4_000, Fraction(1, 10), Fraction(1, 10**4)
    arrive = window / elements
    least, most = tail(elements, bucket, window, copy)
    assert most == elements * copy == Fraction(1, 10)
    assert least == elements * copy**2 / (arrive + copy) == Fraction(1, 20)


def test_the_range_brackets_a_simulated_link_wherever_the_buckets_fall():
    """Random shards, buckets and rates: every place of the first boundary simulated lies in the range, and
    the range's ends are within one grid step of the simulated least and most."""
    rng = random.Random(14)
    for _ in range(60):
        elements, bucket = rng.randint(1, 10**5), rng.randint(1, 10**5)
        window, copy = Fraction(rng.randint(0, 10**3), 10**3), Fraction(rng.randint(1, 10**3), 10**7)
        least, most = tail(elements, bucket, window, copy)
        steps = 97
        places = [min(Fraction(bucket * k, steps), Fraction(elements)) for k in range(1, steps + 1)]
        places += [Fraction(elements % bucket)] if elements % bucket else []
        found = [fifo(elements, bucket, x, window, copy) for x in places if x > 0]
        slack = Fraction(bucket, steps) * (window / elements + copy) * 2
        assert least <= min(found) <= least + slack and most - slack <= max(found) <= most


@pytest.mark.parametrize(
    "args, words",
    [
        ((0, 10, 1, 1), "elements must be a number > 0"),
        ((10, 0, 1, 1), "bucket must be a number > 0"),
        ((10, 10, -1, 1), "window must be"),
        ((10, 10, 1, 0), "copy must be a number > 0"),
        ((10, 10, "soon", 1), "window must be"),
    ],
)
def test_bad_input(args, words):
    with pytest.raises((ValueError, TypeError), match=words):
        tail(*args)
