"""Cooperative cancellation: one way to ask "stop now?" whatever the caller handed in.

A cancel is ``None``, an Event-like object (``threading.Event``, ``multiprocessing.Event``:
anything with ``is_set()``) or a zero-argument callable returning true to stop.

Examples
--------
>>> import threading
>>> ev = threading.Event()
>>> is_cancelled(ev), is_cancelled(None), is_cancelled(lambda: True)
(False, False, True)
>>> ev.set(); as_cancel_flag(ev)()
True
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["CancelFlag", "as_cancel_flag", "is_cancelled"]

#: Something that says "stop now": an Event-like object or a zero-argument callable.
CancelFlag = Callable[[], bool]


def as_cancel_flag(cancel: object) -> CancelFlag | None:
    """Normalise an ``Event`` / callable / ``None`` into a zero-argument callable (or None)."""
    if cancel is None:
        return None
    is_set = getattr(cancel, "is_set", None)
    if callable(is_set):
        return is_set  # type: ignore[no-any-return]
    if callable(cancel):
        return cancel  # type: ignore[return-value]
    raise TypeError(f"cancel must be an Event or a callable, not {type(cancel).__name__}")


def is_cancelled(cancel: object) -> bool:
    """Whether ``cancel`` (``None``, an Event or a callable) says stop now."""
    flag = as_cancel_flag(cancel)
    return flag is not None and bool(flag())
