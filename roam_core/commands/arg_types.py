"""argparse types shared by the ``roam`` sub-commands: counts, numbers, sizes and budgets."""

from __future__ import annotations

import argparse

__all__ = ["budget_arg", "non_negative_float", "positive_float", "positive_int", "size_bytes"]


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} is not a positive integer")
    return v


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{v} is not a positive number")
    return v


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"{v} is not a number >= 0")
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
