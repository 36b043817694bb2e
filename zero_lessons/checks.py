"""Input checks shared by every module: each names the field and the allowed range."""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Rational

#: Largest parameter count the exact model promises to handle (a quadrillion).
MAX_PARAMS = 10**15
#: Largest data-parallel degree the exact model promises to handle.
MAX_GPUS = 10**6


def whole(name: str, value: object, *, low: int = 1, high: int | None = None) -> int:
    """Return `value` as an int in [low, high], or raise an error that names `name`."""
    span = f"≥ {low}" if high is None else f"from {low:,} to {high:,}"
    if isinstance(value, bool) or not isinstance(value, (int, Fraction)):
        hint = " (floats are not exact; write an int such as 7_500_000_000)" if isinstance(value, float) else ""
        raise TypeError(f"{name} must be a whole number {span}, got {type(value).__name__} {value!r}{hint}")
    if isinstance(value, Fraction) and value.denominator != 1:
        raise ValueError(f"{name} must be a whole number {span}, got {value}")
    number = int(value)
    if number < low or (high is not None and number > high):
        got = f"{number:,}" if abs(number) < 10**21 else f"a {len(str(abs(number)))}-digit number"
        raise ValueError(f"{name} must be a whole number {span}, got {got}")
    return number


def amount(name: str, value: object, *, positive: bool = False) -> Fraction:
    """Return a finite real `value` ≥ 0 (or > 0) as an exact Fraction, or raise naming `name`."""
    need = "> 0" if positive else "≥ 0"
    if isinstance(value, bool) or not isinstance(value, (int, float, Rational)):
        raise TypeError(f"{name} must be a number {need}, got {type(value).__name__} {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number {need}, got {value}")
        # The shortest decimal that round-trips is what the user typed: 0.1 -> 1/10.
        value = Fraction(repr(value))
    exact = Fraction(value)
    if exact < 0 or (positive and exact == 0):
        raise ValueError(f"{name} must be a number {need}, got {exact}")
    return exact


def params(value: object) -> int:
    """Check a parameter count Ψ."""
    return whole("params", value, high=MAX_PARAMS)


def gpus(value: object) -> int:
    """Check a data-parallel degree N_d."""
    return whole("gpus", value, high=MAX_GPUS)


def tidy(value: Fraction) -> int | Fraction:
    """Return an integral Fraction as int, so reprs read 16 rather than Fraction(16, 1)."""
    return value.numerator if value.denominator == 1 else value
