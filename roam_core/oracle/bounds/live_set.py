"""The live-set and update-group bounds: what one op, or one small group, forces in every order.

Live-set bound
--------------
A planned storage ``s`` produced by op ``p`` is live while op ``v`` runs in *every* valid
order when ``p`` is ``v`` or an ancestor of ``v`` (so ``s`` exists by then) and some *user*
of ``s`` is ``v`` or a descendant of ``v`` (so ``s`` cannot be freed yet).  The users are the
ops that read or write ``s`` (directly or through an alias), ``p`` itself (a storage nobody
reads is live at its producer step), and, for a graph output, the end of the step.  The sum of
those storages at ``v`` plus the resident bytes is therefore a lower bound on the peak of
every order; :func:`live_set_lower_bound` returns its maximum over ``v``.  With the
bitsets of :mod:`roam_core.model.reach` it costs ``O(S * N / 64)`` for ``S`` storages.

Update-group bound
------------------
The live-set bound only counts what one op forces; it misses memory that every order needs
*somewhere*, just not at a fixed op.  The parameter update of a big embedding under Adam is
the standard case (see ``docs/design/calibration.md``): the gradient, ``exp_avg``,
``exp_avg_sq`` and the
``sqrt`` denominator form a small sub-DAG whose every order has three embedding-sized storages
live at once, but the ops where that happens differ between orders.
:func:`group_lower_bound` solves such a small group ``G`` of ops exactly: it restricts any
full order to ``G`` (which is a linear extension of ``G`` under the transitive precedences),
and for each op ``x`` of ``G`` counts

* the storages touched by ``G`` that are live at ``x`` judging from ``G``'s ops alone: the
  producer has provably run (it is ``x``, an ancestor of ``x``, or an ancestor of a group op
  already run) and a group op that uses the storage has not run yet (or it is ``x``, or the
  storage is a graph output), and
* every other storage that the live-set argument forces at ``x``.

Both are live at ``x`` in the full order, so the minimum over linear extensions of ``G`` of
the maximum over ``x`` (dynamic programming over the down-sets of ``G``) plus the resident
bytes bounds every order's peak.  :func:`update_group_lower_bound` applies it to each weakly
connected group of optimizer-phase ops (one group per parameter for a single-tensor
optimizer), skipping groups whose down-set lattice is too large.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.base.graph_cache import PerGraphCache
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, Phase, TensorId, round_size
from roam_core.model.reach import (
    Adjacency,
    Reachability,
    adjacency,
    iter_bits,
    mask_to_bool,
    reachability,
)
from roam_core.model.union_find import UnionFind

__all__ = [
    "MAX_GROUP_STATES",
    "GroupBound",
    "LowerBound",
    "best_lower_bound",
    "forced_live_masks",
    "group_lower_bound",
    "live_set_lower_bound",
    "optimizer_groups",
    "update_group_lower_bound",
    "weighted_mask_sum",
]

_logger = logging.getLogger(__name__)

#: Down-set states explored per group before :func:`group_lower_bound` gives up.
MAX_GROUP_STATES = 50_000


@dataclass(frozen=True, slots=True)
class LowerBound:
    """A lower bound on the peak bytes of every valid order.

    Parameters
    ----------
    bound_bytes : int
        The bound, resident bytes included.
    op_id : OpId or None
        The op where it is attained (``None`` for a graph without ops); for the
        update-group bound, the first op of the group that gives it.
    resident_bytes : int
        Rounded bytes of the resident storages (included in ``bound_bytes``).
    forced_bytes : tuple of int
        Per op in program order: planned bytes live at that op in every order.
    storages : tuple of TensorId
        The planned storages forced live at ``op_id`` (live-set bound only).
    method : str
        ``"live_set"`` or ``"update_group"``.
    """

    bound_bytes: int
    op_id: OpId | None
    resident_bytes: int
    forced_bytes: tuple[int, ...] = ()
    storages: tuple[TensorId, ...] = ()
    method: str = "live_set"

    @property
    def bytes(self) -> int:
        """Alias of ``bound_bytes``."""
        return self.bound_bytes


@dataclass(frozen=True, slots=True)
class GroupBound:
    """The exact bound of one op group (see :func:`group_lower_bound`)."""

    bound_bytes: int
    ops: tuple[OpId, ...]
    states: int


def _users(graph: Graph, tid: TensorId) -> list[OpId]:
    t = graph.tensors[tid]
    out = list(t.consumers)
    if t.producer is not None:
        out.append(t.producer)
    return out


def forced_live_masks(
    graph: Graph, reach: Reachability | None = None
) -> dict[TensorId, int]:
    """For every planned storage, the mask of ops at which it is live in every order.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> {k: bin(v) for k, v in forced_live_masks(diamond()).items()}
    {'a': '0b111', 'b': '0b1010', 'c': '0b1100', 'd': '0b1000'}
    """
    r = reach if reach is not None else reachability(graph)
    return dict(_iter_forced_live(graph, r))


def _iter_forced_live(graph: Graph, r: Reachability,
                      tids: Iterable[TensorId] | None = None) -> Iterator[tuple[TensorId, int]]:
    """``(storage, forced-live mask)`` of every planned storage (or of ``tids``), in tensor
    order, one at a time: a caller that only sums them keeps none (``O(N / 8)`` bytes each,
    ``O(storages x N / 8)`` for all)."""
    outputs = set(graph.outputs)
    tensors = graph.tensors.values() if tids is None else (graph.tensors[t] for t in tids)
    for t in tensors:
        if t.producer is not None:
            yield t.id, _forced_mask(graph, r, t.id, t.id in outputs)


def _forced_mask(graph: Graph, r: Reachability, tid: TensorId, is_output: bool) -> int:
    """The forced-live mask of planned storage ``tid``: its producer's descendants (and the
    producer) that are ancestors of a user (or one), every descendant for an output."""
    core, points = _forced_parts(graph, r, tid, is_output)
    for i in points:
        core |= 1 << i
    return core


def _forced_parts(graph: Graph, r: Reachability, tid: TensorId, is_output: bool,
                  ) -> tuple[int, tuple[int, ...]]:
    """The forced-live mask of ``tid`` (:func:`_forced_mask`) as ``(core, points)``: a mask
    and the few ops not in it (the producer and the users no other user needs), so that no
    N-bit int is built for a single bit (``1 << i`` of a late op is as wide as the graph).

    A user that is an ancestor of another user adds nothing to the union of the users'
    ancestor sets, so only the others' masks are read (a bit test tells which).  The
    producer is an ancestor of every other user, and every user a descendant of the
    producer, so the set is ``descendants(p) & union(ancestors(kept))`` plus the producer
    and the kept users that are no other kept user's ancestors."""
    index, anc = r.index, r.ancestors
    p = index[graph.tensors[tid].producer]  # type: ignore[index]  # a planned storage has a producer
    if is_output:
        return r.descendants[p], (p,)
    kept: list[int] = []
    for i in sorted({index[u] for u in _users(graph, tid)}, reverse=True):
        if not any(anc.has(k, i) for k in kept):
            kept.append(i)
    if not kept:
        return 0, ()
    before = 0
    for i in kept:
        before |= anc[i]
    points = [p]
    points.extend(i for i in kept if i != p and not any(
        k != i and anc.has(k, i) for k in kept))
    return r.descendants[p] & before, tuple(points)


#: A storage whose producer and users lie within this many steps of a topological order gets
#: its forced-live ops by a walk over those steps (:func:`_local_forced`) instead of from the
#: reachability masks (``O(N / 64)`` words each): most storages of a training step are used
#: within a few steps of where they are made (GPT-2: median 5), while the masks are as wide
#: as the graph.
_LOCAL_SPAN = 64


def _iter_forced_sets(graph: Graph, r: Reachability, tids: Iterable[TensorId] | None = None,
                      local_span: int = _LOCAL_SPAN,
                      ) -> Iterator[tuple[TensorId, int, Sequence[int]]]:
    """The forced-live ops of every planned storage (or of ``tids``), in tensor order, as
    ``(storage, mask, program indices)`` (disjoint; their union is the set):
    ``(storage, 0, ops)`` for a storage whose producer and users span at most
    ``local_span`` steps of the topological order, else the parts of the mask of
    :func:`_iter_forced_live` (:func:`_forced_parts`).  The same sets either way."""
    adj = adjacency(graph)
    pos = [0] * len(adj.topo)
    for k, i in enumerate(adj.topo):
        pos[i] = k
    outputs = set(graph.outputs)
    index = r.index
    tensors = graph.tensors.values() if tids is None else (graph.tensors[t] for t in tids)
    for t in tensors:
        if t.producer is None:
            continue
        is_output = t.id in outputs
        if not is_output:
            p = index[t.producer]
            users = {index[u] for u in _users(graph, t.id)}
            lo, hi = pos[p], max(pos[u] for u in users)
            if hi - lo < local_span:
                yield t.id, 0, _local_forced(adj, pos, users, lo, hi)
                continue
        yield t.id, *_forced_parts(graph, r, t.id, is_output)


def _local_forced(adj: Adjacency, pos: list[int], users: set[int], lo: int, hi: int,
                  ) -> list[int]:
    """The ops on a path from the op at topological position ``lo`` (the producer) to one of
    ``users`` (program indices; the last at position ``hi``), as program indices.  Every such
    path lies within positions ``lo .. hi``, so a forward and a backward sweep over them find
    the ops reached from the producer and those reaching a user (local bitsets)."""
    window = adj.topo[lo:hi + 1]
    w = len(window)
    preds, succs = adj.preds, adj.succs
    fwd = 1  # bit k: window[k] is reached from the producer (window[0])
    for k in range(1, w):
        for q in preds[window[k]]:
            d = pos[q] - lo
            if d >= 0 and fwd >> d & 1:
                fwd |= 1 << k
                break
    bwd = 0  # bit k: window[k] reaches a user (or is one)
    for u in users:
        bwd |= 1 << (pos[u] - lo)
    for k in range(w - 2, -1, -1):
        if bwd >> k & 1:
            continue
        for q in succs[window[k]]:
            d = pos[q] - lo
            if d < w and bwd >> d & 1:
                bwd |= 1 << k
                break
    return [window[k] for k in iter_bits(fwd & bwd)]


def _forced_at(graph: Graph, r: Reachability, tid: TensorId, i: int, is_output: bool) -> bool:
    """``forced-live mask of tid >> i & 1`` (see :func:`_iter_forced_live`) by bit tests,
    without building any mask."""
    t = graph.tensors[tid]
    p = r.index[t.producer]  # type: ignore[index]  # a planned storage has a producer
    if not (i == p or r.descendants.has(p, i)):
        return False
    if is_output:
        return True
    anc = r.ancestors
    return any(u == i or anc.has(u, i) for u in (r.index[o] for o in _users(graph, tid)))


def weighted_mask_sum(items: Iterable[tuple[int, int]], n: int) -> np.ndarray:
    """``sum(weight * mask_to_bool(mask, n))`` over ``(weight, mask)`` pairs, as int64.

    A forced-live mask is mostly a few runs of ops (producer .. last user): each run is added
    to a difference array (``O(runs x N / 64)`` word operations) instead of unpacking every
    mask to ``N`` booleans (``O(masks x N)``).  Masks of many runs are counted per weight
    in binary counters held as bit planes (plane ``j`` holds bit ``j`` of every op's count;
    adding a mask is a ripple carry through the planes, about two ANDs and XORs of N-bit
    ints on average), and each weight's planes are unpacked once at the end: a training
    step's many-run masks share a few sizes (GPT-2 with 360 layers: 7,519 masks of 12).

    Examples
    --------
    >>> weighted_mask_sum([(3, 0b0110), (5, 0b1001)], 4).tolist()
    [5, 3, 3, 5]
    """
    diff = np.zeros(n + 1, dtype=np.int64)
    planes: dict[int, list[int]] = {}  # weight -> bit planes of its per-op counts
    for size, m in items:
        if not (size and m):
            continue
        edges = m ^ (m << 1)  # bit i set: a run starts (or ends) at op i
        if edges.bit_count() <= _MAX_RUN_EDGES:
            sign = size
            while edges:
                low = edges & -edges
                diff[low.bit_length() - 1] += sign
                sign = -sign
                edges ^= low
            continue
        counter = planes.setdefault(size, [])
        carry = m
        for j, plane in enumerate(counter):
            counter[j] = plane ^ carry
            carry &= plane
            if not carry:
                break
        else:
            counter.append(carry)
    total = np.cumsum(diff[:n])
    for size, counter in planes.items():
        for j, plane in enumerate(counter):
            if plane:
                total += mask_to_bool(plane, n) * (size << j)
    return total


#: Masks with more run boundaries than this are unpacked instead of walked run by run.
_MAX_RUN_EDGES = 64


def live_set_lower_bound(
    graph: Graph,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    reach: Reachability | None = None,
) -> LowerBound:
    """The live-set lower bound on the peak of every valid order (resident bytes included).

    Parameters
    ----------
    graph : Graph
        The graph.
    alignment_bytes : int
        Rounding of each storage (512 like the CUDA caching allocator, 1 for exact bytes).
    reach : Reachability, optional
        Precomputed reachability of ``graph``.

    Returns
    -------
    LowerBound

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> lb = live_set_lower_bound(diamond(), alignment_bytes=1)
    >>> lb.bound_bytes, lb.op_id, lb.forced_bytes
    (300, 'b', (100, 300, 150, 260))
    """
    return _LIVE_SET_CACHE.get_or_build(
        graph, lambda: _live_set_lower_bound(
            graph, alignment_bytes, reach if reach is not None else reachability(graph)),
        alignment_bytes)


#: The live-set bounds of the last few ``(graph, alignment)`` (graphs are immutable): the
#: update-group bound, the choice bound and the chain-group bound of one plan share one.
_LIVE_SET_CACHE: PerGraphCache[LowerBound] = PerGraphCache(max_entries=2)


def _live_set_lower_bound(graph: Graph, alignment_bytes: int, r: Reachability) -> LowerBound:
    n = len(graph.ops)
    resident = graph.resident_bytes(alignment_bytes)
    if n == 0:
        return LowerBound(resident, None, resident)
    # the masks are summed as they come (not kept), the local sets added at the end; the
    # storages forced live at the best op are those whose set spans it and has it
    # (tested by bit tests, ``Masks.has``, for those only)
    spans: dict[TensorId, tuple[int, int]] = {}
    local_ops: list[int] = []
    local_bytes: list[int] = []

    def weighted() -> Iterator[tuple[int, int]]:
        for tid, m, ops in _iter_forced_sets(graph, r):
            if not ops:  # the producer is in every non-empty set
                continue
            size = round_size(graph.tensors[tid].size_bytes, alignment_bytes)
            lo, hi = min(ops), max(ops)
            local_ops.extend(ops)
            local_bytes.extend([size] * len(ops))
            if m:
                lo, hi = min(lo, (m & -m).bit_length() - 1), max(hi, m.bit_length() - 1)
                yield size, m
            spans[tid] = (lo, hi)

    total = weighted_mask_sum(weighted(), n)
    if local_ops:
        np.add.at(total, np.asarray(local_ops, np.int64), np.asarray(local_bytes, np.int64))
    best = int(np.argmax(total))
    outputs = set(graph.outputs)  # by bit tests: no set is built again
    at = tuple(t for t, (lo, hi) in spans.items()
               if lo <= best <= hi and _forced_at(graph, r, t, best, t in outputs))
    _logger.debug("live-set bound %d B at op %s", int(total[best]) + resident, r.op_ids[best])
    return LowerBound(
        bound_bytes=int(total[best]) + resident,
        op_id=r.op_ids[best],
        resident_bytes=resident,
        forced_bytes=tuple(int(x) for x in total),
        storages=at,
        method="live_set",
    )


def group_lower_bound(
    graph: Graph,
    group: Iterable[OpId],
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    reach: Reachability | None = None,
    forced: LowerBound | None = None,
    masks: dict[TensorId, int] | None = None,
    max_states: int = MAX_GROUP_STATES,
) -> GroupBound | None:
    """Exact min-over-orders bound for one small group of ops (resident bytes included).

    Parameters
    ----------
    graph : Graph
        The graph.
    group : iterable of OpId
        The ops of the group (any set; small, e.g. one parameter's update).
    alignment_bytes : int
        Storage rounding.
    reach : Reachability, optional
        Precomputed reachability.
    forced : LowerBound, optional
        Precomputed :func:`live_set_lower_bound` (its ``forced_bytes`` are reused).
    masks : dict, optional
        Precomputed :func:`forced_live_masks`.
    max_states : int
        Give up (return ``None``) when the group has more down-sets than this.

    Returns
    -------
    GroupBound or None
        ``None`` when the group is too large to solve exactly.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> group_lower_bound(diamond(), ["b", "c", "d"], alignment_bytes=1).bound_bytes
    350
    """
    r = reach if reach is not None else reachability(graph)
    lb = forced if forced is not None else live_set_lower_bound(graph, alignment_bytes, reach=r)
    ops = sorted(dict.fromkeys(group), key=r.index.__getitem__)
    if not ops:
        return GroupBound(lb.resident_bytes, (), 0)
    pred_local = _group_precedences(r, ops)
    items, other = _group_items(graph, r, ops, alignment_bytes, lb, masks)
    solved = _min_over_extensions(pred_local, items, other, max_states)
    if solved is None:
        _logger.debug("group of %d ops exceeds %d states", len(ops), max_states)
        return None
    best, states = solved
    return GroupBound(best + lb.resident_bytes, tuple(ops), states)


#: One storage touched by a group, for :func:`_min_over_extensions`: ``(size, started,
#: users, output, forced)``, all but size and output local op masks.  ``started`` = group
#: ops that are the producer or run after it in every order, so the storage exists while
#: ``x`` runs once any of them is done or is ``x``; ``users`` = group ops that read or write
#: it (it stays live until the last of them has run); ``forced`` = group ops at which the
#: live-set argument forces it anyway.
_GroupItem = tuple[int, int, int, bool, int]


def _group_precedences(r: Reachability, ops: Sequence[OpId]) -> list[int]:
    """Step 1: per group op, the local mask of the group ops it must follow (transitive:
    through outside ops too)."""
    k = len(ops)
    pred_local = [0] * k
    gidx = [r.index[op] for op in ops]
    for j, i in enumerate(gidx):
        for j2, i2 in enumerate(gidx):
            if j2 != j and r.ancestors.has(i, i2):
                pred_local[j] |= 1 << j2
    return pred_local


def _group_items(graph: Graph, r: Reachability, ops: Sequence[OpId], alignment_bytes: int,
                 lb: LowerBound, masks: dict[TensorId, int] | None,
                 ) -> tuple[list[_GroupItem], list[int]]:
    """Step 2: the storages touched by the group (:data:`_GroupItem`) and, per group op,
    the forced bytes of every other storage (the live-set bound's less the items')."""
    local = {op: j for j, op in enumerate(ops)}
    outputs = set(graph.outputs)
    items: list[_GroupItem] = []
    other = [lb.forced_bytes[r.index[op]] for op in ops]
    for s in graph.storages_touched(ops):
        t = graph.tensors[s]
        size = round_size(t.size_bytes, alignment_bytes)
        if t.producer is None or size == 0:
            continue
        p = r.index[t.producer]
        started = 0
        users = 0
        for j, op in enumerate(ops):
            i = r.index[op]
            if i == p or r.ancestors.has(i, p):
                started |= 1 << j
        for u in _users(graph, s):
            if u in local:
                users |= 1 << local[u]
        forced_local = 0
        for j, op in enumerate(ops):
            # the touched storages' bits by bit tests (no mask built) unless masks are given
            if (masks[s] >> r.index[op] & 1 if masks is not None
                    else _forced_at(graph, r, s, r.index[op], s in outputs)):
                forced_local |= 1 << j
                other[j] -= size  # counted through the item instead
        items.append((size, started, users, s in outputs, forced_local))
    return items, other


def _min_over_extensions(pred_local: Sequence[int], items: Sequence[_GroupItem],
                         other: Sequence[int], max_states: int) -> tuple[int, int] | None:
    """Step 3: the minimum over linear extensions of the group of the maximum live bytes
    at its ops, by dynamic programming over the down-sets (breadth first, by size), and
    the down-sets visited; ``None`` past ``max_states`` down-sets."""
    k = len(pred_local)
    full = (1 << k) - 1
    best: dict[int, int] = {0: 0}
    frontier = [0]
    states = 1
    while frontier:
        nxt: dict[int, None] = {}
        for done in frontier:
            val = best[done]
            for j in range(k):
                bit = 1 << j
                if done & bit or pred_local[j] & ~done:
                    continue
                after = done | bit
                live = other[j]
                for size, started, users, is_out, forced_local in items:
                    if forced_local & bit or (
                        started & after and (is_out or users & ~done)
                    ):
                        live += size
                cand = max(val, live)
                if after not in best:
                    best[after] = cand
                    nxt[after] = None
                    states += 1
                    if states > max_states:
                        return None
                elif cand < best[after]:
                    best[after] = cand
        frontier = list(nxt)
    return best[full], states


def optimizer_groups(graph: Graph) -> list[tuple[OpId, ...]]:
    """Weakly connected groups of optimizer-phase ops (linked by ordering edges).

    For a single-tensor optimizer each group is one parameter's update (state creation
    included).
    """
    opt = {o.id: None for o in graph.ops if o.phase is Phase.OPTIMIZER}
    uf = UnionFind(opt)
    for src, dst, _ in graph.edges():
        if src in opt and dst in opt:
            uf.union(src, dst)
    return [tuple(g) for g in uf.groups()]


def update_group_lower_bound(
    graph: Graph,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    reach: Reachability | None = None,
    forced: LowerBound | None = None,
    max_group_ops: int = 40,
    max_states: int = MAX_GROUP_STATES,
) -> LowerBound:
    """Max of :func:`group_lower_bound` over the optimizer groups (and the live-set bound).

    Groups with more than ``max_group_ops`` ops or too many down-sets are skipped, so the
    result is never below :func:`live_set_lower_bound`.
    """
    r = reach if reach is not None else reachability(graph)
    lb = forced if forced is not None else live_set_lower_bound(graph, alignment_bytes, reach=r)
    result = lb
    # each group computes the forced-live masks of the storages it touches (none kept for
    # every storage: ``O(storages x N / 8)`` bytes)
    for grp in optimizer_groups(graph):
        if len(grp) > max_group_ops:
            continue
        gb = group_lower_bound(graph, grp, alignment_bytes, reach=r, forced=lb,
                               max_states=max_states)
        if gb is not None and gb.bound_bytes > result.bound_bytes:
            result = LowerBound(gb.bound_bytes, gb.ops[0], lb.resident_bytes,
                                lb.forced_bytes, (), "update_group")
    return result


def best_lower_bound(
    graph: Graph,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    reach: Reachability | None = None,
) -> LowerBound:
    """The tightest bound this module knows (currently the update-group bound)."""
    return update_group_lower_bound(graph, alignment_bytes, reach=reach)

