"""The chain-group bound: a chain of comparable ops plus one small group, solved exactly.

A *chain* (ops pairwise comparable) runs in the same relative order in every valid order, so
the linear extensions of ``chain + U`` for a small group ``U`` are interleavings, and the
restricted minimum of the restriction argument (:mod:`roam_core.oracle.bounds.masks`) over
them is a dynamic programme over ``(chain ops done, down-set of U done)``.
:func:`chain_group_lower_bound` maximises it over groups; :func:`peak_window_chain_bound`
takes the chain and the groups from an order's peak.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np

from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId
from roam_core.model.reach import Reachability, iter_bits, reachability, topological_indices
from roam_core.oracle.bounds.live_set import live_set_lower_bound
from roam_core.oracle.bounds.masks import StorageMasks, iter_storage_masks
from roam_core.oracle.bounds.op_groups import down_sets, free_branch_groups, group_precedences
from roam_core.oracle.simulate import simulate

__all__ = [
    "ChainGroupBound",
    "chain_group_lower_bound",
    "greedy_chain",
    "heavy_path",
    "peak_window_chain_bound",
]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChainGroupBound:
    """The chain-group bound (see :func:`chain_group_lower_bound`).

    Parameters
    ----------
    bound_bytes : int
        The bound, resident bytes included.
    group : tuple of OpId
        The group that gives it (empty when no group beats the chain alone).
    chain_ops : int
        Ops in the chain.
    groups_used : int
        Groups solved.
    """

    bound_bytes: int
    group: tuple[OpId, ...]
    chain_ops: int
    groups_used: int


def greedy_chain(order: Sequence[OpId], reach: Reachability,
                 skip: Iterable[OpId] = ()) -> list[OpId]:
    """A chain (every two ops comparable) picked greedily along ``order``: an op joins when
    the last chain op is its ancestor; ops in ``skip`` never join."""
    sk = set(skip)
    out: list[OpId] = []
    last = -1
    for op in order:
        if op in sk:
            continue
        i = reach.index[op]
        if last < 0 or reach.ancestors.has(i, last):
            out.append(op)
            last = i
    return out


def heavy_path(graph: Graph, reach: Reachability, weights: Sequence[int],
               skip: Iterable[OpId] = ()) -> list[OpId]:
    """A chain: the path (along data and control edges, avoiding ``skip``) of largest total
    ``weights`` (per op, program order; e.g. the bytes the live-set argument forces there)."""
    sk = {reach.index[o] for o in skip}
    ids = graph.op_ids
    index = {op: i for i, op in enumerate(ids)}
    best = [0] * len(ids)
    back = [-1] * len(ids)
    for i in topological_indices(graph):
        if i in sk:
            continue
        top, arg = 0, -1
        for p in graph.predecessors(ids[i]):
            j = index[p]
            if j not in sk and best[j] > top:
                top, arg = best[j], j
        best[i] = top + int(weights[i]) + 1
        back[i] = arg
    if not ids:
        return []
    i = max(range(len(ids)), key=best.__getitem__)
    path = []
    while i >= 0:
        path.append(ids[i])
        i = back[i]
    return path[::-1]


def chain_group_lower_bound(
    graph: Graph,
    order: Sequence[OpId] | None = None,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    chain: Sequence[OpId] | Literal["greedy"] | None = None,
    groups: Sequence[Sequence[OpId]] | None = None,
    reach: Reachability | None = None,
    masks: StorageMasks | None = None,
    max_group_ops: int = 24,
    max_down_sets: int = 256,
    max_groups: int = 64,
) -> ChainGroupBound:
    """Exact restriction bound of ``G = chain + one group``, maximised over groups.

    A *chain* (ops pairwise comparable: by default the path outside every group through
    the most bytes the live-set argument forces, :func:`heavy_path`) runs in the same
    relative order in every valid order, so the linear extensions of ``chain + U`` for a
    small group ``U`` (a parameter's update, a weight-gradient branch) are interleavings:
    states ``(i, D)`` = ``i`` chain ops and a down-set ``D`` of ``U`` done.  A dynamic
    programme over those states (vectorised over ``i``) gives the exact minimum over
    interleavings of the maximum step memory of the restriction argument
    (:mod:`roam_core.oracle.bounds.masks`), which bounds every order's peak: it sees that an
    update run early costs its transient on top of the memory the chain forces there, and
    one run late holds its gradient across the chain's high steps.

    Parameters
    ----------
    graph : Graph
        The graph.
    order : sequence of OpId, optional
        Unused unless ``chain == "greedy"`` (then the chain is :func:`greedy_chain` of it).
    alignment_bytes : int
        Storage rounding.
    chain : sequence of OpId or "greedy", optional
        A chain to use instead of the heavy path (must be pairwise comparable).
    groups : sequence of sequence of OpId, optional
        Disjoint from the chain, not necessarily from each other (default
        :func:`~roam_core.oracle.bounds.op_groups.free_branch_groups`, a component too
        large split into one-op groups).
    reach, masks : optional
        Precomputed reachability / :func:`~roam_core.oracle.bounds.masks.storage_masks`.
    max_group_ops, max_down_sets, max_groups : int
        Size limits: larger groups are skipped; at most ``max_groups`` groups (largest
        storage touched first) are solved.

    Returns
    -------
    ChainGroupBound
    """
    r = reach if reach is not None else reachability(graph)
    # the storages' masks are streamed (one pass below) unless given: at 100k ops all of
    # them together take about 1 GB
    resident = (masks.resident_bytes if masks is not None
                else graph.resident_bytes(alignment_bytes))
    grps = ([tuple(gr) for gr in groups] if groups is not None
            else _default_groups(graph, r, max_group_ops))
    in_group = {op for gr in grps for op in gr}
    ops = _pick_chain(graph, r, alignment_bytes, order, chain, in_group)
    if not ops:
        return ChainGroupBound(resident, (), 0, 0)
    ch = _make_chain(r, ops)
    m = len(ops)
    ranked = _rank_groups(graph, grps, max_group_ops)[:max_groups]
    sc = _storage_columns(graph, alignment_bytes, r, masks, ch, ranked)
    # the chain alone (U empty): every storage in its (a, b) case
    base_all = _cost_vectors(sc, m, np.ones(len(sc.sizes), dtype=bool))
    best = int(base_all[0][:m].max())
    best_group: tuple[OpId, ...] = ()
    used = 0
    for gr in ranked:
        gidx = [r.index[o] for o in gr]
        _, pred_local = group_precedences(r, gidx)
        windows = [_chain_window(r.ancestors[g], r.descendants[g], ch.mask, ch.pos,
                                 ch.monotone, m) for g in gidx]
        if any(lo > hi for lo, hi in windows):
            continue  # inconsistent (cannot happen for a true chain); skip
        ds = down_sets(pred_local, max_down_sets)
        if ds is None:
            continue
        used += 1
        gb = _interleaving_minimum(sc, m, gidx, pred_local, windows, ds, best)
        if gb is not None and np.isfinite(gb) and int(gb) > best:
            best, best_group = int(gb), tuple(gr)
    _logger.debug("chain-group bound: %d ops in chain, %d groups", m, used)
    return ChainGroupBound(best + resident, best_group, m, used)


def _default_groups(graph: Graph, r: Reachability, max_group_ops: int,
                    ) -> list[tuple[OpId, ...]]:
    """The free-branch groups; a component too large to solve contributes each of its ops
    as a one-op group (groups need not be disjoint here: each is solved on its own)."""
    grps: list[tuple[OpId, ...]] = []
    for gr in free_branch_groups(graph, max_group_ops, reach=r):
        if len(gr) <= max_group_ops:
            grps.append(tuple(gr))
        else:
            grps.extend((op,) for op in gr)
    return grps


def _pick_chain(graph: Graph, r: Reachability, alignment_bytes: int,
                order: Sequence[OpId] | None, chain: Sequence[OpId] | Literal["greedy"] | None,
                in_group: set[OpId]) -> list[OpId]:
    """The chain asked for: the heavy path by default, ``"greedy"`` along ``order``, or the
    one given (all avoiding the groups' ops, except a given one)."""
    if chain is None:
        lb = live_set_lower_bound(graph, alignment_bytes, reach=r)
        return heavy_path(graph, r, lb.forced_bytes, in_group)
    if chain == "greedy":
        assert order is not None
        return greedy_chain(order, r, in_group)
    return list(chain)


@dataclass(frozen=True, slots=True)
class _Chain:
    """A chain by program indices: ``idx[j]`` is its ``j``-th op, ``pos`` the inverse."""

    idx: tuple[int, ...]
    pos: dict[int, int]
    mask: int
    #: program indices increase along the chain (program order is topological): then the
    #: first / last chain op of a mask is its lowest / highest set bit
    monotone: bool


def _make_chain(r: Reachability, ops: Sequence[OpId]) -> _Chain:
    cidx = [r.index[o] for o in ops]
    cmask = 0
    for g in cidx:
        cmask |= 1 << g
    for j in range(1, len(cidx)):
        assert r.ancestors.has(cidx[j], cidx[j - 1]), "chain ops must be comparable"
    return _Chain(tuple(cidx), {g: j for j, g in enumerate(cidx)}, cmask,
                  all(x < y for x, y in itertools.pairwise(cidx)))


def _rank_groups(graph: Graph, grps: Sequence[tuple[OpId, ...]], max_group_ops: int,
                 ) -> list[tuple[OpId, ...]]:
    """The groups of at most ``max_group_ops`` ops, largest storage touched first."""
    ranked = []
    for gr in grps:
        if not gr or len(gr) > max_group_ops:
            continue
        top = 0
        for op in gr:
            for s in (*graph.storages_read(op), *graph.storages_created(op)):
                top = max(top, graph.tensors[s].size_bytes)
        ranked.append((top, gr))
    ranked.sort(key=lambda x: -x[0])
    return [gr for _, gr in ranked]


@dataclass(frozen=True, slots=True)
class _StorageColumns:
    """Every planned storage as the chain and the groups see it (one pass over the masks).

    ``first`` / ``last``: the first chain index in its started mask (``m + 5`` if none) and
    the last in its pending mask (``-1`` if none, ``m + 5`` for a graph output);
    ``started`` / ``pending``: the masks' bits at the groups' ops (columns ``col_of``),
    packed, one row per storage.  A per-group ``mask & umask`` over every storage would cost
    ``O(storages x N / 64)`` per group.
    """

    sizes: np.ndarray
    first: np.ndarray
    last: np.ndarray
    started: np.ndarray
    pending: np.ndarray
    col_of: dict[int, int]


#: :func:`_storage_columns` gathers the groups' bits of this many storages at once (one
#: numpy pass over a ``rows x N / 8`` byte block, kept small at 100k ops).
_COLUMN_BATCH = 256


def _storage_columns(graph: Graph, alignment_bytes: int, r: Reachability,
                     masks: StorageMasks | None, ch: _Chain,
                     groups: Sequence[tuple[OpId, ...]]) -> _StorageColumns:
    cols = np.asarray(sorted({r.index[o] for gr in groups for o in gr}), dtype=np.int64)
    byte, bit = cols >> 3, (cols & 7).astype(np.uint8)
    nb = (len(r) + 7) // 8 or 1
    big = len(ch.idx) + 5
    rows: Iterator[tuple[int, int, int]] = (
        zip(masks.sizes, masks.started, masks.pending, strict=True) if masks is not None
        else iter_storage_masks(graph, alignment_bytes, r))
    size_l, a_l, b_l = [], [], []
    st_parts: list[np.ndarray] = []
    pd_parts: list[np.ndarray] = []
    st_buf: list[bytes] = []
    pd_buf: list[bytes] = []
    zero = bytes(nb)

    def flush() -> None:
        # the groups' bits of the buffered rows: one gather and one packbits per batch
        for buf, parts in ((st_buf, st_parts), (pd_buf, pd_parts)):
            block = np.frombuffer(b"".join(buf), np.uint8).reshape(len(buf), nb)
            parts.append(np.packbits(block[:, byte] >> bit & 1, axis=1))
            buf.clear()

    for size, st, pd in rows:
        size_l.append(size)
        a_k, b_k = _chain_span(st, pd, ch, big)
        a_l.append(a_k)
        b_l.append(b_k)
        if len(cols):
            st_buf.append(st.to_bytes(nb, "little"))
            pd_buf.append(zero if pd == -1 else pd.to_bytes(nb, "little"))
            if len(st_buf) == _COLUMN_BATCH:
                flush()
    n_st = len(size_l)
    width = (len(cols) + 7) // 8
    if st_buf:
        flush()
    if not len(cols) or not n_st:
        st_parts = pd_parts = [np.zeros((n_st, width), np.uint8)]
    return _StorageColumns(
        sizes=np.asarray(size_l, dtype=np.float64).reshape(n_st),
        first=np.asarray(a_l, dtype=np.int64).reshape(n_st),
        last=np.asarray(b_l, dtype=np.int64).reshape(n_st),
        started=np.concatenate(st_parts), pending=np.concatenate(pd_parts),
        col_of={int(g): j for j, g in enumerate(cols)})


def _chain_span(st: int, pd: int, ch: _Chain, big: int) -> tuple[int, int]:
    """``(first chain index in started, last chain index in pending)`` of one storage."""
    a_k, b_k = big, -1
    sc = st & ch.mask
    if sc:
        a_k = (ch.pos[(sc & -sc).bit_length() - 1] if ch.monotone
               else min(ch.pos[i] for i in iter_bits(sc)))
    if pd == -1:
        b_k = big
    else:
        pc = pd & ch.mask
        if pc:
            b_k = (ch.pos[pc.bit_length() - 1] if ch.monotone
                   else max(ch.pos[i] for i in iter_bits(pc)))
    return a_k, b_k


#: The 8 cost vectors of a storage subset (:func:`_cost_vectors`): at chain steps, then in
#: the gaps between them, each for (started already true?, pending already true?) =
#: (no, no), (yes, no), (no, yes), (yes, yes).
_CASES = tuple((shift, s, p) for shift in (0, 1)
               for s, p in ((False, False), (True, False), (False, True), (True, True)))


def _cost_vectors(sc: _StorageColumns, m: int, sel: np.ndarray) -> np.ndarray:
    """Chain/gap cost vectors of a storage subset for the 4 (alpha, beta) cases, shape
    ``(8, m + 1)``."""
    idx = np.nonzero(sel)[0]
    out: np.ndarray = _class_cost_vectors(sc, m, idx, np.zeros(len(idx), dtype=np.int64), 1)[0]
    return out


def _class_cost_vectors(sc: _StorageColumns, m: int, idx: np.ndarray, label: np.ndarray,
                        n_cls: int) -> np.ndarray:
    """The cost vectors of each class of storages ``idx`` (class ``label``), shape
    ``(n_cls, 8, m + 1)``.

    Entry ``i`` sums the sizes of the storages with ``a <= i - shift`` and ``b >= i``: a
    difference array per class (one ``bincount`` over all classes), then a running sum.  The
    sizes are whole bytes in float64, so every sum is exact in any order.
    """
    a, b, w = sc.first[idx], sc.last[idx], sc.sizes[idx]
    width = m + 3
    base = label * width
    out = np.empty((n_cls, len(_CASES), m + 1))
    zeros, ends = np.zeros_like(a), np.full_like(b, m + 1)
    for c, (shift, s_true, p_true) in enumerate(_CASES):
        start = np.clip(zeros if s_true else a + shift, 0, m + 2)
        end = np.clip(ends if p_true else b + 1, 0, m + 2)
        ok = start < end
        d = (np.bincount(base[ok] + start[ok], w[ok], minlength=n_cls * width)
             - np.bincount(base[ok] + end[ok], w[ok], minlength=n_cls * width))
        out[:, c] = np.cumsum(d.reshape(n_cls, width), axis=1)[:, :m + 1]
    return out


@dataclass(frozen=True, slots=True)
class _Classes:
    """The storages a group touches, in classes of equal ``(started & U, pending & U)``.

    ``fixed``: the cost vectors of the storages the group does not touch (``(8, m + 1)``);
    ``vecs``: each class's (``(classes, 8, m + 1)``); ``loc_st`` / ``loc_pd``: each class's
    masks as local bit masks of the group's ops; ``rows``: ``arange(classes)``.
    """

    fixed: np.ndarray
    vecs: np.ndarray
    loc_st: np.ndarray
    loc_pd: np.ndarray
    rows: np.ndarray

    def chain_cost(self, d: int) -> np.ndarray:
        """Bytes live at each chain step with down-set ``d`` of the group done."""
        case = (self.loc_st & d != 0) + 2 * (self.loc_pd & ~d != 0)
        out: np.ndarray = self.fixed[0] + self.vecs[self.rows, case].sum(axis=0)
        return out

    def gap_cost(self, d: int, u: int) -> np.ndarray:
        """Bytes live when group op ``u`` runs in each gap, after down-set ``d``."""
        case = 4 + (self.loc_st & (d | 1 << u) != 0) + 2 * (self.loc_pd & ~d != 0)
        out: np.ndarray = self.fixed[4] + self.vecs[self.rows, case].sum(axis=0)
        return out


def _group_classes(sc: _StorageColumns, m: int, gidx: Sequence[int]) -> _Classes:
    """The cost vectors of the storages the group does not touch, and of each class of
    touched storages with equal ``(started & U, pending & U)`` (as local masks)."""
    k = len(gidx)
    ucols = [sc.col_of[g] for g in gidx]
    bits = np.concatenate((_gather_bits(sc.started, ucols), _gather_bits(sc.pending, ucols)),
                          axis=1)
    touched = cast("np.ndarray", bits.any(axis=1))  # stubs: any() of a 0-d array is a scalar
    t_idx = np.nonzero(touched)[0]
    if 2 * k <= 62:  # a row as one int64 key: bit j started at op j, bit k + j pending
        keys = bits[t_idx].astype(np.int64) @ (np.int64(1) << np.arange(2 * k, dtype=np.int64))
        uniq, inv = np.unique(keys, return_inverse=True)
        loc_st, loc_pd = uniq & ((1 << k) - 1), uniq >> k
    else:
        rows_u, inv = np.unique(bits[t_idx], axis=0, return_inverse=True)
        weights = [1 << j for j in range(k)]
        loc_st = np.array([sum(wt for wt, x in zip(weights, r[:k], strict=True) if x)
                           for r in rows_u.tolist()], dtype=object)
        loc_pd = np.array([sum(wt for wt, x in zip(weights, r[k:], strict=True) if x)
                           for r in rows_u.tolist()], dtype=object)
    n_cls = len(loc_st)
    idx = np.concatenate((np.nonzero(~touched)[0], t_idx))
    label = np.concatenate((np.zeros(len(idx) - len(t_idx), dtype=np.int64),
                            np.asarray(inv, dtype=np.int64).reshape(-1) + 1))
    vecs = _class_cost_vectors(sc, m, idx, label, n_cls + 1)
    return _Classes(vecs[0], vecs[1:], loc_st, loc_pd, np.arange(n_cls))


def _interleaving_minimum(sc: _StorageColumns, m: int, gidx: Sequence[int],
                          pred_local: Sequence[int], windows: Sequence[tuple[int, int]],
                          ds: Sequence[int], beat: float = -np.inf) -> float | None:
    """The minimum over interleavings of the chain and the group of the maximum step
    memory (in bytes, resident excluded; ``inf`` or ``None`` when no interleaving ends), or
    ``None`` when it cannot be above ``beat`` (:func:`_one_gap_cost` is at most ``beat``).

    ``val[d][i]``: the best maximum so far with ``i`` chain ops and down-set ``d`` done.
    A group op ``u`` joins ``d`` in the gap before chain op ``i`` inside its window; the
    chain then steps as far as no op outside ``d`` is needed (:func:`_chain_scan`)."""
    cls = _group_classes(sc, m, gidx)
    k = len(gidx)
    if _one_gap_cost(cls, m, pred_local, windows) <= beat:
        return None
    idx = np.arange(m + 1)
    val: dict[int, np.ndarray] = {}
    # U op j must be done before chain op i >= hi_u[j]: with down-set d the chain can
    # step while no op outside d is needed, i.e. up to the lowest hi_u of those
    needed_at = [(windows[j][1], j) for j in range(k) if windows[j][1] < m]
    for d in ds:  # ascending ints: every subset comes before its supersets
        v = np.full(m + 1, np.inf)
        if d == 0:
            v[0] = 0.0
        for u in iter_bits(d):
            prev = d & ~(1 << u)
            if prev not in val or pred_local[u] & ~prev:
                continue
            cand = np.maximum(val[prev], cls.gap_cost(prev, u))
            ok = (idx >= windows[u][0]) & (idx <= windows[u][1])
            v = np.where(ok, np.minimum(v, cand), v)
        cc = cls.chain_cost(d)
        # chain steps: v[i+1] = min(v[i+1], max(v[i], cc[i])) where allowed; the needed set
        # only grows with i, so the allowed steps are a prefix
        stop = min((h for h, j in needed_at if not d >> j & 1), default=m)
        val[d] = _chain_scan(v, cc, stop)
    res = val.get((1 << k) - 1)
    return None if res is None else float(res[m])


def _one_gap_cost(cls: _Classes, m: int, pred_local: Sequence[int],
                  windows: Sequence[tuple[int, int]]) -> float:
    """The cost of the best interleaving that runs the whole group in one gap (in a
    topological order; ``inf`` when no gap is in every window): an upper bound of
    :func:`_interleaving_minimum`'s, which runs the same steps among others.  Where it is
    no higher than the best group so far, the group's DP cannot raise the bound."""
    k = len(pred_local)
    lo, hi = max(w[0] for w in windows), min(w[1] for w in windows)
    if lo > hi:
        return np.inf
    c0, cf = cls.chain_cost(0), cls.chain_cost((1 << k) - 1)
    # chain ops 0..p-1 with nothing of the group done, then ops p..m-1 with all of it
    pre = np.zeros(m + 1)
    pre[1:] = np.maximum.accumulate(c0[:m])
    suf = np.zeros(m + 1)
    suf[:m] = np.maximum.accumulate(cf[:m][::-1])[::-1]
    tot = np.maximum(pre, suf)
    done = 0
    for _ in range(k):
        u = next((j for j in range(k) if not done >> j & 1 and not pred_local[j] & ~done), -1)
        if u < 0:
            return np.inf  # a cycle (cannot happen in a DAG): no such interleaving
        tot = np.maximum(tot, cls.gap_cost(done, u))
        done |= 1 << u
    return float(tot[lo:hi + 1].min())


def _chain_scan(entry: np.ndarray, cost: np.ndarray, stop: int) -> np.ndarray:
    """``w[0] = entry[0]``, ``w[i+1] = min(entry[i+1], max(w[i], cost[i]))`` for ``i < stop``
    and ``w[i+1] = entry[i+1]`` after.

    Before the first finite entry ``f`` the scan stays ``inf``, and after the last finite
    entry ``l`` (up to ``stop``) it is a running maximum, so only ``[f, l]`` needs the
    general scan (:func:`_clamp_scan`); in the DP most entries are ``inf``.  Only ``min`` and
    ``max`` are taken: the values are those of the one-step recurrence exactly.
    """
    out = np.array(entry, dtype=np.float64)
    fin = np.flatnonzero(np.isfinite(out[:stop + 1]))
    if not len(fin):
        return out  # all inf up to stop: so is the scan
    f, last = int(fin[0]), int(fin[-1])
    out[f:last + 1] = _clamp_scan(out[f:last + 1], cost[f:last])
    if last < stop:
        run = np.maximum.accumulate(cost[last:stop])
        out[last + 1:stop + 1] = np.maximum(run, out[last])
    return out


def _clamp_scan(entry: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """``w[0] = entry[0]``, ``w[i+1] = min(entry[i+1], max(w[i], cost[i]))`` for every ``i``:
    a prefix scan of clamp maps ``x -> min(h, max(l, x))`` (closed under composition), in
    ``log2(len)`` numpy steps."""
    m = len(entry) - 1
    lo = np.asarray(cost, dtype=np.float64).copy()
    hi = np.asarray(entry[1:], dtype=np.float64).copy()
    s = 1
    while s < m:  # Hillis-Steele: P_j = f_j o ... o f_0
        lo_prev, hi_prev = lo[:-s].copy(), hi[:-s].copy()
        new_hi = np.minimum(hi[s:], np.maximum(lo[s:], hi_prev))
        lo[s:] = np.maximum(lo_prev, lo[s:])
        hi[s:] = new_hi
        s *= 2
    out = np.empty(m + 1)
    out[0] = entry[0]
    out[1:] = np.minimum(hi, np.maximum(lo, entry[0]))
    return out


def _chain_window(anc: int, desc: int, cmask: int, cpos: Mapping[int, int], monotone: bool,
                  m: int) -> tuple[int, int]:
    """``(lo, hi)``: an op with ancestor / descendant masks ``anc`` / ``desc`` runs between
    chain positions ``lo`` (one after its last chain ancestor) and ``hi`` (its first chain
    descendant).  With a monotone chain (program indices increasing along it) those are the
    highest / lowest set bits: ``O(N / 64)`` instead of iterating every bit (``O(m N / 64)``).
    """
    ca, cd = anc & cmask, desc & cmask
    lo, hi = 0, m
    if ca:
        lo = (cpos[ca.bit_length() - 1] if monotone else max(cpos[i] for i in iter_bits(ca))) + 1
    if cd:
        hi = cpos[(cd & -cd).bit_length() - 1] if monotone else min(cpos[i] for i in iter_bits(cd))
    return lo, hi


def _gather_bits(packed: np.ndarray, cols: Sequence[int]) -> np.ndarray:
    """Columns ``cols`` of ``packed`` (rows of ``numpy.packbits``) as a 0/1 uint8 matrix."""
    c = np.asarray(cols, dtype=np.int64)
    return (packed[:, c >> 3] >> (7 - (c & 7)).astype(np.uint8)) & 1


def peak_window_chain_bound(
    graph: Graph,
    order: Sequence[OpId],
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    half_widths: Sequence[int] = (1, 2, 4),
    max_peaks: int = 2,
    reach: Reachability | None = None,
    masks: StorageMasks | None = None,
    max_down_sets: int = 4096,
) -> ChainGroupBound:
    """:func:`chain_group_lower_bound` with the chain and the groups taken from an order's peak.

    The chain is :func:`greedy_chain` of ``order`` without the ops within ``min(half_widths)``
    steps of a peak step (each of the first ``max_peaks`` steps at the peak); the groups are
    the ops off the chain within ``w`` steps of a peak step, for each ``w`` of
    ``half_widths``.  The chain then runs through what
    the order holds around its peak, and the dynamic programme over a group's interleavings
    decides whether another placement of the ops at the peak could lower it: on GPT-2 small
    b1 t1024 with ``torch.utils.checkpoint`` (dropout on) the group of the three ops at the
    peak (an MLP weight-gradient matmul, its input-gradient matmul and a transpose) proves
    the planned peak optimal, where the heavy-path chain with one free-branch group fell
    9 MiB short.  Valid for every order whatever ``order`` is (any chain of comparable ops
    with any groups disjoint from it gives a bound).  One pass over the storages' masks.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> from roam_core.oracle.simulate import simulate
    >>> g = diamond()
    >>> b = peak_window_chain_bound(g, g.op_ids, 512)
    >>> b.bound_bytes <= simulate(g, g.op_ids, alignment_bytes=512).peak_bytes
    True
    """
    r = reach if reach is not None else reachability(graph)
    prof = simulate(graph, order, alignment_bytes=alignment_bytes)
    if not order:
        return ChainGroupBound(prof.resident_bytes, (), 0, 0)
    live = prof.live_bytes
    top = max(live)
    peaks = [s for s, b in enumerate(live) if b == top][:max_peaks]
    widths = sorted(set(half_widths))

    def window(ps: int, w: int) -> Sequence[OpId]:
        return order[max(0, ps - w): ps + w + 1]

    # the chain skips the narrowest windows; the wider ones add the ops off the chain
    chain = greedy_chain(order, r, {op for ps in peaks for op in window(ps, widths[0])})
    on_chain = set(chain)
    groups = [gr for gr in dict.fromkeys(tuple(op for op in window(ps, w) if op not in on_chain)
                                         for w in widths for ps in peaks) if gr]
    return chain_group_lower_bound(graph, order, alignment_bytes, chain=chain, groups=groups,
                                   reach=r, masks=masks,
                                   max_group_ops=max((len(gr) for gr in groups), default=1),
                                   max_down_sets=max_down_sets)
