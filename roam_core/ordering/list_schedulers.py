"""Greedy list schedulers: program order, ROAM's LESCEA, inductor's LPMF and XLA's list scheduler.

Each picks, step by step, one ready op by a memory key.  The ready ops sit in priority queues
(:class:`_BucketMin`: one lazy heap per distinct allocation size and a segment tree over the
sizes, for the keys restricted to ops that fit under a threshold; a plain lazy heap for
``xla_list``), and a step updates only the keys it changed
(:class:`~roam_core.model.dag_view.ScheduleState`), so a step costs ``O(changes x log N)``, not
``O(ready ops)`` (deep graphs keep hundreds of ops ready).  The keys end with the same tie
breaks as a full scan, so the orders are exactly those of a scan over every ready op.  See
:mod:`roam_core.ordering.registry` for the registry and the best-of driver.

References
----------
inductor ``torch/_inductor/memory.py`` (LPMF); XLA ``hlo_memory_scheduler.cc`` (list
scheduler); ROAM ``baselines/heuristics/LESCEA.py``.  Ideas only: no code was copied.
"""

from __future__ import annotations

import bisect
import heapq
import math

import numpy as np

from roam_core.base.graph_cache import PerGraphCache
from roam_core.model.dag_view import CompactGraph, ScheduleState, compact
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, Order

__all__ = ["eager_order", "lescea_order", "lpmf_indices", "lpmf_order", "xla_list_order"]

_BIG = np.iinfo(np.int64).max // 4

#: The value of an empty bucket / tree node: above every entry (entries start with an int).
_EMPTY: tuple[float] = (math.inf,)


class _BucketMin:
    """Ready ops bucketed by a static value, with the smallest entry among the buckets whose
    value is at most a threshold in ``O(log buckets)``.

    Every op ``v`` in the set has one current entry, a tuple ending with ``v`` (the key, ties
    broken by the tuple's later fields); an entry may only be replaced by a smaller one
    (:meth:`push` again).  Each bucket is a heap with lazy deletion whose top is always
    current; a segment tree over the buckets (ascending value) holds each bucket's top.
    """

    __slots__ = ("bucket", "cur", "heaps", "size", "tree", "vals")

    def __init__(self, static: list[int]) -> None:
        vals = sorted(set(static))
        where = {x: i for i, x in enumerate(vals)}
        self.vals = vals
        self.bucket = [where[x] for x in static]
        size = 1
        while size < len(vals):
            size *= 2
        self.size = size
        self.tree: list[tuple] = [_EMPTY] * (2 * size)
        self.heaps: list[list[tuple]] = [[] for _ in vals]
        self.cur: dict[int, tuple] = {}

    def push(self, v: int, entry: tuple) -> None:
        """Add ``v`` or lower its entry to ``entry``."""
        self.cur[v] = entry
        b = self.bucket[v]
        heapq.heappush(self.heaps[b], entry)
        tree = self.tree
        i = b + self.size
        while i and entry < tree[i]:
            tree[i] = entry
            i >>= 1

    def remove(self, v: int) -> None:
        """Take ``v`` out of the set."""
        cur = self.cur
        del cur[v]
        b = self.bucket[v]
        h = self.heaps[b]
        if h[0][-1] != v:  # the top is current, so it is not v's: nothing above changes
            return
        while h and cur.get(h[0][-1]) is not h[0]:
            heapq.heappop(h)
        tree = self.tree
        i = b + self.size
        tree[i] = h[0] if h else _EMPTY
        i >>= 1
        while i:
            a, c = tree[2 * i], tree[2 * i + 1]
            m = a if a < c else c
            if tree[i] is m:
                break
            tree[i] = m
            i >>= 1

    def min_upto(self, limit: int) -> tuple | None:
        """The smallest entry among the buckets of value ``<= limit`` (None if none)."""
        r = bisect.bisect_right(self.vals, limit)
        if not r:
            return None
        tree = self.tree
        lo, hi = self.size, self.size + r
        best = _EMPTY
        while lo < hi:
            if lo & 1:
                if tree[lo] < best:
                    best = tree[lo]
                lo += 1
            if hi & 1:
                hi -= 1
                if tree[hi] < best:
                    best = tree[hi]
            lo >>= 1
            hi >>= 1
        return None if best is _EMPTY else best

    def first_bucket_min(self) -> tuple | None:
        """The smallest entry of the lowest-valued non-empty bucket (None if empty)."""
        tree = self.tree
        if tree[1] is _EMPTY:
            return None
        i = 1
        while i < self.size:
            i = 2 * i if tree[2 * i] is not _EMPTY else 2 * i + 1
        return tree[i]


# ----------------------------------------------------------------- the strategies
def eager_order(graph: Graph, *,
                alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """Program order (the eager baseline).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> eager_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    return tuple(graph.op_ids)


def lpmf_indices(cg: CompactGraph) -> list[int]:
    """LPMF over a compact graph: op indices in order (see :func:`lpmf_order`)."""
    st = ScheduleState(cg)
    size, last_free, dead_out = st.defined, st.last_free, st.dead_out
    # 1. the outputs are live at the end whatever the order: a lower bound on the peak
    max_mem = int(sum(s for s, o in zip(cg.size_bytes, cg.is_output) if o))
    live = 0
    ready = _BucketMin(size)  # by size; entries (memory after, index)
    cur = ready.cur
    for v in st.initially_ready():
        ready.push(v, (size[v] - last_free[v] - dead_out[v], v))
    for _ in range(cg.n_ops):
        # 2. (i) an op that fits under the peak so far: least memory after it
        e = ready.min_upto(max_mem - live)
        # 3. (ii) otherwise the least memory while it runs, then least after
        if e is None:
            e = ready.first_bucket_min()
            if e is None:
                break
        v = e[-1]
        live += size[v]
        max_mem = max(max_mem, live)
        live -= last_free[v] + dead_out[v]
        ready.remove(v)
        new, grew = st.schedule(v)
        for u in grew:
            if u in cur:
                ready.push(u, (size[u] - last_free[u] - dead_out[u], u))
        for u in new:
            ready.push(u, (size[u] - last_free[u] - dead_out[u], u))
    return st.finish()


def lpmf_order(graph: Graph, *,
               alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """Inductor-style "least peak memory first" greedy topological order.

    Keeps the peak so far; among ready ops, those whose allocation fits under it are
    preferred, by the least live memory after running; if none fits, the op with the
    least memory while running wins.  Ties go to the smallest program index.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> lpmf_order(diamond())  # sizes round to 512 B: all ties, program index wins
    ('a', 'b', 'c', 'd')
    """
    # the planner asks twice (portfolio, update insertion): deterministic, so kept
    return _LPMF_LAST.get_or_build(graph, lambda: _lpmf_order(graph, alignment_bytes),
                                   key=alignment_bytes)


def _lpmf_order(graph: Graph, alignment_bytes: int) -> Order:
    cg = compact(graph, alignment_bytes)
    return cg.order_ids(lpmf_indices(cg))


#: The last graph's LPMF order (graphs are immutable and the order is deterministic).
_LPMF_LAST: PerGraphCache[Order] = PerGraphCache(max_entries=1)


def lescea_order(graph: Graph, *,
                 alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """ROAM's LESCEA greedy list scheduler.

    ``base`` is the live memory (it never frees outputs nobody reads, as the original);
    among ready ops, those with ``base + defined <= peak`` are preferred by the smallest
    ``base + defined - freed``; otherwise the smallest new peak ``base + defined``.  Ties go
    to the smallest op name.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> lescea_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    cg = compact(graph, alignment_bytes)
    st = ScheduleState(cg)
    name_rank = [0] * cg.n_ops
    for k, i in enumerate(sorted(range(cg.n_ops), key=lambda i: cg.op_ids[i])):
        name_rank[i] = k
    defined, last_free = st.defined, st.last_free
    ready = _BucketMin(defined)  # by defined bytes; entries (defined - freed, name, index)
    cur = ready.cur
    by_new_peak: list[tuple[int, int, int]] = []  # lazy heap (defined, name, index)

    def add(u: int) -> None:
        ready.push(u, (defined[u] - last_free[u], name_rank[u], u))
        heapq.heappush(by_new_peak, (defined[u], name_rank[u], u))

    for v in st.initially_ready():
        add(v)
    base = peak = 0
    for _ in range(cg.n_ops):
        e = ready.min_upto(peak - base)  # ops with base + defined <= peak
        if e is None:  # otherwise the smallest new peak
            while by_new_peak and by_new_peak[0][2] not in cur:
                heapq.heappop(by_new_peak)
            if not by_new_peak:
                break
            e = by_new_peak[0]
        v = e[-1]
        peak = max(peak, base + defined[v])
        base += defined[v] - last_free[v]
        ready.remove(v)
        new, grew = st.schedule(v)
        for u in grew:
            if u in cur:
                ready.push(u, (defined[u] - last_free[u], name_rank[u], u))
        for u in new:
            add(u)
    return cg.order_ids(st.finish())


def _effective_scalar(graph: Graph, cg: CompactGraph) -> np.ndarray:
    out = np.zeros(cg.n_ops, dtype=bool)
    for v, op in enumerate(graph.ops):
        created = graph.storages_created(op.id)
        if created and all(math.prod(graph.tensors[t].shape) <= 1 for t in created):
            out[v] = True
    return out


def xla_list_order(graph: Graph, *,
                   alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """XLA-style list scheduler.

    Priority of a ready op: ``bytes freed if scheduled - bytes defined`` (highest first),
    then its number of users, then the most recently readied; ops producing effective
    scalars are forced early.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> xla_list_order(diamond())
    ('a', 'c', 'b', 'd')
    """
    cg = compact(graph, alignment_bytes)
    st = ScheduleState(cg)
    scalar = _effective_scalar(graph, cg).tolist()
    n_users = [len(s) for s in cg.succs]
    defined, last_free = st.defined, st.last_free
    seq = [0] * cg.n_ops
    counter = 0
    heap: list[tuple[int, int, int, int]] = []  # (-priority, -users, -readied, index), lazy
    cur: dict[int, tuple[int, int, int, int]] = {}

    def push(u: int) -> None:
        prio = _BIG // 2 if scalar[u] else last_free[u] - defined[u]
        cur[u] = e = (-prio, -n_users[u], -seq[u], u)
        heapq.heappush(heap, e)

    for v in st.initially_ready():
        counter += 1
        seq[v] = counter
        push(v)
    for _ in range(cg.n_ops):
        while heap and cur.get(heap[0][3]) is not heap[0]:
            heapq.heappop(heap)
        if not heap:
            break
        v = heapq.heappop(heap)[3]
        del cur[v]
        new, grew = st.schedule(v)
        for u in grew:
            if u in cur and not scalar[u]:
                push(u)
        for u in new:
            counter += 1
            seq[u] = counter
            push(u)
    return cg.order_ids(st.finish())
