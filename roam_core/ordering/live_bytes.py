"""Live bytes per step of op sequences given as indices: the simulator's rule, vectorised.

:func:`roam_core.oracle.simulate.simulate` is the one peak-memory oracle; it takes op ids.
The searches that score thousands of candidate orders, or build a curve they then update
incrementally, work on op *indices* (program numbering, :func:`~roam_core.model.dag_view.
compact`); mapping each candidate back to ids to simulate it would cost a Python lookup per
op.  :class:`IndexLiveBytes` is the one evaluator they share: the same lifetimes as the
simulator (a storage is live from its producer's step to past its last user's, at least one
step; a graph output to the end), on numpy arrays.  The tests hold it against ``simulate``
(``tests/roam_core/ordering/test_live_bytes.py``).

A sequence may also leave ops out (:meth:`IndexLiveBytes.live_and_freed`): storages whose
producer is missing are not counted, and missing users do not extend a lifetime.  That is
the curve the update insertion starts from (:mod:`roam_core.ordering.update_insertion`).

Examples
--------
>>> from roam_core.model.samples import diamond
>>> from roam_core.oracle.simulate import simulate
>>> g = diamond()
>>> ev = IndexLiveBytes.of(g, 1)
>>> ev.live(np.array([0, 2, 1, 3])).tolist(), simulate(g, "acbd", alignment_bytes=1).live_bytes
([100, 150, 350, 260], (100, 150, 350, 260))
"""

from __future__ import annotations

import numpy as np

from roam_core.model.dag_view import CompactGraph, compact
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph

__all__ = ["IndexLiveBytes"]


class IndexLiveBytes:
    """Live bytes per step of sequences of op indices of one graph (resident bytes excluded).

    Parameters
    ----------
    cg : CompactGraph
        The graph's compact view (its storages at one alignment).
    """

    def __init__(self, cg: CompactGraph) -> None:
        self.cg = cg
        self.n = cg.n_ops
        self.size = np.asarray(cg.size_bytes, dtype=np.int64)
        self.producer = np.asarray(cg.producer, dtype=np.int64)
        self.is_output = np.asarray(cg.is_output, dtype=bool)
        counts = np.array([len(u) for u in cg.users], dtype=np.int64)
        self.has_users = counts > 0
        self.users_flat = np.fromiter((u for us in cg.users for u in us), np.int64,
                                      int(counts.sum()))
        self.offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) \
            if len(counts) else np.zeros(0, dtype=np.int64)
        self._edges: tuple[np.ndarray, np.ndarray] | None = None
        # the per-order passes' fixed parts, once: where each used storage's users start,
        # which storages have users, and the weights of the start / end difference array
        self._user_starts = self.offsets[self.has_users]
        self._with_users = np.flatnonzero(self.has_users)
        self._pm_size = np.concatenate((self.size, -self.size))

    @classmethod
    def of(cls, graph: Graph, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> IndexLiveBytes:
        """The evaluator of ``graph`` with storages rounded to ``alignment_bytes``."""
        return cls(compact(graph, alignment_bytes))

    def positions(self, order: np.ndarray) -> np.ndarray:
        """Step of every op in ``order`` (-1 for ops it leaves out)."""
        pos = np.full(self.n, -1, dtype=np.int64)
        pos[order] = np.arange(len(order))
        return pos

    def valid(self, order: np.ndarray) -> bool:
        """True when the complete ``order`` honours every ordering edge."""
        return self.valid_positions(self.positions(order))

    def valid_positions(self, pos: np.ndarray) -> bool:
        """:meth:`valid` of the complete order with op steps ``pos``."""
        if self._edges is None:  # built on first use: only the order searches check
            tails = [p for ps in self.cg.preds for p in ps]
            heads = [v for v, ps in enumerate(self.cg.preds) for _ in ps]
            self._edges = (np.asarray(tails, dtype=np.int64), np.asarray(heads, dtype=np.int64))
        src, dst = self._edges
        return bool(np.all(pos[src] < pos[dst]))

    def spans(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``[start, end)`` of every storage for the complete order with op steps ``pos``."""
        start, last = self._start_last(pos)
        return start, np.where(self.is_output, self.n, last + 1)

    def live(self, order: np.ndarray) -> np.ndarray:
        """Planned bytes live at each step of the complete ``order`` (int64 array)."""
        return self.live_at(self.positions(order))

    def live_at(self, pos: np.ndarray) -> np.ndarray:
        """:meth:`live` of the complete order with op steps ``pos``."""
        start, end = self.spans(pos)
        # one difference array: +size at the start, -size at the end (whole bytes in
        # float64: the sums are exact)
        diff = np.bincount(np.concatenate((start, end)), self._pm_size, self.n + 1)
        return np.cumsum(diff[:self.n]).astype(np.int64)

    def live_and_freed(self, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Live bytes at each step of ``seq`` (any ops, each at most once) and the bytes
        whose last step is each step (graph outputs are never freed).

        Storages made by ops not in ``seq`` are left out; users not in ``seq`` do not
        extend a lifetime.  For a complete order the curve is :meth:`live`.
        """
        m = len(seq)
        start, last = self._start_last(self.positions(seq))
        kept = start >= 0
        out = kept & self.is_output
        ends = kept & ~self.is_output
        prof = np.zeros(m + 1, dtype=np.int64)
        np.add.at(prof, start[kept], self.size[kept])
        np.add.at(prof, last[ends] + 1, -self.size[ends])
        prof[m] -= int(self.size[out].sum())
        freed = np.zeros(m, dtype=np.int64)
        np.add.at(freed, last[ends], self.size[ends])
        return np.cumsum(prof[:m]), freed

    def _start_last(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every storage's producer step and the step of its last use (its producer's when
        no user is placed later)."""
        start = pos[self.producer]
        last = start.copy()
        if len(self._with_users):
            lu = np.maximum.reduceat(pos[self.users_flat], self._user_starts)
            w = self._with_users
            last[w] = np.maximum(lu, start[w])
        return start, last
