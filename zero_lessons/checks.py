"""Input checks shared by every module: each names the field and the allowed range.

Every quantity has a bound that covers every real case with room, and a value past it is refused
with a named error, never clamped: the exact arithmetic then stays small and fast, and every
result fits a float when one is shown (a chart, a JSON number).
"""

from __future__ import annotations

import math
import numbers
from decimal import Decimal
from fractions import Fraction

#: Largest parameter count the exact model promises to handle (a quadrillion).
MAX_PARAMS = 10**15
#: Largest data-parallel degree the exact model promises to handle.
MAX_GPUS = 10**6
#: Most GPUs sharing one node's host memory (today's nodes have 4 to 72).
MAX_GPUS_PER_NODE = 1024
#: Most bytes one parameter may cost in one kind of state (real recipes use at most 32).
MAX_BYTES_PER_PARAM = 1024
#: Largest memory amount, per GPU or per node, in bytes: an exabyte, 10**18 (today's cards hold 10**11).
MAX_MEMORY = 10**18
#: Slowest link, in bytes per second: one bit per second.
MIN_BANDWIDTH = Fraction(1, 8)
#: Fastest link, in bytes per second: a petabyte per second (NVLink 5 sends 1.8 TB/s).
MAX_BANDWIDTH = 10**15
#: Most digits above or below the point that an exact input may carry (2.5e-9 carries 10).
MAX_DIGITS = 200
#: Values with more digits than this are shown by their size: "a 4,401-digit number".
SHOWN_DIGITS = 21


def digit_count(number: int) -> int:
    """Decimal digits of abs(`number`), without converting it to text (which fails past 4,300 digits)."""
    if isinstance(number, bool) or not isinstance(number, numbers.Integral):
        raise TypeError(f"number must be an int, got {type(number).__name__}")
    number = abs(int(number))
    if number < 10**SHOWN_DIGITS:
        return len(str(number))
    estimate = int(math.log10(number)) + 1
    if estimate > 10**5:  # checking the estimate would cost more than it is worth
        return estimate
    return estimate - (number < 10 ** (estimate - 1)) + (number >= 10**estimate)


def shown(value: object, limit: int = 60) -> str:
    """`value` as an error message shows it: exact when short, else shortened ("a 4,401-digit number")."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        number = int(value)
        size = digit_count(number)
        if size <= SHOWN_DIGITS:
            return f"{number:,}"
        return f"a {'negative ' if number < 0 else ''}{size:,}-digit number"
    if isinstance(value, Fraction):
        if value.denominator == 1:
            return shown(value.numerator)
        if max(digit_count(value.numerator), digit_count(value.denominator)) <= SHOWN_DIGITS:
            return str(value)
        if value == 0:
            return "0"
        power = math.log10(abs(value.numerator)) - math.log10(value.denominator)
        exponent = math.floor(power)
        return f"about {'-' if value < 0 else ''}{10 ** (power - exponent):.3g}e{exponent:+d}"
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[: limit // 2]!r}… ({len(value):,} characters)"
    if isinstance(value, (float, Decimal)):
        return str(value)
    text = _safe_repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _safe_repr(value: object) -> str:
    """repr(value), or its type's name when repr itself fails."""
    try:
        return repr(value)
    except Exception:  # a hostile __repr__ must not replace the error we are reporting
        return f"<{type(value).__name__}>"


def kind(value: object) -> str:
    """The type and a short form of `value`, for a TypeError: "list ['mixed-adam']"."""
    text = shown(value)
    name = type(value).__name__
    return f"{text} ({name})" if text.startswith(("a ", "about ")) else f"{name} {text}"


def exact(name: str, value: object, need: str = "a number", *, digits: int | None = MAX_DIGITS) -> Fraction:
    """A finite real `value` (int, Fraction, float, Decimal, numpy scalar) as an exact Fraction, or an error.

    A float is read as the shortest decimal that round-trips, which is what its writer typed:
    0.1 -> 1/10. An input with more than `digits` digits above or below the point is refused
    (None: any size, for results the package computed itself).
    """
    if type(value) is Fraction or type(value) is int:  # the common case, without the slower ABC checks
        number = Fraction(value)
    elif isinstance(value, bool) or not isinstance(value, (numbers.Real, Decimal)):
        raise TypeError(f"{name} must be {need}, got {kind(value)}")
    elif isinstance(value, numbers.Rational):
        number = Fraction(int(value.numerator), int(value.denominator))
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{name} must be a finite number, got {value}")
        length, power = len(value.as_tuple().digits), value.as_tuple().exponent
        if length + max(power, 0) > MAX_DIGITS or -power > MAX_DIGITS:  # before 10**power is built
            raise ValueError(f"{name} must be {need} with at most {MAX_DIGITS} digits, got {value:.3e}")
        number = Fraction(value)
    else:
        real = float(value)
        if not math.isfinite(real):
            raise ValueError(f"{name} must be a finite number, got {real}")
        number = Fraction(float.__repr__(real))  # numpy's repr would add "np.float64(...)"
    return number if digits is None else _within_digits(name, number, need, digits)


def _within_digits(name: str, number: Fraction, need: str, digits: int = MAX_DIGITS) -> Fraction:
    """`number`, unless its numerator or denominator has more than `digits` digits."""
    if max(digit_count(number.numerator), digit_count(number.denominator)) > digits:
        raise ValueError(
            f"{name} must be {need} with at most {digits} digits above and below the point, "
            f"got {shown(number)}"
        )
    return number


def whole(name: str, value: object, *, low: int = 1, high: int | None = None) -> int:
    """Return `value` as an int in [low, high], or raise an error that names `name`."""
    if type(value) is int and value >= low and (high is None or value <= high):  # the common case, quickly
        return value
    span = f"≥ {low:,}" if high is None else f"from {low:,} to {high:,}"
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, Fraction)):
        hint = (
            " (floats are not exact; write an int such as 7_500_000_000)" if isinstance(value, float) else ""
        )
        raise TypeError(f"{name} must be a whole number {span}, got {kind(value)}{hint}")
    if isinstance(value, Fraction) and value.denominator != 1:
        raise ValueError(f"{name} must be a whole number {span}, got {shown(value)}")
    number = int(value)
    if number < low or (high is not None and number > high):
        raise ValueError(f"{name} must be a whole number {span}, got {shown(number)}")
    return number


def amount(
    name: str, value: object, *, positive: bool = False, low: tuple | None = None, high: tuple | None = None
) -> Fraction:
    """Return a finite real `value` ≥ 0 (or > 0) as an exact Fraction, or raise naming `name`.

    `low` and `high` are (bound, how to say it) pairs, such as (10**18, "10**18 bytes (1 EB)");
    `low` applies to values other than 0, which `positive` alone decides.
    """
    need = "> 0" if positive else "≥ 0"
    number = exact(name, value, f"a number {need}", digits=None)
    if number < 0 or (positive and number == 0):
        raise ValueError(f"{name} must be a number {need}, got {shown(number)}")
    if low is not None and 0 < number < low[0]:
        floor = f"at least {low[1]}" if positive else f"0 or at least {low[1]}"
        raise ValueError(f"{name} must be {floor}, got {shown(number)}")
    if high is not None and number > high[0]:
        raise ValueError(f"{name} must be at most {high[1]}, got {shown(number)}")
    return _within_digits(name, number, f"a number {need}")


def byte_count(name: str, value: object, low: int = 0) -> Fraction:
    """`value`, bytes already read: an int or Fraction (not a bool) from `low`; else an error naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, Fraction)):
        raise TypeError(f"{name} must be bytes as an int or Fraction, got {kind(value)}")
    if value < low:
        raise ValueError(f"{name} must be at least {low} bytes, got {shown(value)}")
    return Fraction(value)


def params(value: object) -> int:
    """Check a parameter count Ψ."""
    return whole("params", value, high=MAX_PARAMS)


def gpus(value: object) -> int:
    """Check a data-parallel degree N_d."""
    return whole("gpus", value, high=MAX_GPUS)


def gpus_per_node(value: object, name: str = "gpus_per_node") -> int:
    """Check how many GPUs share one node's host memory."""
    return whole(name, value, high=MAX_GPUS_PER_NODE)


def bytes_per_param(name: str, value: object) -> Fraction:
    """Check one state's bytes per parameter: a finite number from 0 to 1,024."""
    return amount(name, value, high=(MAX_BYTES_PER_PARAM, f"{MAX_BYTES_PER_PARAM:,} bytes per parameter"))


def memory(name: str, value: object, *, zero: bool = False) -> Fraction:
    """Check a memory amount in bytes: from 1 byte (or exactly 0, when `zero`) to an exabyte."""
    return amount(name, value, positive=not zero, low=(1, "1 byte"), high=(MAX_MEMORY, "10**18 bytes (1 EB)"))


def bandwidth(name: str, value: object) -> Fraction:
    """Check a link speed in bytes per second: from one bit to a petabyte per second."""
    return amount(
        name,
        value,
        positive=True,
        low=(MIN_BANDWIDTH, "1 bit/s (1/8 byte/s)"),
        high=(MAX_BANDWIDTH, "10**15 bytes/s (1 PB/s)"),
    )


def instance(name: str, value: object, cls: type, what: str) -> None:
    """Raise a TypeError naming `name` unless `value` is a `cls` (`what` names it for the reader)."""
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be {what}, got {kind(value)}")


def flag(name: str, value: object) -> bool:
    """`value` when it is True or False; anything else is refused, naming `name`."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {kind(value)}")
    return value


def choice(name: str, value: object, choices) -> str:
    """`value` when it is one of the strings `choices`; else an error listing them (never hashing `value`)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(choices)}, got {kind(value)}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {shown(value)}")
    return value
