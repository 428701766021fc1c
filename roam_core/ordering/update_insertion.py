"""Cost-aware placement of per-parameter update groups in an order.

Placing groups (:func:`insert_update_groups`)
---------------------------------------------
1. Split the ops into the groups, the *base* (no group op among its ancestors: forward and
   backward) and the *tail* (everything else).
2. Order the base with a cheap scheduler (LPMF) and append the tail in topological order.
3. Insert the groups one at a time, largest ``peak_extra_bytes`` first, each as one block.
   A block may go in any slot between its last ancestor and its first descendant in the
   current sequence; a slot's score is the peak of the sequence with the block there
   (gradients kept alive until the slot, the block's own curve on top of what crosses the
   slot, storages the block leaves for later), and the slot with the lowest resulting peak
   wins (ties: earliest).  The profile is then updated in place.

Cost: the sequence and its curve live in a :class:`~roam_core.ordering.chunked_profile.
ChunkedProfile` (chunks of a few hundred steps with lazy offsets), and the best slot is found
with a few range queries on it (:func:`_insert_block`) instead of a pass over every slot of
the window, so a block costs ``O(chunk + N / chunk)`` plus its own size, not ``O(N)``: the
100k-op GPT-2 graphs' ~4,300 groups no longer make the insertion quadratic.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.base.errors import ConfigError, GraphError
from roam_core.model.dag_view import CompactGraph, compact
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, Order
from roam_core.model.reach import topological_indices
from roam_core.oracle.simulate import simulate
from roam_core.ordering.chunked_profile import ChunkedProfile
from roam_core.ordering.list_schedulers import lpmf_indices, lpmf_order
from roam_core.ordering.live_bytes import IndexLiveBytes
from roam_core.ordering.update_groups import UpdateGroup, block_order, block_profile, update_groups

__all__ = ["best_update_insertion", "insert_update_groups", "tracked_insertion"]

_logger = logging.getLogger(__name__)

_INF = float("inf")

#: Target chunk length of the insertion's :class:`ChunkedProfile` (tests make it tiny so
#: that small graphs cross chunks too).
_CHUNK = 512

#: How the forward + backward ops are ordered before the groups go in.
BaseMethod = str | Callable[[Graph], Order]

# ------------------------------------------------------------------ insertion
def insert_update_groups(
    graph: Graph,
    groups: Sequence[UpdateGroup] | None = None,
    *,
    base_method: BaseMethod = "lpmf",
    tie: str = "early",
    group_order: str = "largest",
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
) -> Order:
    """An order: a cheap base order with every update group inserted at its best slot.

    Parameters
    ----------
    graph : Graph
        The graph.
    groups : sequence of UpdateGroup, optional
        Default :func:`update_groups`.
    base_method : str or callable
        How the forward + backward ops are ordered: ``"lpmf"`` (LPMF on them alone),
        ``"eager"`` (program order) or a strategy ``Graph -> Order`` (its order of the whole
        graph, restricted to them).
    tie : str
        ``"early"`` (earliest slot among equal peaks) or ``"light"`` (the slot where the
        block's own peak is lowest, then earliest).
    group_order : str
        ``"largest"`` (by ``peak_extra_bytes``, descending) or ``"program"`` (by the
        program position of each group's first op).
    alignment_bytes : int
        Rounding of every storage size in the slot scores.

    Returns
    -------
    tuple of OpId
        A valid order.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> insert_update_groups(tiny_train_step())[-2:]
    ('grad_w', 'update')
    """
    a = alignment_bytes
    groups = update_groups(graph, alignment_bytes=a) if groups is None else tuple(groups)
    return tracked_insertion(graph, groups, base_method, tie, group_order, alignment_bytes=a)[0]


@dataclass(frozen=True, slots=True)
class _Prepared:
    """Steps 1-2 of :func:`insert_update_groups`, shared by every insertion variant.

    ``seq`` is the base + tail sequence, ``prof`` its live bytes per step and ``freed`` the
    bytes whose last step is each step (copied into a fresh store for each insertion run);
    ``blocks`` holds every group's ops in block order.
    """

    cg: CompactGraph
    groups: tuple[UpdateGroup, ...]
    gops: tuple[tuple[int, ...], ...]
    blocks: tuple[tuple[int, ...], ...]
    seq: tuple[int, ...]
    prof: np.ndarray
    freed: np.ndarray


def _prepare(graph: Graph, groups: Sequence[UpdateGroup], base_method: BaseMethod,
             alignment_bytes: int) -> _Prepared:
    cg = compact(graph, alignment_bytes)
    n = cg.n_ops
    gops = tuple(tuple(cg.index[o] for o in g.op_ids) for g in groups)
    in_u = [False] * n
    for ops in gops:
        for v in ops:
            in_u[v] = True
    # the descendants of the group ops: one walk over the edges (O(E)), not N-bit masks
    below = [False] * n
    stack = [v for ops in gops for v in ops]
    while stack:
        v = stack.pop()
        for u in cg.succs[v]:
            if not below[u]:
                below[u] = True
                stack.append(u)
    # 1. base and tail
    topo = topological_indices(graph)
    base = [v for v in topo if not in_u[v] and not below[v]]
    tail = [v for v in topo if not in_u[v] and below[v]]
    if base_method == "lpmf":
        sub, old = cg.subgraph(base)
        base_order = [old[i] for i in lpmf_indices(sub)]
    elif base_method == "eager":
        base_order = base
    elif callable(base_method):
        # any strategy: its order of the whole graph restricted to the base (still valid:
        # the base is closed under ancestors)
        keep = set(base)
        base_order = [cg.index[o] for o in base_method(graph) if cg.index[o] in keep]
    else:
        raise ConfigError(f"unknown base method {base_method!r} for update insertion; "
                          "known: 'lpmf', 'eager' or an ordering function")
    # 2. the sequence and its profile (the group ops are not in it yet)
    seq = base_order + tail
    prof, freed = IndexLiveBytes(cg).live_and_freed(np.asarray(seq, dtype=np.int64))
    blocks = tuple(tuple(block_order(cg, ops, [cg.index[o] for o in g.state_init_ops]))
                   for g, ops in zip(groups, gops, strict=True))
    return _Prepared(cg, tuple(groups), gops, blocks, tuple(seq), prof, freed)


def _insert_all(prep: _Prepared, tie: str, group_order: str, stop_at: int | None = None,
                ) -> tuple[list[int], np.ndarray] | None:
    """Step 3: insert every group into a copy of the prepared sequence.

    With ``stop_at``, ``None`` as soon as the curve's maximum reaches it: an insertion only
    adds to the curve (longer lifetimes, new steps), so its final peak is at least that and
    the caller, which keeps only a strictly lower peak, would drop the result anyway.
    """
    cg, groups, gops = prep.cg, prep.groups, prep.gops
    store = ChunkedProfile(prep.seq, prep.prof, prep.prof - prep.freed, cg.n_ops,
                           chunk=_CHUNK)
    if stop_at is not None and store.peak() >= stop_at:
        return None
    if group_order == "program":
        order_of_groups = sorted(range(len(groups)), key=lambda k: gops[k][0])
    else:
        order_of_groups = sorted(range(len(groups)),
                                 key=lambda k: (-groups[k].peak_extra_bytes, gops[k][0]))
    for k in order_of_groups:
        _insert_block(cg, store, list(prep.blocks[k]), tie)
        if stop_at is not None and store.peak() >= stop_at:
            return None
    return store.sequence(), store.prof()


def tracked_insertion(
    graph: Graph, groups: Sequence[UpdateGroup], base_method: BaseMethod, tie: str,
    group_order: str = "largest", *, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
) -> tuple[Order, np.ndarray | None]:
    """The insertion order and the live-bytes curve it tracked (equals ``simulate``'s at
    ``alignment_bytes``)."""
    cg = compact(graph, alignment_bytes)
    if not groups:
        if base_method == "lpmf":
            seq = lpmf_indices(cg)
        elif callable(base_method):
            seq = [cg.index[o] for o in base_method(graph)]
        else:
            seq = list(range(cg.n_ops))
        return cg.order_ids(seq), None
    done = _insert_all(_prepare(graph, groups, base_method, alignment_bytes), tie, group_order)
    assert done is not None  # no stop_at: never stopped
    seq, prof = done
    return cg.order_ids(seq), prof


def _nearest_placed(cg: CompactGraph, block: list[int], placed: np.ndarray,
                    up: bool) -> list[int]:
    """The placed ops nearest to ``block`` among its ancestors (``up``) or descendants:
    walk the edges from the block through ops not placed yet (``placed[v] < 0``) and stop
    at the first placed op on every path.  The sequence respects every ordering path, so
    the latest ancestor / earliest descendant in it is one of them (``O(edges walked)``,
    where the reachability masks cost ``O(N)`` per block)."""
    nbrs = cg.preds if up else cg.succs
    seen = set(block)
    stack = list(block)
    found = []
    while stack:
        v = stack.pop()
        for u in nbrs[v]:
            if u in seen:
                continue
            seen.add(u)
            if placed[u] >= 0:
                found.append(u)
            else:
                stack.append(u)
    return found


class _Steps:
    """A step function of the step index: ``vals[i]`` on ``points[i - 1] <= j < points[i]``
    (``points`` sorted, repeats allowed; ``vals`` one longer)."""

    __slots__ = ("points", "vals")

    def __init__(self, points: list[int], vals: list[int]) -> None:
        self.points, self.vals = points, vals

    def at(self, j: int) -> int:
        return self.vals[bisect.bisect_right(self.points, j)]

    def pieces(self, j0: int, j1: int) -> list[tuple[int, int, int]]:
        """``(start, stop, value)`` covering ``[j0, j1)`` left to right, each non-empty."""
        out = []
        i = bisect.bisect_right(self.points, j0)
        s = j0
        pts = self.points
        while s < j1:
            while i < len(pts) and pts[i] <= s:
                i += 1
            t = min(pts[i], j1) if i < len(pts) else j1
            out.append((s, t, self.vals[i]))
            s = t
        return out


def _rising(cuts: list[tuple[int, int]]) -> _Steps:
    """``sum(size for point, size in cuts if point <= j)``."""
    cuts = sorted(cuts)
    vals = [0]
    for _, size in cuts:
        vals.append(vals[-1] + size)
    return _Steps([p for p, _ in cuts], vals)


def _insert_block(cg: CompactGraph, store: ChunkedProfile, block: list[int], tie: str) -> None:
    """Insert ``block`` at its best slot of ``store`` (steps a-e).

    The slot minimises ``total(k) = max(PA(k), SC(k), X(k))`` over the window ``lo <= k <=
    hi``: ``PA`` (the sequence before ``k`` with the externals extended to ``k``, a running
    maximum, non-decreasing), ``SC`` (the sequence from ``k`` on with the block's long
    storages, non-increasing) and ``X`` (what crosses into the block plus the block's own
    peak).  ``F = max(PA, SC)`` is at most ``T`` on an interval ``I(T)``, so the search
    starts at the lowest level ``T = max(PA(lo), SC(hi))``, takes the minimum of ``X`` over
    ``I(T)`` and raises ``T`` to the next value where ``I(T)`` grows until that minimum
    fits: every step is a few range queries of ``store`` (``O(chunk + N / chunk)``), not a
    pass over the window.  The slot is the one the plain scan of every slot picks: the
    earliest of the lowest ``total`` (``"early"``), or of the lowest ``(total, X)``
    (``"light"``).
    """
    placed = store.chunk_of
    lo, hi = _window(cg, store, block)  # a.
    internal, bfreed, long, ext = block_profile(cg, block, placed)
    ext_e, long_last = _externals(cg, store, ext), _long_lasts(cg, store, long)  # b.
    slots = _SlotSearch(store, lo, hi, internal, len(block), ext_e, long_last)  # c.
    k = slots.best(tie)  # d.
    _apply(store, k, block, internal, bfreed, ext_e[:bisect.bisect_left(slots.es, k)],
           long_last)  # e.


def _window(cg: CompactGraph, store: ChunkedProfile, block: list[int]) -> tuple[int, int]:
    """a. The slots ``lo..hi`` of ``block``: after every ancestor, before every descendant
    already placed."""
    placed = store.chunk_of
    a_ops = _nearest_placed(cg, block, placed, up=True)
    d_ops = _nearest_placed(cg, block, placed, up=False)
    lo = int(store.positions(a_ops).max()) + 1 if a_ops else 0
    hi = int(store.positions(d_ops).min()) if d_ops else store.m
    if lo > hi:  # cannot happen for convex groups in a valid sequence; never trust it
        raise GraphError(f"no slot for the update block starting at {cg.op_ids[block[0]]!r}")
    return lo, hi


def _externals(cg: CompactGraph, store: ChunkedProfile,
               ext: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int, int]]:
    """b. The block's external storages made by placed ops, as ``(last use in the
    sequence, size, last step in the block, storage)``, by last use (outputs: the end)."""
    placed, m = store.chunk_of, store.m
    ext_e = []
    for s, size, lastb in ext:
        p = cg.producer[s]
        if placed[p] < 0:
            continue  # made by a group not inserted yet: counted when that one goes in
        if cg.is_output[s]:
            e = m
        else:
            e = int(store.positions([p, *(u for u in cg.users[s] if placed[u] >= 0)]).max())
        ext_e.append((e, size, lastb, s))
    ext_e.sort()
    return ext_e


def _long_lasts(cg: CompactGraph, store: ChunkedProfile,
                long: Sequence[tuple[int, int]]) -> list[tuple[int, int, bool]]:
    """b. The block's long storages (live past it) as ``(last use in the sequence, size,
    is output)``."""
    placed = store.chunk_of
    long_last = []
    for s, size in long:
        if cg.is_output[s]:
            long_last.append((store.m - 1, size, True))
        else:
            last = int(store.positions([u for u in cg.users[s] if placed[u] >= 0]).max())
            long_last.append((last, size, False))
    return long_last


class _SlotSearch:
    """c-d. The step functions the block adds to the sequence and the search of the best
    slot on them (see :func:`_insert_block`).

    ``A = prof + offA`` (externals extended past their last use e, steps > e), ``C = prof +
    offC`` (long storages, steps <= last) and ``X(k) = cross[k - 1] + offX(k - 1)`` (the
    block's peak with the externals whose last use is before k extended; cross before step 0
    is 0).
    """

    def __init__(self, store: ChunkedProfile, lo: int, hi: int, internal: np.ndarray,
                 block_len: int, ext_e: Sequence[tuple[int, int, int, int]],
                 long_last: Sequence[tuple[int, int, bool]]) -> None:
        self.store, self.lo, self.hi, self.m = store, lo, hi, store.m
        self.off_a = _rising([(e + 1, size) for e, size, _, _ in ext_e])
        total_c = sum(size for _, size, _ in long_last)
        rc = _rising([(last + 1, size) for last, size, _ in long_last])
        self.off_c = _Steps(rc.points, [total_c - v for v in rc.vals])
        bpeaks = [int(internal.max()) if block_len else 0]
        curve = internal.copy()
        for _, size, lastb, _ in ext_e:
            curve[: lastb + 1] += size
            bpeaks.append(int(curve.max()))
        self.bpeaks = bpeaks
        self.es = [e for e, *_ in ext_e]
        self.off_x = _Steps(self.es, bpeaks)  # offX(j) = bpeaks[#{e <= j}]

    def prof_max(self, j0: int, j1: int, off: _Steps) -> int:
        best = 0  # both curves are >= 0: an empty range counts 0
        for s, t, v in off.pieces(j0, j1):
            best = max(best, self.store.max_prof(s, t) + v)  # type: ignore[operator]  # non-empty
        return best

    def first_a_above(self, j0: int, thr: int) -> int:
        for s, t, v in self.off_a.pieces(j0, self.hi):
            j = self.store.first_prof_above(s, t, thr - v)
            if j is not None:
                return j
        return self.hi

    def after_last_c_above(self, j1: int, thr: int) -> int:
        for s, t, v in reversed(self.off_c.pieces(self.lo, j1)):
            j = self.store.last_prof_above(s, t, thr - v)
            if j is not None:
                return j + 1
        return self.lo

    def min_x(self, k0: int, k1: int) -> tuple[int, int]:
        """min X over slots k0 <= k <= k1 and its earliest slot."""
        best = (self.bpeaks[0], 0) if k0 == 0 else None
        for s, t, v in self.off_x.pieces(max(k0, 1) - 1, k1):
            got = self.store.min_cross(s, t)
            assert got is not None
            if best is None or got[0] + v < best[0]:
                best = (got[0] + v, got[1] + 1)
        assert best is not None
        return best

    def first_x_at_most(self, k0: int, k1: int, thr: int) -> int:
        if k0 == 0 and self.bpeaks[0] <= thr:
            return 0
        for s, t, v in self.off_x.pieces(max(k0, 1) - 1, k1):
            j = self.store.first_cross_at_most(s, t, thr - v)
            if j is not None:
                return j + 1
        raise AssertionError("the minimum of X was not found again")

    def best(self, tie: str) -> int:
        """d. The slot: raise the level ``T`` until the lowest ``X`` on ``I(T)`` fits."""
        lo, hi, store = self.lo, self.hi, self.store
        level = max(self.prof_max(0, lo, self.off_a), self.prof_max(hi, self.m, self.off_c))
        a = self.after_last_c_above(hi, level)
        b = self.first_a_above(lo, level)
        seen: tuple[int, int, int, int] | None = None  # slots a..b scanned: (a, b, min X, slot)
        while True:
            if a <= b:
                g, gk = self._min_x_grown(a, b, seen)
                seen = (a, b, g, gk)
            else:
                g, gk = _INF, -1  # type: ignore[assignment]  # inf: no slot, only compared
            if g <= level:  # total == level on every slot of I(level) where X fits
                return gk if tie == "light" else self.first_x_at_most(a, b, level)
            nxt = _INF
            if b < hi:
                nxt = store.prof_at(b) + self.off_a.at(b)
            if a > lo:
                nxt = min(nxt, store.prof_at(a - 1) + self.off_c.at(a - 1))
            if g < nxt:  # nothing outside I(level) gets as low as g: total == g only at X == g
                return gk
            level = nxt  # type: ignore[assignment]  # finite: with nxt = inf, g < nxt returned
            b = self.first_a_above(b, level)
            a = self.after_last_c_above(a, level)

    def _min_x_grown(self, a: int, b: int, seen: tuple[int, int, int, int] | None,
                     ) -> tuple[int, int]:
        """min X over slots ``a..b`` and its earliest slot, reusing the last interval's."""
        if seen is None:
            return self.min_x(a, b)
        g, gk = seen[2], seen[3]
        if a < seen[0]:
            lv, lk = self.min_x(a, seen[0] - 1)
            if lv <= g:
                g, gk = lv, lk
        if b > seen[1]:
            rv, rk = self.min_x(seen[1] + 1, b)
            if rv < g:
                g, gk = rv, rk
        return g, gk


def _apply(store: ChunkedProfile, k: int, block: list[int], internal: np.ndarray,
           bfreed: np.ndarray, ext_before: Sequence[tuple[int, int, int, int]],
           long_last: Sequence[tuple[int, int, bool]]) -> None:
    """e. Insert the block at slot ``k``: extend the externals whose last use is before it
    (``ext_before``), add the long storages, splice the block's curve in."""
    bprof = internal + (store.cross_at(k - 1) if k else 0)
    for e, size, lastb, _ in ext_before:
        store.add_range(e + 1, k, size)
        store.add_cross(e, size)
        bprof[: lastb + 1] += size
        bfreed[lastb] += size
    for last, size, out in long_last:
        store.add_range(k, last + 1, size)
        if not out:
            store.add_cross(last, -size)
    store.insert(k, block, bprof, bprof - bfreed)


def best_update_insertion(graph: Graph, *,
                          alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """Best (by ``simulate`` at ``alignment_bytes``) of LPMF-based update insertion over both
    slot tie rules and both group orders; never worse than plain LPMF on the whole graph.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> best_update_insertion(tiny_train_step())[-1]
    'update'
    """
    a = alignment_bytes
    groups = update_groups(graph, alignment_bytes=a)
    plain = lpmf_order(graph, alignment_bytes=a)
    if not groups:
        return plain
    plain_prof = simulate(graph, plain, alignment_bytes=a)
    best: tuple[int, Order] = (plain_prof.peak_bytes, plain)
    prep = _prepare(graph, groups, "lpmf", a)
    for group_order in ("largest", "program"):
        for tie in ("early", "light"):
            # the tracked curve excludes the resident bytes; a variant whose curve reaches
            # the best peak so far cannot win, so it stops there (on most graphs the
            # sequence without the groups is already at plain LPMF's peak: none runs)
            try:
                done = _insert_all(prep, tie, group_order,
                                   stop_at=best[0] - plain_prof.resident_bytes)
            except GraphError as e:
                _logger.warning("update insertion failed on %s (%s); using LPMF", graph.name, e)
                return best[1]
            if done is None:
                continue
            order = prep.cg.order_ids(done[0])
            peak = simulate(graph, order, alignment_bytes=a).peak_bytes
            if peak < best[0]:
                best = (peak, order)
    return best[1]
