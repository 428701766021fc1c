"""Values computed once per graph object: one bounded, thread-safe cache helper.

Graphs are immutable, so anything derived from one (its adjacency, reachability, storage
arrays, a heuristic's order) can be kept while the graph object lives and handed to the next
caller.  :class:`PerGraphCache` is the one place that does this: entries are keyed by the
object's identity (plus an optional hashable key such as the alignment), hold the object only
weakly, and the oldest entry is dropped past ``max_entries``.  Cached values are read-only by
convention: a caller that changes one changes it for everyone.

The helper lives in ``base`` and knows nothing of :class:`~roam_core.model.graph.Graph`: any
object that can be weakly referenced works.

Examples
--------
>>> class G:  # any weakly referenceable object
...     pass
>>> cache: PerGraphCache[int] = PerGraphCache(max_entries=2)
>>> g = G()
>>> cache.get_or_build(g, lambda: 41 + 1), cache.get_or_build(g, lambda: 0)
(42, 42)
>>> cache.get(G()) is None
True
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["PerGraphCache"]

V = TypeVar("V")


class PerGraphCache(Generic[V]):
    """A bounded map ``(graph object, key) -> value`` that never keeps a graph alive.

    Parameters
    ----------
    max_entries : int
        Entries kept at most; the least recently used goes first.  Small values suit large
        values (reachability bitsets take ``O(N^2 / 8)`` bytes: keep 1).
    shares : callable, optional
        ``shares(cached_obj, obj) -> bool``: whether a value cached for another live object
        may be handed to ``obj`` too (a graph copy with extra control edges shares its
        original's storages).  Only consulted on a miss.
    """

    def __init__(self, max_entries: int = 16, *,
                 shares: Callable[[object, object], bool] | None = None) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.max_entries = max_entries
        self._shares = shares
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, Hashable], tuple[weakref.ref[object], V]] = (
            OrderedDict())

    def get(self, obj: object, key: Hashable = ()) -> V | None:
        """The value cached for ``obj`` under ``key``, or ``None``."""
        with self._lock:
            return self._lookup(obj, key)

    def put(self, obj: object, value: V, key: Hashable = ()) -> V:
        """Cache ``value`` for ``obj`` under ``key`` and return it."""
        with self._lock:
            self._store(obj, key, value)
        return value

    def get_or_build(self, obj: object, build: Callable[[], V], key: Hashable = ()) -> V:
        """The cached value, or ``build()`` cached for ``obj``.

        ``build`` runs outside the lock, so two threads asking at once may both build; the
        values are equal (graphs are immutable) and the later one is kept.
        """
        with self._lock:
            hit = self._lookup(obj, key)
        if hit is not None:
            return hit
        return self.put(obj, build(), key)

    def clear(self) -> None:
        """Drop every entry (to free their memory before a memory-hungry stage)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def _lookup(self, obj: object, key: Hashable) -> V | None:
        k = (id(obj), key)
        hit = self._entries.get(k)
        if hit is not None and hit[0]() is obj:
            self._entries.move_to_end(k)
            return hit[1]
        if self._shares is None:
            return None
        for (_, other_key), (ref, value) in reversed(self._entries.items()):
            other = ref()
            if other_key == key and other is not None and self._shares(other, obj):
                self._store(obj, key, value)
                return value
        return None

    def _store(self, obj: object, key: Hashable, value: V) -> None:
        k = (id(obj), key)
        self._entries.pop(k, None)
        self._entries[k] = (weakref.ref(obj), value)
        # dead graphs first, then the least recently used
        if len(self._entries) > self.max_entries:
            for dk in [dk for dk, (ref, _) in self._entries.items() if ref() is None]:
                del self._entries[dk]
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
