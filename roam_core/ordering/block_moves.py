"""Exact curves of block moves: an order with a set of its ops moved to one place.

The whole-order search (:mod:`roam_core.ordering.lns`) scores thousands of candidates per
run, and each is the current order with a few ops (``M``, at most ``max_move_ops``) taken out
and put back as one block after a given step.  Re-simulating the candidate costs a pass over
every storage and user of the graph; this scores it from the current order's curve instead,
with the same result to the byte:

* the ops outside ``M`` keep their relative order, so a storage none of whose ops is in
  ``M`` is live at such an op's new step exactly when it was live at its old step, and at
  the block's steps exactly when it was live across the gap the block went into (live after
  step ``after`` and not freed there);
* only the storages that an op of ``M`` makes or uses change their lifetimes: their old
  spans are taken out of the curve and their new spans added.

Validity needs only the edges of the ops of ``M`` (the others keep their order).

Examples
--------
>>> from roam_core.model.samples import diamond
>>> from roam_core.ordering.live_bytes import IndexLiveBytes
>>> sc = IndexLiveBytes.of(diamond(), 1)
>>> bm = BlockMoves(sc, np.array([0, 1, 2, 3]))
>>> cand = np.array([0, 2, 1, 3])          # step 1 (op 1) moved after step 2
>>> bm.score_of(cand, np.array([1]), 2), sc.live(cand).tolist()
((350, 1), [100, 150, 350, 260])
"""

from __future__ import annotations

import numpy as np

from roam_core.ordering.live_bytes import IndexLiveBytes

__all__ = ["BlockMoves"]


class BlockMoves:
    """The current order of a search (steps, spans, curve) and the exact curve of each
    block move of it (module docstring).

    Parameters
    ----------
    sc : IndexLiveBytes
        The graph's evaluator.
    order : numpy.ndarray
        The current order (op indices, complete and valid).
    """

    def __init__(self, sc: IndexLiveBytes, order: np.ndarray) -> None:
        self.sc = sc
        cg = sc.cg
        # a move takes one or a few ops (at most max_move_ops): their edges, storages and
        # the storages' users are walked in Python, the curve over the changed steps in numpy
        self._preds, self._succs, self._users = cg.preds, cg.succs, cg.users
        self._touch = [tuple(sorted({*made, *used})) for made, used in zip(cg.creates, cg.uses,
                                                                             strict=True)]
        self._size = [int(x) for x in sc.size]
        self._producer, self._output = list(cg.producer), list(cg.is_output)
        self.set_order(order)

    def set_order(self, order: np.ndarray) -> None:
        """Make ``order`` the current order."""
        sc = self.sc
        self.order = order
        self.pos = sc.positions(order)
        self.start, self.end = sc.spans(self.pos)
        self._start_l, self._end_l = self.start.tolist(), self.end.tolist()
        self.live = sc.live_at(self.pos)
        # bytes whose last step is each step (graph outputs are never freed)
        freed = ~sc.is_output
        self.freed = np.bincount(self.end[freed] - 1, sc.size[freed].astype(np.float64),
                                 sc.n).astype(np.int64)
        # the peak and its steps of every prefix and every suffix of the curve
        self._pre_max, self._pre_count = _running_peak(self.live)
        suf_max, suf_count = _running_peak(self.live[::-1])
        self._suf_max, self._suf_count = suf_max[::-1], suf_count[::-1]

    def score_of(self, cand: np.ndarray, moved: np.ndarray, after: int,
                 ) -> tuple[int, int] | None:
        """``(peak, steps at the peak)`` of ``cand``: the current order with the ops at
        steps ``moved`` (sorted, without ``after``) taken out and put back, in their order,
        right after the op at step ``after`` (-1: first); ``None`` when ``cand`` breaks an
        ordering edge.  The same as the score of ``sc.live(cand)``."""
        k = len(moved)
        ops = self.order[moved].tolist()
        # only the steps lo..hi-1 hold other ops than before: the curve outside is the same
        lo, hi = min(int(moved[0]), after + 1), max(int(moved[-1]), after) + 1
        pos = self.pos.copy()
        pos[cand[lo:hi]] = np.arange(lo, hi)
        for v in ops:  # only the moved ops' edges can break
            pv = pos[v]
            if any(pos[u] >= pv for u in self._preds[v]) or any(
                    pos[w] <= pv for w in self._succs[v]):
                return None
        st = sorted({s for v in ops for s in self._touch[v]})
        size, start, end, output = self._size, self._start_l, self._end_l, self._output
        # the other storages' bytes at the old steps lo..hi-1, moved with their ops
        others = self.live[lo:hi].copy()
        across = int(self.live[after]) - int(self.freed[after]) if after >= 0 else 0
        for s in st:
            a, b = max(start[s], lo), min(end[s], hi)
            if a < b:
                others[a - lo:b - lo] -= size[s]
            if after >= 0 and start[s] <= after < end[s]:  # not one of the others
                across -= size[s]
                if not output[s] and end[s] - 1 == after:
                    across += size[s]  # nor freed with them
        inside = others[self.pos[cand[lo:hi]] - lo]
        b0 = after + 1 - int(np.count_nonzero(moved <= after)) - lo
        inside[b0:b0 + k] = across  # the others live across the gap after ``after``
        for s in st:  # the moved storages' new spans
            s0 = int(pos[self._producer[s]])
            last = max([s0, *(int(pos[u]) for u in self._users[s])])
            a, b = max(s0, lo), min(self.sc.n if output[s] else last + 1, hi)
            if a < b:
                inside[a - lo:b - lo] += size[s]
        peak = max(int(inside.max()), int(self._pre_max[lo]), int(self._suf_max[hi]))
        steps = (int(np.count_nonzero(inside == peak))
                 + (int(self._pre_count[lo]) if self._pre_max[lo] == peak else 0)
                 + (int(self._suf_count[hi]) if self._suf_max[hi] == peak else 0))
        return peak, steps


def _running_peak(live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(peak, count)`` of every prefix of ``live``: ``peak[i] = max(live[:i])`` (-1 for
    the empty prefix) and ``count[i]`` the steps before ``i`` at that peak."""
    n = len(live)
    peak = np.full(n + 1, -1, dtype=np.int64)
    count = np.zeros(n + 1, dtype=np.int64)
    if n:
        run = np.maximum.accumulate(live)
        at = np.cumsum(live == run)
        rise = np.concatenate(([True], run[1:] > run[:-1]))
        # steps at the running peak since it last rose
        group = np.cumsum(rise) - 1
        base = (at - (live == run))[rise]
        peak[1:], count[1:] = run, at - base[group]
    return peak, count
