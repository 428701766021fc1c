"""One module per ``roam`` sub-command; each exposes ``register(subparsers)``.

Modules here must import quickly: heavy imports (torch, ortools, dash) go inside the
handler function.  Shared argument types live here.
"""

from __future__ import annotations

import argparse

__all__ = ["positive_float", "positive_int"]


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
