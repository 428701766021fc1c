"""Per-parameter update groups and their cost-aware placement in an order.

A training step ends with the optimizer update.  Single-tensor optimizers (Adam, AdamW, SGD
with momentum, ``foreach=False``) update each parameter with its own short chain of ops:
create the state (``zeros_like``), fold the gradient into it, update the parameter in place.
That chain is an **update group**.  A group can run as soon as its gradient exists, and
where it runs decides whether its temporaries stack on top of the activation peak.

Identifying groups (structure only, never names)
------------------------------------------------
1. Link optimizer-phase ops that touch the same storage, through storages that are planned
   (allocated in the step) or resident *and mutated* by an optimizer op; read-only resident
   storages (constants, hyper-parameters) do not link.  Each connected component that
   mutates a resident storage is a candidate.
2. The **anchors** of a component are the resident storages it mutates; when the graph tags
   parameters (kind ``PARAMETER``), only those count (a warm optimizer's resident state and
   step counters are mutated too, but the parameter is what a chain ultimately updates), so
   a component that mutates only state (``step += 1``) is no group.  A component with one
   anchor is one group.  A component with several anchors (linked through a shared storage, e.g. a
   clipping coefficient) is split: an op joins the anchor whose mutating ops are the only
   anchors' ops it can reach; shared ops stay ungrouped.
3. A group must be *convex* (no outside op on a path between two of its ops) so it can run
   as one block; outside optimizer ops on such paths are absorbed, otherwise the group is
   dropped.
4. ``state_init_ops``: group ops with no predecessor in the group that read nothing planned
   from outside (``zeros_like(param)``, a fresh step counter); the block runs each one just
   before its first user.

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

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.dag_view import CompactGraph, compact
from roam_core.errors import GraphError
from roam_core.graph import Graph, OpId, Order, Phase, TensorId, TensorKind
from roam_core.reach import Reachability, iter_bits
from roam_core.simulate import simulate

__all__ = [
    "UpdateGroup",
    "best_update_insertion",
    "block_order",
    "insert_update_groups",
    "update_groups",
]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UpdateGroup:
    """The ops updating one parameter.

    Parameters
    ----------
    param : TensorId
        The (resident) storage the group ultimately mutates.
    grad : TensorId or None
        The largest planned storage the group reads that a non-optimizer op produced (the
        gradient); ``None`` when there is none.
    op_ids : tuple of OpId
        The group's ops in program order.
    state_init_ops : tuple of OpId
        Ops creating optimizer state (no predecessor in the group, read nothing planned
        from outside).
    peak_extra_bytes : int
        Peak of the group run as one block (state creation sunk): its own storages plus the
        planned storages it reads, while they are live in the block (512 B rounding).
    """

    param: TensorId
    grad: TensorId | None
    op_ids: tuple[OpId, ...]
    state_init_ops: tuple[OpId, ...]
    peak_extra_bytes: int


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _mask_to_bool(mask: int, n: int) -> np.ndarray:
    raw = mask.to_bytes((n + 7) // 8 or 1, "little")
    return np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")[:n].astype(bool)


def _reach(graph: Graph) -> Reachability:
    from roam_core.reach import reachability

    return reachability(graph)


def update_groups(graph: Graph) -> tuple[UpdateGroup, ...]:
    """The per-parameter update groups of ``graph``, in program order of their first op.

    Parameters
    ----------
    graph : Graph
        A training-step graph (ops tagged ``Phase.OPTIMIZER`` by the tracer).

    Returns
    -------
    tuple of UpdateGroup
        Empty when the graph has no optimizer ops that mutate resident storages.

    Examples
    --------
    >>> from roam_core.samples import tiny_train_step
    >>> [(g.param, g.grad, g.op_ids) for g in update_groups(tiny_train_step())]
    [('w', 'grad_w', ('update',))]
    """
    ids = graph.op_ids
    index = {op: i for i, op in enumerate(ids)}
    opt = [i for i, op in enumerate(graph.ops) if op.phase == Phase.OPTIMIZER]
    if not opt:
        return ()
    opt_set = set(opt)
    mutated_resident: dict[TensorId, list[int]] = {}
    for i in opt:
        for s in graph.ops[i].mutates:
            if graph.tensors[s].producer is None:
                mutated_resident.setdefault(s, []).append(i)
    if not mutated_resident:
        return ()
    # 1. components of optimizer ops linked through planned or mutated-resident storages
    uf = _UnionFind(len(ids))
    touch: dict[TensorId, list[int]] = {}
    for i in opt:
        op = graph.ops[i]
        for s in (*graph.storages_read(op.id), *graph.storages_created(op.id)):
            t = graph.tensors[s]
            if t.producer is None and s not in mutated_resident:
                continue
            touch.setdefault(s, []).append(i)
    for ops in touch.values():
        for j in ops[1:]:
            uf.union(ops[0], j)
    comps: dict[int, list[int]] = {}
    for i in opt:
        comps.setdefault(uf.find(i), []).append(i)
    reach = None
    members: list[tuple[TensorId, list[int]]] = []
    param_kind = any(graph.tensors[s].kind == TensorKind.PARAMETER for s in mutated_resident)
    mutated_by: dict[int, list[TensorId]] = {}
    for s, ms in mutated_resident.items():
        for m in ms:
            mutated_by.setdefault(m, []).append(s)
    for comp in comps.values():
        anchors = list(dict.fromkeys(s for i in comp for s in mutated_by.get(i, ())))
        if param_kind:
            # parameters are tagged: a chain that mutates only state (a step counter) is
            # not an update group of its own
            anchors = [s for s in anchors if graph.tensors[s].kind == TensorKind.PARAMETER]
        if not anchors:
            continue
        if len(anchors) == 1:
            members.append((anchors[0], sorted(comp)))
            continue
        # 2. several anchors: split by which anchors' mutating ops each op reaches
        if reach is None:
            reach = _reach(graph)
        split = _split_by_anchor(graph, comp, anchors, mutated_resident, reach)
        members.extend(split)
    # 3. convexity
    if reach is None and members:
        reach = _reach(graph)
    groups: list[UpdateGroup] = []
    taken: set[int] = set()
    for _, ops in members:
        taken.update(ops)
    for anchor, ops in members:
        ops_c = _make_convex(ops, reach, opt_set, taken)
        if ops_c is None:
            _logger.info("update group of %s is not convex; left ungrouped", anchor)
            continue
        groups.append(_describe(graph, anchor, ops_c))
    groups.sort(key=lambda g: index[g.op_ids[0]])
    return tuple(groups)


def _split_by_anchor(
    graph: Graph, comp: list[int], anchors: list[TensorId],
    mutated_resident: Mapping[TensorId, list[int]], reach: Reachability,
) -> list[tuple[TensorId, list[int]]]:
    """Assign a multi-anchor component's ops to anchors by reachability (step 2)."""
    index = reach.index
    cset = set(comp)
    anchor_masks = []
    for a in anchors:
        m = 0
        for i in mutated_resident[a]:
            if i in cset:
                m |= 1 << i
        anchor_masks.append(m)
    owner: dict[int, int] = {}
    for i in comp:
        reach_self = reach.descendants[i] | (1 << i)
        hits = [k for k, m in enumerate(anchor_masks) if reach_self & m]
        if len(hits) == 1:
            owner[i] = hits[0]
    # orphans join the unique group they share a planned storage with
    changed = True
    while changed:
        changed = False
        for i in comp:
            if i in owner:
                continue
            near: set[int] = set()
            op = graph.ops[i]
            for s in (*graph.storages_read(op.id), *graph.storages_created(op.id)):
                if graph.tensors[s].producer is None:
                    continue
                for c in (*graph.tensors[s].consumers, graph.tensors[s].producer):
                    j = index[c]
                    if j in owner:
                        near.add(owner[j])
            if len(near) == 1:
                owner[i] = near.pop()
                changed = True
    out = []
    for k, a in enumerate(anchors):
        ops = sorted(i for i, o in owner.items() if o == k)
        if ops:
            out.append((a, ops))
    return out


def _make_convex(ops_in: list[int], reach: Reachability, opt_set: set[int],
                 taken: set[int]) -> list[int] | None:
    """Absorb ungrouped optimizer ops lying between group ops; ``None`` if impossible."""
    ops = set(ops_in)
    for _ in range(len(opt_set) + 1):
        anc = desc = 0
        for i in ops:
            anc |= reach.ancestors[i]
            desc |= reach.descendants[i]
        inside = 0
        for i in ops:
            inside |= 1 << i
        between = anc & desc & ~inside
        if not between:
            return sorted(ops)
        extra = list(iter_bits(between))
        if any(i not in opt_set or i in taken for i in extra):
            return None
        ops.update(extra)
    return None


def block_order(cg: CompactGraph, ops: Sequence[int], state_init: Sequence[int]) -> list[int]:
    """The group's ops in program order with each state-init op moved to its first user."""
    in_group = set(ops)
    sinks = set(state_init)
    rest = [v for v in sorted(ops) if v not in sinks]
    first_user: dict[int, list[int]] = {}
    tail: list[int] = []
    pos = {v: k for k, v in enumerate(rest)}
    for v in sorted(sinks):
        users = [pos[s] for s in cg.succs[v] if s in in_group and s in pos]
        if users:
            first_user.setdefault(rest[min(users)], []).append(v)
        else:
            tail.append(v)
    out: list[int] = []
    for v in rest:
        out.extend(first_user.get(v, ()))
        out.append(v)
    out.extend(tail)
    return out


def _block_profile(
    cg: CompactGraph, block: Sequence[int], pos: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]], list[tuple[int, int, int]]]:
    """Own curve of a block plus its external reads (see :func:`insert_update_groups`).

    Returns ``internal`` (block storages; those used after the block stay to its end),
    ``freed`` (bytes whose last step is each block step), ``long`` (storages used later:
    list of (storage, size)), and ``ext`` (planned storages read from outside:
    list of (storage, size, last block step)).
    """
    L = len(block)
    bpos = {v: j for j, v in enumerate(block)}
    internal = np.zeros(L + 1, dtype=np.int64)
    freed = np.zeros(L, dtype=np.int64)
    long: list[tuple[int, int]] = []
    ext: dict[int, int] = {}
    for j, v in enumerate(block):
        for s in cg.creates[v]:
            size = cg.size_bytes[s]
            later = cg.is_output[s] or (pos is not None and any(
                u not in bpos and pos[u] >= 0 for u in cg.users[s]))
            inb = [bpos[u] for u in cg.users[s] if u in bpos]
            if later:
                internal[j] += size
                internal[L] -= size
                long.append((s, size))
            else:
                e = max([j, *inb])
                internal[j] += size
                internal[e + 1] -= size
                freed[e] += size
        for s in cg.uses[v]:
            if cg.producer[s] not in bpos:
                ext[s] = max(ext.get(s, 0), j)
    ext_list = [(s, cg.size_bytes[s], e) for s, e in ext.items()]
    return np.cumsum(internal[:L]), freed, long, ext_list


def _describe(graph: Graph, anchor: TensorId, ops: list[int]) -> UpdateGroup:
    cg = compact(graph)
    in_group = set(ops)
    state_init = []
    grad: tuple[int, int, TensorId] | None = None
    for v in ops:
        external_planned = [s for s in cg.uses[v] if cg.producer[s] not in in_group]
        if not any(p in in_group for p in cg.preds[v]) and not external_planned \
                and cg.creates[v]:
            state_init.append(v)
        for s in external_planned:
            p = cg.producer[s]
            if graph.ops[p].phase != Phase.OPTIMIZER:
                cand = (cg.size_bytes[s], -p, cg.storage_ids[s])
                if grad is None or cand > grad:
                    grad = cand
    block = block_order(cg, ops, state_init)
    internal, _, _, ext = _block_profile(cg, block, None)
    curve = internal.copy()
    for _, size, e in ext:
        curve[: e + 1] += size
    return UpdateGroup(
        param=anchor,
        grad=grad[2] if grad else None,
        op_ids=tuple(cg.op_ids[v] for v in ops),
        state_init_ops=tuple(cg.op_ids[v] for v in state_init),
        peak_extra_bytes=int(curve.max()) if len(curve) else 0,
    )


# ------------------------------------------------------------------ insertion
def insert_update_groups(
    graph: Graph,
    groups: Sequence[UpdateGroup] | None = None,
    *,
    base_method: str = "lpmf",
    tie: str = "early",
    group_order: str = "largest",
) -> Order:
    """An order: a cheap base order with every update group inserted at its best slot.

    Parameters
    ----------
    graph : Graph
        The graph.
    groups : sequence of UpdateGroup, optional
        Default :func:`update_groups`.
    base_method : str
        How the forward + backward ops are ordered: ``"lpmf"`` (LPMF on them alone),
        ``"eager"`` (program order) or any other registered method (its order of the whole
        graph, restricted to them).
    tie : str
        ``"early"`` (earliest slot among equal peaks) or ``"light"`` (the slot where the
        block's own peak is lowest, then earliest).
    group_order : str
        ``"largest"`` (by ``peak_extra_bytes``, descending) or ``"program"`` (by the
        program position of each group's first op).

    Returns
    -------
    tuple of OpId
        A valid order.

    Examples
    --------
    >>> from roam_core.samples import tiny_train_step
    >>> insert_update_groups(tiny_train_step())[-2:]
    ('grad_w', 'update')
    """
    groups = update_groups(graph) if groups is None else tuple(groups)
    return _tracked_insertion(graph, groups, base_method, tie, group_order)[0]


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


def _prepare(graph: Graph, groups: Sequence[UpdateGroup], base_method: str) -> _Prepared:
    from roam_core.heuristics import _lpmf
    from roam_core.reach import topological_indices

    cg = compact(graph)
    n = cg.n_ops
    reach = _reach(graph)
    gops = tuple(tuple(cg.index[o] for o in g.op_ids) for g in groups)
    in_u = np.zeros(n, dtype=bool)
    u_desc = 0
    for ops in gops:
        for v in ops:
            in_u[v] = True
            u_desc |= reach.descendants[v]
    below = _mask_to_bool(u_desc, n)
    # 1. base and tail
    topo = topological_indices(graph)
    base = [v for v in topo if not in_u[v] and not below[v]]
    tail = [v for v in topo if not in_u[v] and below[v]]
    if base_method == "lpmf":
        sub, old = cg.subgraph(base)
        base_order = [old[i] for i in _lpmf(sub)]
    elif base_method == "eager":
        base_order = base
    else:
        # any registered method: its full order restricted to the base (still valid: the
        # base is closed under ancestors)
        from roam_core.heuristics import run_method

        keep = set(base)
        base_order = [cg.index[o] for o in run_method(graph, base_method, validate=False)
                      if cg.index[o] in keep]
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


def _tracked_insertion(
    graph: Graph, groups: Sequence[UpdateGroup], base_method: str, tie: str,
    group_order: str = "largest",
) -> tuple[Order, np.ndarray | None]:
    """The insertion order and the live-bytes curve it tracked (equals ``simulate``'s)."""
    from roam_core.heuristics import _lpmf

    cg = compact(graph)
    if not groups:
        seq = _lpmf(cg) if base_method == "lpmf" else list(range(cg.n_ops))
        return cg.order_ids(seq), None
    seq, prof = _insert_all(_prepare(graph, groups, base_method), tie, group_order)
    return cg.order_ids(seq), prof


def _insert_block(
    cg: CompactGraph, reach: Reachability, seq: list[int], prof: np.ndarray,
    freed: np.ndarray, pos: np.ndarray, block: list[int], tie: str,
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Insert ``block`` at its best slot of ``seq``; update ``pos`` in place (steps a-e)."""
    n = cg.n_ops
    m = len(seq)
    L = len(block)
    in_seq = pos >= 0
    # a. window: after every ancestor, before every descendant already placed
    anc = desc = 0
    for v in block:
        anc |= reach.ancestors[v]
        desc |= reach.descendants[v]
    a_pos = pos[_mask_to_bool(anc, n) & in_seq]
    d_pos = pos[_mask_to_bool(desc, n) & in_seq]
    lo = int(a_pos.max()) + 1 if len(a_pos) else 0
    hi = int(d_pos.min()) if len(d_pos) else m
    if lo > hi:  # cannot happen for convex groups in a valid sequence; never trust it
        raise GraphError(f"no slot for the update block starting at {cg.op_ids[block[0]]!r}")
    internal, bfreed, long, ext = _block_profile(cg, block, pos)
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
    # c. the sequence's steps for slot k: before k (extended inputs), from k (long outputs)
    A = prof.copy()
    for e, size, _, _ in ext_e:
        if e + 1 < m:
            A[e + 1:] += size
    pref_a = np.concatenate(([0], np.maximum.accumulate(A))) if m else np.zeros(1, np.int64)
    C = prof.copy()
    for last, size in long_last:
        C[: last + 1] += size
    suf_c = np.concatenate((np.maximum.accumulate(C[::-1])[::-1], [0])) if m else \
        np.zeros(1, np.int64)
    cross = np.zeros(m + 1, dtype=np.int64)
    if m:
        cross[1:] = prof - freed
    # d. the block's own peak for each prefix of extended externals
    es = np.array([e for e, *_ in ext_e], dtype=np.int64)
    bpeaks = []
    curve = internal.copy()
    bpeaks.append(int(curve.max()) if L else 0)
    for _, size, lastb, _ in ext_e:
        curve[: lastb + 1] += size
        bpeaks.append(int(curve.max()))
    ks = np.arange(lo, hi + 1)
    r = np.searchsorted(es, ks, side="left")
    block_peak = cross[ks] + np.asarray(bpeaks, dtype=np.int64)[r]
    total = np.maximum(np.maximum(pref_a[ks], suf_c[ks]), block_peak)
    if tie == "light":
        best = np.lexsort((ks, block_peak, total))[0]
    else:
        best = int(np.argmin(total))
    k = int(ks[best])
    n_ext = int(r[best])
    # e. apply: extend externals, add long storages, splice the block's curve in
    bprof = internal + cross[k]
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
    seq = seq[:k] + list(block) + seq[k:]
    return seq, prof, freed


def best_update_insertion(graph: Graph) -> Order:
    """Best (by ``simulate``) of LPMF-based update insertion over both slot tie rules and
    both group orders; never worse than plain LPMF on the whole graph.

    Examples
    --------
    >>> from roam_core.samples import tiny_train_step
    >>> best_update_insertion(tiny_train_step())[-1]
    'update'
    """
    from roam_core.heuristics import lpmf_order

    groups = update_groups(graph)
    plain = lpmf_order(graph)
    if not groups:
        return plain
    best: tuple[int, Order] = (simulate(graph, plain).peak_bytes, plain)
    prep = _prepare(graph, groups, "lpmf")
    for group_order in ("largest", "program"):
        for tie in ("early", "light"):
            try:
                seq, _ = _insert_all(prep, tie, group_order)
            except GraphError as e:
                _logger.warning("update insertion failed on %s (%s); using LPMF", graph.name, e)
                return best[1]
            order = prep.cg.order_ids(seq)
            peak = simulate(graph, order).peak_bytes
            if peak < best[0]:
                best = (peak, order)
    return best[1]
