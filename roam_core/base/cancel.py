"""Cooperative cancellation: one way to ask "stop now?" whatever the caller handed in.

A cancel is ``None``, an Event-like object (``threading.Event``, ``multiprocessing.Event``:
anything with ``is_set()``) or a zero-argument callable returning true to stop.
:class:`StopFile` carries a cancel into worker processes (it pickles as a path).

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

import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeAlias, runtime_checkable

__all__ = ["CancelFlag", "CancelToken", "EventLike", "StopFile", "as_cancel_flag",
           "is_cancelled"]

#: Something that says "stop now" as a zero-argument callable.
CancelFlag = Callable[[], bool]


@runtime_checkable
class EventLike(Protocol):
    """``threading.Event``, ``multiprocessing.Event``, :class:`StopFile`: set once, polled."""

    def is_set(self) -> bool:
        """Whether the caller asked to stop."""
        ...


#: What a ``cancel=`` argument accepts: an Event-like object, a zero-argument callable
#: returning true to stop, or ``None`` (never cancelled).
CancelToken: TypeAlias = EventLike | CancelFlag | None


def as_cancel_flag(cancel: CancelToken) -> CancelFlag | None:
    """Normalise an ``Event`` / callable / ``None`` into a zero-argument callable (or None)."""
    if cancel is None:
        return None
    is_set = getattr(cancel, "is_set", None)
    if callable(is_set):
        return is_set  # type: ignore[no-any-return]  # getattr is Any: an Event's is_set
    if callable(cancel):
        return cancel
    raise TypeError(f"cancel must be an Event or a callable, not {type(cancel).__name__}")


def is_cancelled(cancel: CancelToken) -> bool:
    """Whether ``cancel`` (``None``, an Event or a callable) says stop now."""
    flag = as_cancel_flag(cancel)
    return flag is not None and bool(flag())


class StopFile:
    """A cancel flag that crosses process boundaries: set once the file ``path`` exists.

    It pickles as its path, so a worker process (``concurrent.futures.ProcessPoolExecutor``,
    any executor whose workers share the file system) polls the same flag; checking costs
    one ``stat``.

    Examples
    --------
    >>> import pickle, tempfile
    >>> flag = StopFile(tempfile.mkdtemp() + "/stop")
    >>> twin = pickle.loads(pickle.dumps(flag))
    >>> twin.is_set(); flag.set(); twin.is_set()
    False
    True
    """

    __slots__ = ("path",)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    def is_set(self) -> bool:
        """Whether the stop was requested (the file exists)."""
        return os.path.exists(self.path)

    __call__ = is_set

    def set(self) -> None:
        """Request the stop (create the file)."""
        Path(self.path).touch()

    def __getstate__(self) -> str:
        return self.path

    def __setstate__(self, state: str) -> None:
        self.path = state
