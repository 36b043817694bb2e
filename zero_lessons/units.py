"""Byte units under their right names, exact formatting, and safe parsers for counts, sizes and bandwidths.

No parser here calls `eval` or `sympify`. Each matches one regular expression and hands the
digits to `read_decimal`, the one number reader, which refuses more than 50 digits or an
exponent past ±99 before it builds the exact `fractions.Fraction`: "7.5B" is exactly
7_500_000_000, and "1e99999999" is an error at once, not a minute of arithmetic.
"""

from __future__ import annotations

import re
from fractions import Fraction

from . import checks

#: One decimal gigabyte, the unit of the article's table.
GB = 10**9
#: One binary gibibyte, the unit DeepSpeed's estimators divide by (and call "GB").
GiB = 2**30

#: Bytes as a number, or as text such as "80GB" or "24 GiB": what every memory argument accepts.
Size = int | float | Fraction | str

#: Unit names accepted for display, with their size in bytes.
UNITS: dict[str, int] = {
    "B": 1,
    "kB": 10**3,
    "KiB": 2**10,
    "MB": 10**6,
    "MiB": 2**20,
    "GB": GB,
    "GiB": GiB,
    "TB": 10**12,
    "TiB": 2**40,
}
#: Most digits a typed number may have, and the largest exponent it may carry.
TYPED_DIGITS, TYPED_EXPONENT = 50, 99
#: Most decimals `format_number` shows.
MAX_DECIMALS = 30
#: Longest whole part `format_number` writes out; a longer one is shown by its size.
WRITTEN_DIGITS = 40

_UNIT_KEYS = {key.lower(): size for key, size in UNITS.items()} | {"bytes": 1}
_COUNT_WORDS = {
    "": 1,
    "k": 10**3,
    "thousand": 10**3,
    "m": 10**6,
    "million": 10**6,
    "b": 10**9,
    "billion": 10**9,
    "t": 10**12,
    "trillion": 10**12,
}
_DECIMAL = r"(?P<whole>[0-9](?:_?[0-9])*)(?:\.(?P<part>[0-9](?:_?[0-9])*))?(?:[eE](?P<power>[+-]?[0-9]+))?"
_NUMBER = r"(?P<number>[0-9](?:_?[0-9])*(?:\.[0-9](?:_?[0-9])*)?(?:[eE][+-]?[0-9]+)?)"
# Patterns stay strings: `re` compiles and caches each on first use, not at import.
_COUNT = _NUMBER + r"\s*(?P<word>[a-zA-Z]*)"
_SIZE = _NUMBER + r"\s*(?P<word>[a-zA-Z]+)"
_RATE = _NUMBER + r"\s*(?P<word>[kMGT]?)(?P<kind>b|B)(?:/s|ps)"
_RATIO = r"(?P<sign>[-+]?)\s*(?:(?P<top>[0-9]+)\s*/\s*(?P<bottom>[0-9]+)|" + _NUMBER + ")"

COUNT_FORMS = '"7.5B", "7.5e9", "175 billion", "70M", "1T", "1_000_000"'
SIZE_FORMS = '"80GB", "80 GiB", "512 MiB", "1.5 TB"'
RATE_FORMS = '"100 Gb/s" (bits), "25 GB/s" (bytes), "900GB/s"'
RATIO_FORMS = "2, 0.5 or 1/2"


def _text(field: str, text: object, forms: str) -> str:
    """`text` stripped, or a TypeError naming `field` when it is not text."""
    if not isinstance(text, str):
        raise TypeError(f"{field} must be text such as {forms}, got {checks.kind(text)}")
    return text.strip()


def read_decimal(text: str, *, field: str, forms: str) -> Fraction:
    """An unsigned decimal such as "7.5e9" or "1_000", exactly: at most 50 digits, an exponent within ±99."""
    match = re.fullmatch(_DECIMAL, _text(field, text, forms), re.ASCII)
    if not match:
        raise ValueError(f"{field}: cannot read {checks.shown(text)} as a number; use forms like {forms}")
    digits = (match["whole"] + (match["part"] or "")).replace("_", "")
    power = (match["power"] or "0").lstrip("+-").lstrip("0")
    too_long = len(digits) > TYPED_DIGITS or len(power) > len(str(TYPED_EXPONENT))
    if too_long or int(power or 0) > TYPED_EXPONENT:  # checked on the text, before any big number is built
        raise ValueError(
            f"{field}: {checks.shown(text)} has too many digits (at most {TYPED_DIGITS}, "
            f"with an exponent from -{TYPED_EXPONENT} to {TYPED_EXPONENT}); use forms like {forms}"
        )
    return Fraction(text.strip().replace("_", ""))


def parse_count(text: str, *, field: str = "params") -> int:
    """Read a human parameter count such as "7.5B", "175 billion" or "1,557,611,200" as an exact int."""
    text = _text(field, text, COUNT_FORMS)
    if re.fullmatch(
        r"[0-9]{1,3}(?:,[0-9]{3})+", text, re.ASCII
    ):  # thousands grouped as format_count_exact writes
        text = text.replace(",", "")
    match = re.fullmatch(_COUNT, text, re.ASCII)
    word = match["word"].lower() if match else ""
    if not match or word not in _COUNT_WORDS:
        raise ValueError(
            f"{field}: cannot read {checks.shown(text)} as a count; use forms like {COUNT_FORMS}"
        )
    value = read_decimal(match["number"], field=field, forms=COUNT_FORMS) * _COUNT_WORDS[word]
    if value.denominator != 1:
        raise ValueError(
            f"{field}: {checks.shown(text)} is not a whole number ({format_number(value)}); "
            f"use forms like {COUNT_FORMS}"
        )
    return int(value)


def parse_whole(text: str, *, field: str, high: int) -> int:
    """Read a whole number typed as plain digits, from 1 to `high`."""
    if not isinstance(text, str) or not re.fullmatch(r"[0-9]{1,50}", text.strip(), re.ASCII):
        shown = checks.shown(text) if isinstance(text, str) else checks.kind(text)
        raise (ValueError if isinstance(text, str) else TypeError)(
            f"{field} must be a whole number from 1 to {high:,}, got {shown}"
        )
    return checks.whole(field, int(text), high=high)


def unit_size(name: str) -> int:
    """Bytes in one `name` unit: "GB" is 10**9 and "GiB" is 2**30, whatever the letter case."""
    size = _UNIT_KEYS.get(name.strip().lower()) if isinstance(name, str) else None
    if size is None:
        shown = checks.shown(name) if isinstance(name, str) else checks.kind(name)
        raise (ValueError if isinstance(name, str) else TypeError)(
            f"unit must be one of {', '.join(UNITS)}, got {shown}"
        )
    return size


def unit_name(unit: str) -> str:
    """The canonical spelling of `unit`: "gib" -> "GiB"."""
    size = unit_size(unit)
    return next(key for key, value in UNITS.items() if value == size)


def parse_size(text: str, *, field: str = "memory") -> Fraction:
    """Read a memory size such as "80GB" (decimal) or "80 GiB" (binary) as exact bytes."""
    match = re.fullmatch(_SIZE, _text(field, text, SIZE_FORMS), re.ASCII)
    size = _UNIT_KEYS.get(match["word"].lower()) if match else None
    if size is None:
        raise ValueError(
            f"{field}: cannot read {checks.shown(text)} as a size; use forms like {SIZE_FORMS} "
            f"(GB = 10**9 bytes, GiB = 2**30 bytes)"
        )
    return read_decimal(match["number"], field=field, forms=SIZE_FORMS) * size


def parse_bandwidth(text: str, *, field: str = "bandwidth") -> Fraction:
    """Read a link speed such as "100 Gb/s" (bits) or "25 GB/s" (bytes) as exact bytes per second."""
    match = re.fullmatch(_RATE, _text(field, text, RATE_FORMS), re.ASCII)
    if not match:
        raise ValueError(
            f"{field}: cannot read {checks.shown(text)} as a bandwidth; use forms like {RATE_FORMS}"
        )
    scale = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[match["word"]]
    per_bit = Fraction(1, 8) if match["kind"] == "b" else 1
    value = read_decimal(match["number"], field=field, forms=RATE_FORMS) * scale * per_bit
    return checks.bandwidth(field, value)


def read_ratio(text: str, *, field: str, forms: str = RATIO_FORMS, need: str = "a number") -> Fraction:
    """A signed decimal or fraction such as "2", "-0.5" or "1/2" read exactly, each part by `read_decimal`."""
    match = re.fullmatch(_RATIO, _text(field, text, forms), re.ASCII)
    if not match or (match["bottom"] is not None and not match["bottom"].strip("0")):
        raise ValueError(f"{field} must be {need} such as {forms}, got {checks.shown(text)}")
    if match["number"] is not None:
        value = read_decimal(match["number"], field=field, forms=forms)
    else:
        top, bottom = (read_decimal(match[part], field=field, forms=forms) for part in ("top", "bottom"))
        value = top / bottom
    return -value if match["sign"] == "-" else value


def as_bytes(field: str, value: Size, *, zero: bool = False) -> Fraction:
    """A memory amount in bytes, from 1 (or 0, when `zero`) to 10**18: a number, or text such as "80GB"."""
    if isinstance(value, str):
        value = Fraction(0) if zero and value.strip() == "0" else parse_size(value, field=field)
    return checks.memory(field, value, zero=zero)


def as_rate(field: str, value) -> Fraction:
    """A bandwidth in bytes per second, from 1 bit/s to 1 PB/s: a number, or text such as "100 Gb/s"."""
    if isinstance(value, str):
        value = parse_bandwidth(value, field=field)
    return checks.bandwidth(field, value)


def tidy(value: Fraction | int) -> int | Fraction:
    """An integral Fraction as int, so reprs read 16 rather than Fraction(16, 1)."""
    value = checks.exact("value", value, digits=None)
    return value.numerator if value.denominator == 1 else value


def in_unit(nbytes: Fraction | int, unit: str = "GB") -> Fraction:
    """Exact value of `nbytes` in `unit`."""
    return checks.exact("nbytes", nbytes, digits=None) / unit_size(unit)


def format_number(value: Fraction | int, digits: int = 3, *, grouped: bool = False) -> str:
    """Show `value` with at most `digits` decimals: exact when it fits (41.25), else rounded half away from 0.

    With `grouped`, the whole part has thousands separators ("8,277.5"), as byte counts are shown beside it.
    The one path from an exact number to text: integer arithmetic only, never a float, so any
    size prints; a whole part longer than 40 digits is shown by its size ("a 401-digit number").
    """
    value = checks.exact("value", value, digits=None)
    digits = checks.whole("digits", digits, low=0, high=MAX_DECIMALS)
    grouped = checks.flag("grouped", grouped)
    kept, rest = divmod(abs(value.numerator) * 10**digits, value.denominator)
    kept += 2 * rest >= value.denominator  # round half away from zero, in integers: no float in between
    whole, part = divmod(kept, 10**digits)
    if whole >= 10**WRITTEN_DIGITS:
        return checks.shown(-whole if value < 0 else whole)
    text = (
        f"{'-' if value < 0 and kept else ''}{whole:,}"
        if grouped
        else f"{'-' if value < 0 and kept else ''}{whole}"
    )
    if rest:
        return text + (f".{part:0{digits}d}" if digits else "")
    return text + (f".{part:0{digits}d}".rstrip("0") if part else "")


def format_bytes(nbytes: Fraction | int, unit: str = "GB") -> str:
    """Show `nbytes` in `unit` with the unit's true name, e.g. "41.25 GB" or "38.417 GiB"."""
    return f"{format_number(in_unit(nbytes, unit))} {unit_name(unit)}"


def format_count(count: int, digits: int = 3) -> str:
    """Show a parameter count the way people say it: 7_500_000_000 -> "7.5B" (`digits=12` keeps it exact)."""
    count = checks.whole("count", count, low=0)
    for word, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if count >= size:
            return f"{format_number(Fraction(count, size), digits)}{word}"
    return str(count)


def format_count_exact(count: int) -> str:
    """A count that reads back exactly: "7.5B" when three decimals say it all, else "1,557,611,200"."""
    short = format_count(count)
    return short if parse_count(short) == count else f"{count:,}"


def format_duration(seconds: Fraction | int) -> str:
    """Show a time in the unit that keeps it ≥ 1 where it can: "3.15 s", "5 ms", "12.5 µs", "0 s"."""
    seconds = checks.exact("seconds", seconds, digits=None)
    for name, size in (("s", 1), ("ms", Fraction(1, 10**3)), ("µs", Fraction(1, 10**6))):
        if seconds >= size:
            return f"{format_number(seconds / size)} {name}"
    return f"{format_number(seconds * 10**9)} ns" if seconds else "0 s"


def format_rate(rate: Fraction | int) -> str:
    """Show bytes per second in the largest decimal unit that keeps it ≥ 1: "12.5 GB/s", "0.125 B/s"."""
    rate = checks.exact("rate", rate, digits=None)
    for name, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if rate >= size:
            return f"{format_number(rate / size, 2)} {name}/s"
    return f"{format_number(rate)} B/s"


def json_number(value: Fraction | int) -> int | float:
    """An exact value for JSON: the int when integral, else the nearest float.

    Every quantity is bounded (`checks`), so the float is always in range; Fraction's own
    division rounds once, correctly, with no float in between.
    """
    value = checks.exact("value", value, digits=None)
    if abs(value) >= 10**300:
        raise ValueError(f"value is too large for a JSON number, got {checks.shown(value)}")
    return value.numerator if value.denominator == 1 else float(value)
