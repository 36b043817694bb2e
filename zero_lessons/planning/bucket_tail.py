"""How long a copy made bucket by bucket runs past the stretch of compute it hides behind.

A GPU's `elements` gradient elements arrive evenly over `window` seconds and go down bucket by bucket: a
bucket is copied once its last element has arrived, the last bucket at the window's end, and the link copies
one bucket after another, `copy` seconds an element. Where the bucket boundaries fall against the GPU's
elements depends on the model's tensors, so `tail` gives the least and the most the copies run past the
window's end, over every place of the first boundary.

The link finishes at the latest, over the buckets, of a bucket's ready time plus the copy of it and of every
bucket after it. For the full buckets between the first and the last, that sum is linear in the bucket's
index, so the latest is the first bucket, the first or last full one, or the final one: four lines in the
first boundary's place. Their maximum is convex between the places where a boundary meets the end, so its
least lies at a segment's end or where two lines cross, and its most at a segment's end: `tail` tries those.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations

from .. import checks


def _lines(elements: Fraction, bucket: Fraction, full: int, arrive: Fraction, copy: Fraction):
    """The finish-time candidates as (slope, intercept) in the first boundary's place x, with `full` more
    boundaries, a bucket apart, after it and before the end."""
    lines = [(arrive, elements * copy), (-copy, elements * arrive + (elements - full * bucket) * copy)]
    if full:  # the first full bucket, ending at x + bucket, and the last, ending at x + full × bucket
        lines.append((arrive - copy, bucket * arrive + elements * copy))
        lines.append((arrive - copy, full * bucket * arrive + (elements - full * bucket + bucket) * copy))
    return lines


def _segments(elements: Fraction, bucket: Fraction) -> list[tuple[Fraction, Fraction, int]]:
    """The first boundary's places, (low, high, boundaries after it before the end), split where a
    boundary meets the end; a place at or past the end leaves one bucket, the whole shard."""
    top = min(bucket, elements)
    cuts = sorted({Fraction(0), top, *([elements % bucket] if 0 < elements % bucket < top else [])})
    out = []
    for low, high in zip(cuts, cuts[1:], strict=False):
        middle = (low + high) / 2
        out.append((low, high, -(-(elements - middle) // bucket) - 1))
    return out


def tail(elements, bucket, window, copy) -> tuple[Fraction, Fraction]:
    """The least and the most seconds the copies of `elements` gradient elements (a shard Ψ/N, so
    possibly a fraction), in buckets of `bucket` of them, run past the end of the `window` seconds they
    arrive in, at `copy` seconds an element."""
    elements = checks.amount("elements", elements, positive=True, high=(checks.MAX_PARAMS, "10**15"))
    bucket = checks.amount("bucket", bucket, positive=True, high=(checks.MAX_PARAMS, "10**15"))
    window, copy = checks.amount("window", window), checks.amount("copy", copy, positive=True)
    arrive, found = window / elements, []
    for low, high, full in _segments(elements, bucket):
        lines = _lines(elements, bucket, full, arrive, copy)
        places = {low, high}
        places |= {(b2 - b1) / (s1 - s2) for (s1, b1), (s2, b2) in combinations(lines, 2) if s1 != s2}
        found += [max(s * x + b for s, b in lines) for x in places if low <= x <= high]
    if bucket > elements:  # a first boundary past the end: one bucket, copied after the window
        found.append(elements * arrive + elements * copy)
    end = elements * arrive
    return min(found) - end, max(found) - end
