"""Type and range checks of the fields a file holds, shared by every loader.

Each check raises the loader's error type with a message naming where the field sits
(``"op 'mm': field 'flops'"``) and what was expected, never echoing more than a short prefix
of the value (a hostile value may be megabytes long).
"""

from __future__ import annotations

import math
from typing import Any

from roam_core.base.errors import RoamError
from roam_core.formats.limits import MAX_INT

__all__ = ["check_float", "check_int", "check_str", "short", "utf8_ok"]


def short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters (for messages).

    Examples
    --------
    >>> short("x" * 100, 10)
    "'xxxxxx..."
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value) if isinstance(value, (str, int, float, bool, type(None))) \
        else type(value).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def utf8_ok(text: str) -> bool:
    """True when ``text`` can be written as UTF-8 (no lone surrogate such as ``"\\ud800"``).

    Examples
    --------
    >>> utf8_ok("caf\\u00e9"), utf8_ok("a\\ud800")
    (True, False)
    """
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_str(value: Any, where: str, error: type[RoamError], *, max_chars: int,
              empty: bool = False) -> str:
    """``value`` when it is a string of at most ``max_chars`` UTF-8-writable characters
    (non-empty unless ``empty``)."""
    if not isinstance(value, str):
        raise error(f"{where} must be a string, not {short(value)}")
    if not value and not empty:
        raise error(f"{where} must be a non-empty string")
    if len(value) > max_chars:
        raise error(f"{where} has {len(value):,} characters (the limit is {max_chars:,})")
    if not utf8_ok(value):
        raise error(f"{where} is not valid Unicode (a lone surrogate)")
    return value


def check_int(value: Any, where: str, error: type[RoamError], *, low: int = 0,
              high: int = MAX_INT) -> int:
    """``value`` when it is an integer (not a bool) with ``low <= value < high``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{where} is {short(value)}, not an integer")
    if value < low:
        if low == 0:
            raise error(f"{where} is negative ({short(value)})")
        raise error(f"{where} must be at least {low}, not {short(value)}")
    if value >= high:
        bound = "2**62" if high == MAX_INT else f"{high:,}"
        raise error(f"{where} must be below {bound}, not {short(value)}")
    return value


def check_float(value: Any, where: str, error: type[RoamError], *, low: float = 0.0) -> float:
    """``value`` as a float when it is a finite number ``>= low`` (ints accepted)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{where} must be a number, not {short(value)}")
    if isinstance(value, int) and abs(value) >= MAX_INT:
        raise error(f"{where} must be below 2**62, not {short(value)}")
    v = float(value)
    if not math.isfinite(v) or v < low:
        raise error(f"{where} must be a finite number >= {low}, not {short(value)}")
    return v
