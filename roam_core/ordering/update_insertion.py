"""Cost-aware placement of per-parameter update groups in an order.

Placing groups (:func:`insert_update_groups`)
---------------------------------------------
1. Split the ops into the groups, the *base* (no group op among its ancestors: forward and
   backward) and the *tail* (everything else).
2. Order the base with a cheap scheduler (LPMF) and append the tail in topological order.
3. Insert the groups one at a time, largest ``peak_extra_bytes`` first, each as one block.
   A block may go in any slot between its last ancestor and its first descendant in the
   current sequence; every slot is scored in ``O(N)`` with prefix/suffix maxima of the
   current profile (gradients kept alive until the slot, the block's own curve on top of
   what crosses the slot, storages the block leaves for later), and the slot with the
   lowest resulting peak wins (ties: earliest).  The profile is then updated in place.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.base.errors import ConfigError, GraphError
from roam_core.model.dag_view import CompactGraph, compact
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, Order
from roam_core.model.reach import Reachability, mask_to_bool, reachability, topological_indices
from roam_core.oracle.simulate import simulate
from roam_core.ordering.list_schedulers import lpmf_indices, lpmf_order
from roam_core.ordering.update_groups import UpdateGroup, block_order, block_profile, update_groups

__all__ = ["best_update_insertion", "insert_update_groups", "tracked_insertion"]

_logger = logging.getLogger(__name__)

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

    ``seq`` is the base + tail sequence, ``pos`` the step of every op in it (-1: a group
    op), ``prof`` its live bytes per step and ``freed`` the bytes whose last step is each
    step (arrays are copied before each insertion run).
    """

    cg: CompactGraph
    reach: Reachability
    groups: tuple[UpdateGroup, ...]
    gops: tuple[tuple[int, ...], ...]
    seq: tuple[int, ...]
    pos: np.ndarray
    prof: np.ndarray
    freed: np.ndarray


def _prepare(graph: Graph, groups: Sequence[UpdateGroup], base_method: BaseMethod,
             alignment_bytes: int) -> _Prepared:
    cg = compact(graph, alignment_bytes)
    n = cg.n_ops
    reach = reachability(graph)
    gops = tuple(tuple(cg.index[o] for o in g.op_ids) for g in groups)
    in_u = np.zeros(n, dtype=bool)
    u_desc = 0
    for ops in gops:
        for v in ops:
            in_u[v] = True
            u_desc |= reach.descendants[v]
    below = mask_to_bool(u_desc, n)
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
    # 2. the sequence and its profile
    seq = base_order + tail
    m = len(seq)
    pos = np.full(n, -1, dtype=np.int64)
    pos[seq] = np.arange(m)
    prof = np.zeros(m + 1, dtype=np.int64)
    freed = np.zeros(m, dtype=np.int64)
    for s, p in enumerate(cg.producer):
        if pos[p] < 0:
            continue
        start = int(pos[p])
        size = cg.size_bytes[s]
        if cg.is_output[s]:
            prof[start] += size
            prof[m] -= size
            continue
        e = max([start, *(int(pos[u]) for u in cg.users[s] if pos[u] >= 0)])
        prof[start] += size
        prof[e + 1] -= size
        freed[e] += size
    return _Prepared(cg, reach, tuple(groups), gops, tuple(seq), pos, np.cumsum(prof[:m]),
                     freed)


def _insert_all(prep: _Prepared, tie: str, group_order: str) -> tuple[list[int], np.ndarray]:
    """Step 3: insert every group into a copy of the prepared sequence."""
    cg, groups, gops = prep.cg, prep.groups, prep.gops
    seq, pos = list(prep.seq), prep.pos.copy()
    prof, freed = prep.prof.copy(), prep.freed.copy()
    if group_order == "program":
        order_of_groups = sorted(range(len(groups)), key=lambda k: gops[k][0])
    else:
        order_of_groups = sorted(range(len(groups)),
                                 key=lambda k: (-groups[k].peak_extra_bytes, gops[k][0]))
    for k in order_of_groups:
        init = [cg.index[o] for o in groups[k].state_init_ops]
        block = block_order(cg, gops[k], init)
        seq, prof, freed = _insert_block(cg, prep.reach, seq, prof, freed, pos, block, tie)
    return seq, prof


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
    seq, prof = _insert_all(_prepare(graph, groups, base_method, alignment_bytes), tie,
                            group_order)
    return cg.order_ids(seq), prof


def _nearest_placed(cg: CompactGraph, block: list[int], pos: np.ndarray, up: bool) -> list[int]:
    """Positions of the placed ops nearest to ``block`` among its ancestors (``up``) or
    descendants: walk the edges from the block through ops not placed yet and stop at the
    first placed op on every path.  The sequence respects every ordering path, so the
    latest ancestor / earliest descendant in it is one of them (``O(edges walked)``, where
    the reachability masks cost ``O(N)`` per block)."""
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
            if pos[u] >= 0:
                found.append(int(pos[u]))
            else:
                stack.append(u)
    return found


def _seg_max(x: np.ndarray, a: int, b: int, cuts: list[tuple[int, int]], inc: bool) -> int:
    """``max(x[j] + add(j))`` over ``a <= j < b`` (``0`` when empty), where ``add(j)`` is the
    sum of the sizes of ``cuts`` (``(point, size)``) with ``point <= j`` (``inc``) or with
    ``point >= j`` (not ``inc``): one pass over ``x[a:b]`` in slices, no copies."""
    if b <= a:
        return 0
    pts = sorted({min(max(p + (0 if inc else 1), a), b) for p, _ in cuts} | {a, b})
    best = None
    for lo, hi in itertools.pairwise(pts):
        if hi <= lo:
            continue
        add = sum(sz for p, sz in cuts if (p <= lo if inc else p >= hi - 1))
        v = int(x[lo:hi].max()) + add
        best = v if best is None or v > best else best
    return 0 if best is None else best


def _insert_block(
    cg: CompactGraph, reach: Reachability | None, seq: list[int], prof: np.ndarray,
    freed: np.ndarray, pos: np.ndarray, block: list[int], tie: str,
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Insert ``block`` at its best slot of ``seq``; update ``pos`` in place (steps a-e).

    Only the slots of the block's window are scored: the profile before and after it
    enters as two maxima, so a block costs a few passes over the sequence (the splice) plus
    ``O(window)``.  ``reach`` is unused (kept for callers).
    """
    m = len(seq)
    L = len(block)
    # a. window: after every ancestor, before every descendant already placed
    a_pos = _nearest_placed(cg, block, pos, up=True)
    d_pos = _nearest_placed(cg, block, pos, up=False)
    lo = max(a_pos) + 1 if a_pos else 0
    hi = min(d_pos) if d_pos else m
    if lo > hi:  # cannot happen for convex groups in a valid sequence; never trust it
        raise GraphError(f"no slot for the update block starting at {cg.op_ids[block[0]]!r}")
    internal, bfreed, long, ext = block_profile(cg, block, pos)
    # b. externals: last use in the sequence (outputs never extend)
    ext_e = []
    for s, size, lastb in ext:
        p = cg.producer[s]
        if pos[p] < 0:
            continue  # made by a group not inserted yet: counted when that one goes in
        if cg.is_output[s]:
            e = m
        else:
            e = max([int(pos[p]), *(int(pos[u]) for u in cg.users[s] if pos[u] >= 0)])
        ext_e.append((e, size, lastb, s))
    ext_e.sort()
    long_last = []
    for s, size in long:
        last = m - 1 if cg.is_output[s] else max(int(pos[u]) for u in cg.users[s] if pos[u] >= 0)
        long_last.append((last, size))
    # c. for slot k: max of A over steps before k, A = prof + externals extended past their
    #    last use e (steps > e); max of C from k on, C = prof + long outputs (steps <= last);
    #    both >= 0, so an empty range counts 0 as the full-length prefix/suffix maxima did
    a_cuts = [(e + 1, size) for e, size, _, _ in ext_e if e + 1 < m]
    win = np.arange(lo, hi + 1)
    a_w = prof[lo:hi].copy()  # A at steps lo .. hi-1
    for p, size in a_cuts:
        if p < hi:
            a_w[max(p, lo) - lo:] += size
    pref_a = np.empty(len(win), dtype=np.int64)
    pref_a[0] = _seg_max(prof, 0, lo, a_cuts, inc=True)
    if len(a_w):
        pref_a[1:] = np.maximum(np.maximum.accumulate(a_w), pref_a[0])
    c_hi = min(hi, m)  # C at steps lo .. c_hi-1 (slot m has an empty suffix)
    c_w = prof[lo:c_hi].copy()
    for last, size in long_last:
        if last >= lo:
            c_w[: min(last, c_hi - 1) - lo + 1] += size
    tail = _seg_max(prof, c_hi, m, long_last, inc=False)  # C from step hi on (slot hi)
    suf_c = np.full(len(win), tail, dtype=np.int64)
    if len(c_w):
        suf_c[:len(c_w)] = np.maximum(np.maximum.accumulate(c_w[::-1])[::-1], tail)
    cross_w = np.zeros(len(win), dtype=np.int64)
    k0 = max(lo, 1)
    cross_w[k0 - lo:] = prof[k0 - 1:hi] - freed[k0 - 1:hi]
    # d. the block's own peak for each prefix of extended externals
    es = np.array([e for e, *_ in ext_e], dtype=np.int64)
    bpeaks = []
    curve = internal.copy()
    bpeaks.append(int(curve.max()) if L else 0)
    for _, size, lastb, _ in ext_e:
        curve[: lastb + 1] += size
        bpeaks.append(int(curve.max()))
    r = np.searchsorted(es, win, side="left")
    block_peak = cross_w + np.asarray(bpeaks, dtype=np.int64)[r]
    total = np.maximum(np.maximum(pref_a, suf_c), block_peak)
    if tie == "light":
        best = np.lexsort((win, block_peak, total))[0]
    else:
        best = int(np.argmin(total))
    k = int(win[best])
    n_ext = int(r[best])
    # e. apply: extend externals, add long storages, splice the block's curve in
    bprof = internal + (int(prof[k - 1] - freed[k - 1]) if k else 0)
    for e, size, lastb, _ in ext_e[:n_ext]:
        prof[e + 1: k] += size
        freed[e] -= size
        bprof[: lastb + 1] += size
        bfreed[lastb] += size
    for last, size in long_last:
        prof[k: last + 1] += size
    for s, size in long:
        if not cg.is_output[s]:
            last = max(int(pos[u]) for u in cg.users[s] if pos[u] >= 0)
            freed[last] += size
    prof = np.concatenate((prof[:k], bprof, prof[k:]))
    freed = np.concatenate((freed[:k], bfreed, freed[k:]))
    pos[pos >= k] += L
    pos[block] = np.arange(k, k + L)
    seq[k:k] = block
    return seq, prof, freed


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
    best: tuple[int, Order] = (simulate(graph, plain, alignment_bytes=a).peak_bytes, plain)
    prep = _prepare(graph, groups, "lpmf", a)
    for group_order in ("largest", "program"):
        for tie in ("early", "light"):
            try:
                seq, _ = _insert_all(prep, tie, group_order)
            except GraphError as e:
                _logger.warning("update insertion failed on %s (%s); using LPMF", graph.name, e)
                return best[1]
            order = prep.cg.order_ids(seq)
            peak = simulate(graph, order, alignment_bytes=a).peak_bytes
            if peak < best[0]:
                best = (peak, order)
    return best[1]
