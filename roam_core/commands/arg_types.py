"""argparse types shared by the ``roam`` sub-commands: counts, numbers, sizes and budgets."""

from __future__ import annotations

import argparse
import math

__all__ = [
    "budget_arg",
    "non_negative_float",
    "non_negative_int",
    "port_number",
    "positive_float",
    "positive_int",
    "seed_int",
    "size_bytes",
    "upload_mib",
]

#: The largest count an option takes (steps, workers, node limits: anything bigger is a typo).
_MAX_COUNT = 2**31 - 1
#: The largest upload cap ``roam serve`` takes, MiB (1 TiB).
MAX_UPLOAD_MIB = 2**20


def _int(text: str) -> int:
    if len(text.strip()) > 20:
        raise argparse.ArgumentTypeError(f"{text[:24]!r}... is not an integer in range")
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


def positive_int(text: str) -> int:
    """argparse type: an integer from 1 to 2**31 - 1."""
    v = _int(text)
    if not 1 <= v <= _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{v} is not a positive integer below 2**31")
    return v


def non_negative_int(text: str) -> int:
    """argparse type: an integer from 0 to 2**31 - 1."""
    v = _int(text)
    if not 0 <= v <= _MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{v} is not an integer from 0 to 2**31 - 1")
    return v


def seed_int(text: str) -> int:
    """argparse type: a random seed, an integer from 0 to 2**31 - 1."""
    return non_negative_int(text)


def port_number(text: str) -> int:
    """argparse type: a TCP port, 1 to 65535.

    >>> port_number("8050")
    8050
    """
    v = _int(text)
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"port {v} is not in 1..65535")
    return v


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (``inf`` and ``nan`` are refused)."""
    v = _float(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{v} is not a positive number")
    return v


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    v = _float(text)
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"{v} is not a number >= 0")
    return v


def upload_mib(text: str) -> float:
    """argparse type: an upload cap in MiB, a finite number in (0, 2**20]."""
    v = positive_float(text)
    if v > MAX_UPLOAD_MIB:
        raise argparse.ArgumentTypeError(f"{v} MiB is over the largest cap, {MAX_UPLOAD_MIB}")
    return v


def size_bytes(text: str) -> int:
    """argparse type: a size such as ``2GiB``, ``1.5GB`` or ``123456`` (bytes)."""
    from roam_core.base.units import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def budget_arg(text: str) -> int | str:
    """argparse type: ``auto`` or a size (see :func:`size_bytes`)."""
    return "auto" if text.strip().lower() == "auto" else size_bytes(text)
