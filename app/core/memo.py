"""One registry for the app's per-process memo caches, and :func:`clear_caches`.

Every memoised function of the app is declared with :func:`memoised`, so one call empties
them all (tests do, and so does :func:`app.core.state.configure` when the cache directory
changes).  A memo never hands out its stored object when that object could be mutated:
figures are returned as copies (``copy=``), and array records are frozen (read-only NumPy
arrays, see :func:`freeze_arrays`).

A memo may also keep an immutable form of each stored value (``frozen=``, for figures:
their JSON text), made once per entry and handed out as is: immutable objects may be
shared and read from any thread.  The Dash callbacks send that form (parsed into a fresh
dict), which skips both the copy and plotly's serialisation of the copy.

Copies, and the one read that makes a frozen form, are taken under a lock per memo.  The
app's server is threaded, and plotly's graph objects are not safe to read from two threads
at once the first time: a read fills lazy caches inside the object (plotly.py issue #3441),
so two threads copying one stored figure can corrupt it ("Bad property path", "Invalid value").
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, cast, overload

import numpy as np

__all__ = ["Memo", "clear_caches", "freeze_arrays", "memo_names", "memoised"]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
T = TypeVar("T")


class Memo(Protocol[P, R_co]):
    """A memoised function: called like the function it wraps, cleared like ``lru_cache``.

    ``frozen(*args)`` is the stored entry's immutable form (only with ``frozen=``; its type is
    what that function returns).
    """

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    def frozen(self, *args: P.args, **kwargs: P.kwargs) -> Any: ...

    def cache_clear(self) -> None: ...

    def cache_info(self) -> functools._CacheInfo: ...


class _Clearable(Protocol):
    def cache_clear(self) -> None: ...


_REGISTRY: dict[str, _Clearable] = {}


@overload
def memoised(maxsize: int, *, copy: None = None, frozen: None = None,
             ) -> Callable[[Callable[P, R]], Memo[P, R]]: ...


@overload
def memoised(maxsize: int, *, copy: Callable[[R], R], frozen: Callable[[R], object] | None = None,
             ) -> Callable[[Callable[P, R]], Memo[P, R]]: ...


def memoised(maxsize: int, *, copy: Callable[[R], R] | None = None,
             frozen: Callable[[R], object] | None = None
             ) -> Callable[[Callable[P, R]], Memo[P, R]]:
    """Decorator: an LRU memo of ``maxsize`` entries, registered for :func:`clear_caches`.

    Parameters
    ----------
    maxsize : int
        Entries kept (least recently used evicted).
    copy : callable, optional
        Applied to the stored value on every call, so callers get their own copy (for
        mutable results such as ``go.Figure``).
    frozen : callable, optional
        Makes an immutable form of a stored value (such as a figure's JSON text); the
        memoised function then has ``.frozen(*args)``, which returns that form, made once
        per entry (under the same lock as the copies) and kept with it.  Needs ``copy``.

    Examples
    --------
    >>> calls = []
    >>> @memoised(2, copy=list)
    ... def f(n):
    ...     calls.append(n)
    ...     return [n]
    >>> f(1).append(9); f(1), len(calls)
    ([1], 1)
    >>> clear_caches(); f(1), len(calls)
    ([1], 2)
    >>> @memoised(2, copy=list, frozen=tuple)
    ... def g(n):
    ...     calls.append(n)
    ...     return [n, n]
    >>> g.frozen(3), g.frozen(3) is g.frozen(3), g(3), calls[-1:]
    ((3, 3), True, [3, 3], [3])
    """
    if frozen is not None and copy is None:
        raise ValueError("frozen= needs copy=: the stored value is mutable")

    def deco(fn: Callable[P, R]) -> Memo[P, R]:
        name = f"{fn.__module__}.{fn.__qualname__}"
        if copy is None:  # immutable values: handed out as they are stored
            cached = functools.lru_cache(maxsize=maxsize)(fn)
            _REGISTRY[name] = cached
            return cast("Memo[P, R]", cached)
        memo = _CopyingMemo(fn, maxsize, copy, frozen)
        _REGISTRY[name] = memo
        return memo

    return deco


_MISSING = object()


class _Entry(Generic[R]):
    """A stored value and, once asked for, its frozen form (read and made under the lock)."""

    __slots__ = ("frozen", "value")

    def __init__(self, value: R) -> None:
        self.value = value
        self.frozen: object = _MISSING


class _EntryCache(Protocol[R]):
    """The ``lru_cache`` of a memo's entries (its arguments are hashable, as lru_cache needs)."""

    def __call__(self, *args: Any, **kwargs: Any) -> _Entry[R]: ...

    def cache_clear(self) -> None: ...

    def cache_info(self) -> functools._CacheInfo: ...


class _CopyingMemo(Generic[P, R]):
    """A memo whose callers get copies of the stored value (and its frozen form, if any)."""

    __qualname__: str  # the wrapped function's (functools.update_wrapper)

    def __init__(self, fn: Callable[P, R], maxsize: int, copy: Callable[[R], R],
                 frozen: Callable[[R], object] | None) -> None:
        functools.update_wrapper(self, fn)

        @functools.lru_cache(maxsize=maxsize)
        def entry(*args: Any, **kwargs: Any) -> _Entry[R]:
            return _Entry(fn(*args, **kwargs))

        self._entry: _EntryCache[R] = entry
        self._copy = copy
        self._make_frozen = frozen
        self._locks = [threading.Lock()]
        # a job process forked while another thread held the lock starts with a fresh one
        os.register_at_fork(after_in_child=lambda: self._locks.__setitem__(0, threading.Lock()))

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        stored = self._entry(*args, **kwargs)
        with self._locks[0]:  # one reader of the stored object at a time
            return self._copy(stored.value)

    def frozen(self, *args: P.args, **kwargs: P.kwargs) -> object:
        """The entry's frozen form, made once (under the lock) and kept with it."""
        if self._make_frozen is None:
            raise TypeError(f"{self.__qualname__} keeps no frozen form (frozen=None)")
        stored = self._entry(*args, **kwargs)
        with self._locks[0]:
            if stored.frozen is _MISSING:
                stored.frozen = self._make_frozen(stored.value)
            return stored.frozen

    def cache_clear(self) -> None:
        """Forget every entry."""
        self._entry.cache_clear()

    def cache_info(self) -> functools._CacheInfo:
        """Hits, misses and size, as ``lru_cache`` reports them."""
        return self._entry.cache_info()


def clear_caches() -> None:
    """Empty every memo registered with :func:`memoised`."""
    for cached in _REGISTRY.values():
        cached.cache_clear()


def memo_names() -> tuple[str, ...]:
    """Qualified names of the registered memos (for tests and diagnostics)."""
    return tuple(_REGISTRY)


def freeze_arrays(obj: T) -> T:
    """Make every NumPy array attribute of a (frozen dataclass) record read-only; returns it.

    >>> import dataclasses
    >>> @dataclasses.dataclass(frozen=True)
    ... class R:
    ...     a: np.ndarray
    >>> r = freeze_arrays(R(np.zeros(2)))
    >>> r.a.flags.writeable
    False
    """
    for value in vars(obj).values() if hasattr(obj, "__dict__") else (
            getattr(obj, s) for s in getattr(obj, "__slots__", ())):
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
        elif hasattr(value, "__dataclass_fields__") and not isinstance(value, type):
            freeze_arrays(value)
    return obj
