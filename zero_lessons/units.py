"""Byte units under their right names, and safe parsers for counts, sizes and bandwidths.

No parser here calls `eval` or `sympify`: each matches one regular expression and
builds the number with `fractions.Fraction`, so "7.5B" is exactly 7_500_000_000.
"""

from __future__ import annotations

import re
from fractions import Fraction

from . import checks

#: One decimal gigabyte, the unit of the article's table.
GB = 10**9
#: One binary gibibyte, the unit DeepSpeed's estimators divide by (and call "GB").
GiB = 2**30

#: Unit names accepted for display, with their size in bytes.
UNITS: dict[str, int] = {"B": 1, "kB": 10**3, "KiB": 2**10, "MB": 10**6, "MiB": 2**20,
                         "GB": GB, "GiB": GiB, "TB": 10**12, "TiB": 2**40}

_UNIT_KEYS = {key.lower(): size for key, size in UNITS.items()} | {"bytes": 1}
_COUNT_WORDS = {"": 1, "k": 10**3, "thousand": 10**3, "m": 10**6, "million": 10**6,
                "b": 10**9, "billion": 10**9, "t": 10**12, "trillion": 10**12}
_NUMBER = r"(?P<number>\d(?:_?\d)*(?:\.\d(?:_?\d)*)?(?:[eE][+-]?\d{1,2})?)"
# Patterns stay strings: `re` compiles and caches each on first use, not at import.
_COUNT = _NUMBER + r"\s*(?P<word>[a-zA-Z]*)"
_SIZE = _NUMBER + r"\s*(?P<word>[a-zA-Z]+)"
_RATE = _NUMBER + r"\s*(?P<word>[kMGT]?)(?P<kind>b|B)(?:/s|ps)"

COUNT_FORMS = '"7.5B", "7.5e9", "175 billion", "70M", "1T", "1_000_000"'
SIZE_FORMS = '"80GB", "80 GiB", "512 MiB", "1.5 TB"'
RATE_FORMS = '"100 Gb/s" (bits), "25 GB/s" (bytes), "900GB/s"'


def _decimal(text: str) -> Fraction:
    """Read a decimal literal such as "7.5e9" exactly."""
    return Fraction(text.replace("_", ""))


def parse_count(text: str, *, field: str = "params") -> int:
    """Read a human parameter count such as "7.5B" or "175 billion" as an exact int."""
    match = re.fullmatch(_COUNT, text.strip()) if isinstance(text, str) else None
    word = match["word"].lower() if match else ""
    if not match or word not in _COUNT_WORDS:
        raise ValueError(f"{field}: cannot read {text!r} as a count; use forms like {COUNT_FORMS}")
    value = _decimal(match["number"]) * _COUNT_WORDS[word]
    if value.denominator != 1:
        raise ValueError(f"{field}: {text!r} is not a whole number ({float(value)}); use forms like {COUNT_FORMS}")
    return int(value)


def unit_size(name: str) -> int:
    """Bytes in one `name` unit: "GB" is 10**9 and "GiB" is 2**30, whatever the letter case."""
    size = _UNIT_KEYS.get(str(name).strip().lower())
    if size is None:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {name!r}")
    return size


def parse_size(text: str, *, field: str = "memory") -> Fraction:
    """Read a memory size such as "80GB" (decimal) or "80 GiB" (binary) as exact bytes."""
    match = re.fullmatch(_SIZE, text.strip()) if isinstance(text, str) else None
    try:
        size = unit_size(match["word"]) if match else None
    except ValueError:
        size = None
    if size is None:
        raise ValueError(f"{field}: cannot read {text!r} as a size; use forms like {SIZE_FORMS} "
                         f"(GB = 10**9 bytes, GiB = 2**30 bytes)")
    return _decimal(match["number"]) * size


def parse_bandwidth(text: str, *, field: str = "bandwidth") -> Fraction:
    """Read a link speed such as "100 Gb/s" (bits) or "25 GB/s" (bytes) as exact bytes per second."""
    match = re.fullmatch(_RATE, text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"{field}: cannot read {text!r} as a bandwidth; use forms like {RATE_FORMS}")
    scale = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[match["word"]]
    per_bit = Fraction(1, 8) if match["kind"] == "b" else 1
    value = _decimal(match["number"]) * scale * per_bit
    return checks.amount(field, value, positive=True)


def in_unit(nbytes: Fraction | int, unit: str = "GB") -> Fraction:
    """Exact value of `nbytes` in `unit`."""
    return Fraction(nbytes) / unit_size(unit)


def format_number(value: Fraction | int, digits: int = 3) -> str:
    """Show `value` with at most `digits` decimals: exact when it fits (41.25), else rounded half away from zero."""
    value = Fraction(value)
    scaled = abs(value) * 10**digits
    kept = int(scaled) + (scaled - int(scaled) >= Fraction(1, 2))  # exact rounding, no float in between
    whole, part = divmod(kept, 10**digits)
    sign = "-" if value < 0 and kept else ""
    text = f"{sign}{whole}"
    if scaled.denominator != 1:
        return text + (f".{part:0{digits}d}" if digits else "")
    return text + (f".{part:0{digits}d}".rstrip("0") if part else "")


def unit_name(unit: str) -> str:
    """The canonical spelling of `unit`: "gib" -> "GiB"."""
    size = unit_size(unit)
    return next(key for key, value in UNITS.items() if value == size)


def format_bytes(nbytes: Fraction | int, unit: str = "GB") -> str:
    """Show `nbytes` in `unit` with the unit's true name, e.g. "41.25 GB" or "38.417 GiB"."""
    return f"{format_number(in_unit(nbytes, unit))} {unit_name(unit)}"


def as_bytes(field: str, value) -> Fraction:
    """A memory amount > 0 in bytes, given as a number of bytes or as text such as "80GB"."""
    if isinstance(value, str):
        value = parse_size(value, field=field)
    return checks.amount(field, value, positive=True)


def format_count(count: int, digits: int = 3) -> str:
    """Show a parameter count the way people say it: 7_500_000_000 -> "7.5B" (`digits=12` keeps it exact)."""
    for word, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if count >= size:
            return f"{format_number(Fraction(count, size), digits)}{word}"
    return str(count)


def as_rate(field: str, value) -> Fraction:
    """A bandwidth > 0 in bytes per second, given as a number or as text such as "100 Gb/s"."""
    if isinstance(value, str):
        value = parse_bandwidth(value, field=field)
    return checks.amount(field, value, positive=True)


def parse_gpus(text: str, *, field: str = "gpus") -> int:
    """Read a GPU count typed as digits, from 1 to a million."""
    if not isinstance(text, str) or not text.strip().isdigit():
        raise ValueError(f"{field} must be a whole number from 1 to {checks.MAX_GPUS:,}, got {text!r}")
    return checks.whole(field, int(text), high=checks.MAX_GPUS)


def parse_bytes_per_param(text: str, *, field: str = "bytes per parameter") -> Fraction:
    """Read a bytes-per-parameter value typed as a decimal or a fraction ("2", "0.5", "1/2"): finite and ≥ 0."""
    try:
        value = Fraction(text.strip())
    except (ValueError, ZeroDivisionError, AttributeError):
        raise ValueError(f"{field} must be a number ≥ 0 such as 2 or 0.5, got {text!r}") from None
    return checks.amount(field, value)
