"""Per-parameter update groups: the ops that update one parameter, found from structure alone.

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

Placing the groups in an order is :mod:`roam_core.ordering.update_insertion`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.base.graph_cache import PerGraphCache
from roam_core.model.dag_view import CompactGraph, compact
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, Phase, TensorId, TensorKind
from roam_core.model.reach import Reachability, reachability
from roam_core.model.union_find import UnionFind

__all__ = ["UpdateGroup", "block_order", "block_profile", "update_groups"]

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
        planned storages it reads, while they are live in the block (sizes rounded up to
        ``alignment_bytes``).
    """

    param: TensorId
    grad: TensorId | None
    op_ids: tuple[OpId, ...]
    state_init_ops: tuple[OpId, ...]
    peak_extra_bytes: int


#: The update groups of the most recent graph object (graphs are immutable) and alignment:
#: the update insertion and the rewrites of one plan ask for the same ones.
_LAST: PerGraphCache[tuple[UpdateGroup, ...]] = PerGraphCache(max_entries=1)


def update_groups(graph: Graph, *,
                  alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> tuple[UpdateGroup, ...]:
    """The per-parameter update groups of ``graph``, in program order of their first op.

    The result for the most recent graph object and alignment is cached, so the planner's
    update insertion and rewrites share one computation.

    Parameters
    ----------
    graph : Graph
        A training-step graph (ops tagged ``Phase.OPTIMIZER`` by the tracer).
    alignment_bytes : int
        Rounding of the storage sizes in ``peak_extra_bytes``.

    Returns
    -------
    tuple of UpdateGroup
        Empty when the graph has no optimizer ops that mutate resident storages.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> [(g.param, g.grad, g.op_ids) for g in update_groups(tiny_train_step())]
    [('w', 'grad_w', ('update',))]
    """
    return _LAST.get_or_build(graph, lambda: _update_groups(graph, alignment_bytes),
                              key=alignment_bytes)


def _update_groups(graph: Graph, alignment_bytes: int) -> tuple[UpdateGroup, ...]:
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
    uf = UnionFind(opt)
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
    comps = uf.groups()
    reach = None
    members: list[tuple[TensorId, list[int]]] = []
    param_kind = any(graph.tensors[s].kind == TensorKind.PARAMETER for s in mutated_resident)
    mutated_by: dict[int, list[TensorId]] = {}
    for s, ms in mutated_resident.items():
        for m in ms:
            mutated_by.setdefault(m, []).append(s)
    for comp in comps:
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
            reach = reachability(graph)
        split = _split_by_anchor(graph, comp, anchors, mutated_resident, reach)
        members.extend(split)
    # 3. convexity
    if reach is None and members:
        reach = reachability(graph)
    groups: list[UpdateGroup] = []
    creates_state = set(graph.state_creation_ops())  # once: per group it is O(N) each
    taken: set[int] = set()
    for _, ops in members:
        taken.update(ops)
    for anchor, ops in members:
        assert reach is not None  # built above when there are members
        ops_c = _make_convex(ops, reach, opt_set, taken, graph)
        if ops_c is None:
            _logger.info("update group of %s is not convex; left ungrouped", anchor)
            continue
        groups.append(_describe(graph, anchor, ops_c, alignment_bytes, creates_state))
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
                t = graph.tensors[s]
                if t.producer is None:
                    continue
                for c in (*t.consumers, t.producer):
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
                 taken: set[int], graph: Graph) -> list[int] | None:
    """Absorb ungrouped optimizer ops lying between group ops; ``None`` if impossible."""
    ops = set(ops_in)
    for _ in range(len(opt_set) + 1):
        extra = _between(ops, reach, graph)
        if not extra:
            return sorted(ops)
        if any(i not in opt_set or i in taken for i in extra):
            return None
        ops.update(extra)
    return None


def _between(ops: set[int], reach: Reachability, graph: Graph) -> list[int]:
    """The ops outside ``ops`` that are a descendant of one op of ``ops`` and an ancestor
    of one (``ancestors & descendants & ~ops`` of the group), ascending.

    A walk from the group's successors outside it, through ops that are an ancestor of a
    group op (a bit test each, no mask built): every op between two group ops is reached
    that way (the path from the last group op before it stays between), and an op that is
    no group op's ancestor has no such op after it."""
    anc, index, ids = reach.ancestors, reach.index, reach.op_ids

    def succs(i: int) -> Iterator[int]:
        return (j for j in (index[s] for s in graph.successors(ids[i])) if j not in ops)

    stack = [j for i in ops for j in succs(i)]
    seen: set[int] = set()
    found: list[int] = []
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if any(anc.has(g, x) for g in ops):
            found.append(x)
            stack.extend(succs(x))
    return sorted(found)


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


def block_profile(
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


def _describe(graph: Graph, anchor: TensorId, ops: list[int],
              alignment_bytes: int, creates_state: set[OpId]) -> UpdateGroup:
    cg = compact(graph, alignment_bytes)
    in_group = set(ops)
    # state inits: state creation with no predecessor in the group (sunk just in time)
    state_init = [v for v in ops if cg.op_ids[v] in creates_state
                  and not any(p in in_group for p in cg.preds[v])]
    grad: tuple[int, int, TensorId] | None = None
    for v in ops:
        external_planned = [s for s in cg.uses[v] if cg.producer[s] not in in_group]
        for s in external_planned:
            p = cg.producer[s]
            if graph.ops[p].phase != Phase.OPTIMIZER:
                cand = (cg.size_bytes[s], -p, cg.storage_ids[s])
                if grad is None or cand > grad:
                    grad = cand
    block = block_order(cg, ops, state_init)
    internal, _, _, ext = block_profile(cg, block, None)
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
