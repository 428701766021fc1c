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
        n = sc.n
        sids = np.arange(len(sc.size), dtype=np.int64)
        counts = np.diff(np.append(sc.offsets, len(sc.users_flat)))
        # per op: the storages it makes or uses, and the ordering edges it is an end of
        self._touch = _csr(np.concatenate((sc.producer, sc.users_flat)),
                           np.concatenate((sids, np.repeat(sids, counts))), n)
        self._src, self._dst = sc.edge_arrays()
        self._incident = _csr(np.concatenate((self._src, self._dst)),
                              np.tile(np.arange(len(self._src), dtype=np.int64), 2), n)
        self._user_counts = counts
        self.set_order(order)

    def set_order(self, order: np.ndarray) -> None:
        """Make ``order`` the current order."""
        sc = self.sc
        self.order = order
        self.pos = sc.positions(order)
        self.start, self.end = sc.spans(self.pos)
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
        sc, k = self.sc, len(moved)
        ops = self.order[moved]
        # only the steps lo..hi-1 hold other ops than before: the curve outside is the same
        lo, hi = min(int(moved[0]), after + 1), max(int(moved[-1]), after) + 1
        pos = self.pos.copy()
        pos[cand[lo:hi]] = np.arange(lo, hi)
        e = _gather(*self._incident, ops)
        if not np.all(pos[self._src[e]] < pos[self._dst[e]]):
            return None
        st = np.unique(_gather(*self._touch, ops))
        size = sc.size[st]
        old_s, old_e = self.start[st], self.end[st]
        # the other storages' bytes at the old steps lo..hi-1, moved with their ops
        others = self.live[lo:hi] - _curve(old_s, old_e, size, lo, hi)
        inside = others[self.pos[cand[lo:hi]] - lo]
        if after >= 0:  # the others live across the gap after ``after``
            at = (old_s <= after) & (old_e > after)
            gone = ~sc.is_output[st] & (old_e - 1 == after)
            across = (int(self.live[after]) - int(size[at].sum()) - int(self.freed[after])
                      + int(size[gone].sum()))
        else:
            across = 0
        b0 = after + 1 - int(np.count_nonzero(moved <= after)) - lo
        inside[b0:b0 + k] = across
        new_s = pos[sc.producer[st]]
        last = new_s.copy()
        cnt = self._user_counts[st]
        has = cnt > 0
        if has.any():
            lens = cnt[has]
            users = sc.users_flat[_segments(sc.offsets[st[has]], lens)]
            last[has] = np.maximum(np.maximum.reduceat(pos[users], np.cumsum(lens) - lens),
                                   new_s[has])
        new_e = np.where(sc.is_output[st], sc.n, last + 1)
        inside += _curve(new_s, new_e, size, lo, hi)
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


def _curve(start: np.ndarray, end: np.ndarray, size: np.ndarray, lo: int, hi: int,
           ) -> np.ndarray:
    """Bytes live at the steps ``lo..hi-1`` of storages of ``size`` live over
    ``[start, end)`` (whole bytes in float64 while counted: exact)."""
    ends = np.minimum(np.maximum(np.concatenate((start, end)), lo), hi) - lo
    diff = np.bincount(ends, np.concatenate((size, -size)).astype(np.float64), hi - lo + 1)
    return np.cumsum(diff[:hi - lo].astype(np.int64))


def _csr(keys: np.ndarray, values: np.ndarray, n: int,
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``values`` grouped by ``keys`` in ``0..n-1``: ``(flat, offsets, counts)``."""
    order = np.argsort(keys, kind="stable")
    counts = np.bincount(keys, minlength=n).astype(np.int64)
    return values[order], np.cumsum(counts) - counts, counts


def _segments(offsets: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The flat indices of the segments ``[offsets[i], offsets[i] + lens[i])``, in turn."""
    firsts = np.cumsum(lens) - lens
    return np.repeat(offsets - firsts, lens) + np.arange(int(lens.sum()), dtype=np.int64)


def _gather(flat: np.ndarray, offsets: np.ndarray, counts: np.ndarray,
            keys: np.ndarray) -> np.ndarray:
    """The values of ``keys`` in the CSR ``(flat, offsets, counts)``, concatenated."""
    return flat[_segments(offsets[keys], counts[keys])]
