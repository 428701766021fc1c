"""A union-find (disjoint sets) over ``0..n-1`` or over hashable keys.

Used to group optimizer ops: by shared storages (:mod:`roam_core.ordering.update_groups`) and
by ordering edges (:func:`roam_core.oracle.bounds.optimizer_groups`).

Examples
--------
>>> uf = UnionFind("abcd")
>>> uf.union("a", "c"); uf.union("d", "c")
>>> uf.groups()
[['a', 'c', 'd'], ['b']]
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["UnionFind"]

K = TypeVar("K", bound=Hashable)


class UnionFind(Generic[K]):
    """Disjoint sets of ``items`` (path halving; the root of a set is its first item)."""

    def __init__(self, items: Iterable[K]) -> None:
        self._rank = {k: i for i, k in enumerate(dict.fromkeys(items))}
        self._parent = {k: k for k in self._rank}

    def find(self, a: K) -> K:
        """The representative of ``a``'s set (its earliest item)."""
        parent = self._parent
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(self, a: K, b: K) -> None:
        """Join the sets of ``a`` and ``b``."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            if self._rank[ra] > self._rank[rb]:
                ra, rb = rb, ra
            self._parent[rb] = ra

    def groups(self) -> list[list[K]]:
        """Every set, items in their given order, sets by their first item."""
        out: dict[K, list[K]] = {}
        for k in self._rank:
            out.setdefault(self.find(k), []).append(k)
        return list(out.values())
