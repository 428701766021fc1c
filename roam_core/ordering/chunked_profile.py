"""A sequence of ops with its live-bytes curve, kept in chunks for cheap insertion.

:func:`roam_core.ordering.update_insertion.insert_update_groups` splices thousands of blocks
into a sequence of up to ~100k ops and, for every block, asks for maxima, minima and first /
last crossings of the curve over ranges that can span the whole sequence.  Flat arrays make
every splice and every range query ``O(N)``, so a graph with ``G`` groups costs ``O(G * N)``.

:class:`ChunkedProfile` is a square-root decomposition: the sequence is cut into chunks of
at most ``2 * chunk`` steps, each holding its ops, its two curves (``prof``: live bytes at
each step; ``cross``: bytes still live after each step, i.e. ``prof`` minus what the step
frees) and a lazy offset added to the whole chunk.  A chunk's maximum of ``prof`` and
minimum of ``cross`` are cached, so a range query costs ``O(chunk)`` for its two partial
chunks plus one vectorised pass over the chunk summaries in between (``O(N / chunk)``, a
few hundred numbers), and so does a range addition.  Inserting ``L`` steps at a position
rewrites one chunk (``O(chunk + L)``) and shifts the chunk starts (``O(N / chunk)``).  Op
positions are ``start[chunk_of[op]] + index[op]``.

All values are exact Python ints (int64 inside); nothing here changes a result, only the
cost of computing it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

__all__ = ["ChunkedProfile"]

#: Summary of an empty chunk (never the answer of a query).
_NEG = -(1 << 62)
_POS = 1 << 62


def _first(mask: np.ndarray) -> int:
    """Index of the first true entry of ``mask`` (-1: none)."""
    if not len(mask):
        return -1
    i = int(mask.argmax())
    return i if mask[i] else -1


def _last(mask: np.ndarray) -> int:
    """Index of the last true entry of ``mask`` (-1: none)."""
    if not len(mask):
        return -1
    i = len(mask) - 1 - int(mask[::-1].argmax())
    return i if mask[i] else -1


class ChunkedProfile:
    """Ops in order with their ``prof`` and ``cross`` curves (see the module docstring).

    Parameters
    ----------
    ops : sequence of int
        Op indices in sequence order (``0 <= op < n_ops``, each at most once).
    prof, cross : numpy.ndarray
        One value per step.
    n_ops : int
        Size of the op index space (ops not in the sequence are *unplaced*).
    chunk : int
        Target chunk length; a chunk is split in two when it grows past ``2 * chunk``.
    """

    def __init__(self, ops: Sequence[int], prof: np.ndarray, cross: np.ndarray, n_ops: int,
                 chunk: int = 512) -> None:
        m = len(ops)
        self._chunk = max(int(chunk), 1)
        starts = list(range(0, m, self._chunk)) or [0]
        arr = np.asarray(ops, dtype=np.int64)
        self._ops = [arr[s:s + self._chunk].copy() for s in starts]
        self._p = [np.asarray(prof[s:s + self._chunk], dtype=np.int64).copy() for s in starts]
        self._x = [np.asarray(cross[s:s + self._chunk], dtype=np.int64).copy() for s in starts]
        nc = len(starts)
        self.chunk_of = np.full(n_ops, -1, dtype=np.int64)
        self._idx = np.zeros(n_ops, dtype=np.int64)
        for c, o in enumerate(self._ops):
            self.chunk_of[o] = c
            self._idx[o] = np.arange(len(o))
        self._add = np.zeros(nc, dtype=np.int64)
        self._pmax = np.array([int(p.max()) if len(p) else _NEG for p in self._p], dtype=np.int64)
        self._xmin = np.array([int(x.min()) if len(x) else _POS for x in self._x], dtype=np.int64)
        self._start = np.zeros(nc + 1, dtype=np.int64)
        self._start[1:] = np.cumsum([len(o) for o in self._ops])
        self._starts = self._start.tolist()  # the same, for bisect (refreshed on changes)
        self.m = m

    # ------------------------------------------------------------------ positions
    def positions(self, ops: Sequence[int] | np.ndarray) -> np.ndarray:
        """Steps of placed ``ops`` (unplaced ops are the caller's error)."""
        o = np.asarray(ops, dtype=np.int64)
        return self._start[self.chunk_of[o]] + self._idx[o]

    def _locate(self, j: int) -> tuple[int, int]:
        starts = self._starts
        c = min(bisect.bisect_right(starts, j) - 1, len(self._ops) - 1)
        return c, j - starts[c]

    def _span(self, j0: int, j1: int) -> tuple[int, int, int, int]:
        c0, i0 = self._locate(j0)
        c1, i1 = self._locate(j1 - 1)
        return c0, i0, c1, i1 + 1

    def _refresh(self, c: int) -> None:
        p, x = self._p[c], self._x[c]
        self._pmax[c] = p.max() if len(p) else _NEG
        self._xmin[c] = x.min() if len(x) else _POS

    # ------------------------------------------------------------------ point reads
    def prof_at(self, j: int) -> int:
        """``prof`` at step ``j``."""
        c, i = self._locate(j)
        return int(self._p[c][i]) + int(self._add[c])

    def cross_at(self, j: int) -> int:
        """``cross`` at step ``j``."""
        c, i = self._locate(j)
        return int(self._x[c][i]) + int(self._add[c])

    def peak(self) -> int:
        """``max(prof)`` over the whole sequence (``O(N / chunk)``; an empty one: a large
        negative number)."""
        return int((self._pmax + self._add).max())

    # ------------------------------------------------------------------ range queries
    def max_prof(self, j0: int, j1: int) -> int | None:
        """``max(prof[j0:j1])`` (``None`` when empty)."""
        if j1 <= j0:
            return None
        c0, i0, c1, i1 = self._span(j0, j1)
        add = self._add
        if c0 == c1:
            return int(self._p[c0][i0:i1].max()) + int(add[c0])
        best = max(int(self._p[c0][i0:].max()) + int(add[c0]),
                   int(self._p[c1][:i1].max()) + int(add[c1]))
        if c1 > c0 + 1:
            best = max(best, int((self._pmax[c0 + 1:c1] + add[c0 + 1:c1]).max()))
        return best

    def first_prof_above(self, j0: int, j1: int, thr: int) -> int | None:
        """The first step ``j0 <= j < j1`` with ``prof[j] > thr`` (``None``: none)."""
        if j1 <= j0:
            return None
        c0, i0, c1, i1 = self._span(j0, j1)
        add, start = self._add, self._starts
        seg = self._p[c0][i0:i1] if c0 == c1 else self._p[c0][i0:]
        t = _first(seg > thr - int(add[c0]))
        if t >= 0:
            return int(start[c0]) + i0 + t
        if c0 == c1:
            return None
        if c1 > c0 + 1:
            t = _first(self._pmax[c0 + 1:c1] + add[c0 + 1:c1] > thr)
            if t >= 0:
                c = c0 + 1 + t
                return int(start[c]) + _first(self._p[c] > thr - int(add[c]))
        t = _first(self._p[c1][:i1] > thr - int(add[c1]))
        return int(start[c1]) + t if t >= 0 else None

    def last_prof_above(self, j0: int, j1: int, thr: int) -> int | None:
        """The last step ``j0 <= j < j1`` with ``prof[j] > thr`` (``None``: none)."""
        if j1 <= j0:
            return None
        c0, i0, c1, i1 = self._span(j0, j1)
        add, start = self._add, self._starts
        if c0 == c1:
            t = _last(self._p[c0][i0:i1] > thr - int(add[c0]))
            return int(start[c0]) + i0 + t if t >= 0 else None
        t = _last(self._p[c1][:i1] > thr - int(add[c1]))
        if t >= 0:
            return int(start[c1]) + t
        if c1 > c0 + 1:
            t = _last(self._pmax[c0 + 1:c1] + add[c0 + 1:c1] > thr)
            if t >= 0:
                c = c0 + 1 + t
                return int(start[c]) + _last(self._p[c] > thr - int(add[c]))
        t = _last(self._p[c0][i0:] > thr - int(add[c0]))
        return int(start[c0]) + i0 + t if t >= 0 else None

    def min_cross(self, j0: int, j1: int) -> tuple[int, int] | None:
        """``(min(cross[j0:j1]), earliest step of it)`` (``None`` when empty)."""
        if j1 <= j0:
            return None
        c0, i0, c1, i1 = self._span(j0, j1)
        add, start = self._add, self._starts
        seg = self._x[c0][i0:i1] if c0 == c1 else self._x[c0][i0:]
        t = int(seg.argmin())
        best = (int(seg[t]) + int(add[c0]), int(start[c0]) + i0 + t)
        if c0 == c1:
            return best
        if c1 > c0 + 1:
            vals = self._xmin[c0 + 1:c1] + add[c0 + 1:c1]
            ci = int(vals.argmin())
            if int(vals[ci]) < best[0]:
                c = c0 + 1 + ci
                best = (int(vals[ci]), int(start[c]) + int(self._x[c].argmin()))
        seg = self._x[c1][:i1]
        t = int(seg.argmin())
        v = int(seg[t]) + int(add[c1])
        if v < best[0]:
            best = (v, int(start[c1]) + t)
        return best

    def first_cross_at_most(self, j0: int, j1: int, thr: int) -> int | None:
        """The first step ``j0 <= j < j1`` with ``cross[j] <= thr`` (``None``: none)."""
        if j1 <= j0:
            return None
        c0, i0, c1, i1 = self._span(j0, j1)
        add, start = self._add, self._starts
        seg = self._x[c0][i0:i1] if c0 == c1 else self._x[c0][i0:]
        t = _first(seg <= thr - int(add[c0]))
        if t >= 0:
            return int(start[c0]) + i0 + t
        if c0 == c1:
            return None
        if c1 > c0 + 1:
            t = _first(self._xmin[c0 + 1:c1] + add[c0 + 1:c1] <= thr)
            if t >= 0:
                c = c0 + 1 + t
                return int(start[c]) + _first(self._x[c] <= thr - int(add[c]))
        t = _first(self._x[c1][:i1] <= thr - int(add[c1]))
        return int(start[c1]) + t if t >= 0 else None

    # ------------------------------------------------------------------ updates
    def add_range(self, j0: int, j1: int, value: int) -> None:
        """``prof[j0:j1] += value`` and ``cross[j0:j1] += value``."""
        if j1 <= j0:
            return
        c0, i0, c1, i1 = self._span(j0, j1)
        if c0 == c1:
            self._p[c0][i0:i1] += value
            self._x[c0][i0:i1] += value
            self._refresh(c0)
            return
        self._p[c0][i0:] += value
        self._x[c0][i0:] += value
        self._refresh(c0)
        self._p[c1][:i1] += value
        self._x[c1][:i1] += value
        self._refresh(c1)
        self._add[c0 + 1:c1] += value

    def add_cross(self, j: int, value: int) -> None:
        """``cross[j] += value``."""
        c, i = self._locate(j)
        self._x[c][i] += value
        self._xmin[c] = self._x[c].min()

    def insert(self, k: int, ops: Sequence[int], prof: np.ndarray, cross: np.ndarray) -> None:
        """Insert ``ops`` (unplaced) with their curves before step ``k`` (``k == m``: append)."""
        size = len(ops)
        if not size:
            return
        c, i = self._locate(k)
        off = int(self._add[c])
        o = np.asarray(ops, dtype=np.int64)
        self._ops[c] = np.concatenate((self._ops[c][:i], o, self._ops[c][i:]))
        self._p[c] = np.concatenate((self._p[c][:i], np.asarray(prof, dtype=np.int64) - off,
                                     self._p[c][i:]))
        self._x[c] = np.concatenate((self._x[c][:i], np.asarray(cross, dtype=np.int64) - off,
                                     self._x[c][i:]))
        self.chunk_of[o] = c
        self._idx[self._ops[c][i:]] = np.arange(i, len(self._ops[c]))
        self._start[c + 1:] += size
        self._starts = self._start.tolist()
        self.m += size
        self._refresh(c)
        if len(self._ops[c]) > 2 * self._chunk:
            self._split(c)

    def _split(self, c: int) -> None:
        half = len(self._ops[c]) // 2
        for lst in (self._ops, self._p, self._x):
            whole = lst[c]
            lst[c:c + 1] = [whole[:half].copy(), whole[half:].copy()]
        later = self.chunk_of > c
        self.chunk_of[later] += 1
        moved = self._ops[c + 1]
        self.chunk_of[moved] = c + 1
        self._idx[moved] = np.arange(len(moved))
        self._add = np.insert(self._add, c + 1, self._add[c])
        self._pmax = np.insert(self._pmax, c + 1, 0)
        self._xmin = np.insert(self._xmin, c + 1, 0)
        self._start = np.insert(self._start, c + 1, self._start[c] + half)
        self._starts = self._start.tolist()
        self._refresh(c)
        self._refresh(c + 1)

    # ------------------------------------------------------------------ read-out
    def sequence(self) -> list[int]:
        """The ops in order."""
        return np.concatenate(self._ops).tolist() if self.m else []

    def prof(self) -> np.ndarray:
        """The ``prof`` curve (int64, one value per step)."""
        if not self.m:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([p + a for p, a in zip(self._p, self._add.tolist(), strict=True)])

    def cross(self) -> np.ndarray:
        """The ``cross`` curve (int64, one value per step)."""
        if not self.m:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([x + a for x, a in zip(self._x, self._add.tolist(), strict=True)])
