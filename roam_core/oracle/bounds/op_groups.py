"""The small op groups the group bounds solve exactly, and the down-sets of a group.

A *group* is a set of ops whose relative placement is a real choice in a training step: a
parameter's update (run early and hold the state, or late and hold the gradient), a
weight-gradient branch, a backward-only product of forward values.  The choice bound
(:mod:`roam_core.oracle.bounds.choice`) and the chain-group bound
(:mod:`roam_core.oracle.bounds.chain`) enumerate the *down-sets* of each group (the subsets
closed under the group's transitive precedences: which of its ops may have run at some
point of an order); any groups give valid bounds, these are the ones that tighten them.
"""

from __future__ import annotations

from collections.abc import Sequence

from roam_core.model.graph import Graph, OpId, Phase
from roam_core.model.reach import (
    Reachability,
    iter_bits,
    mask_to_bool,
    reachability,
    topological_indices,
)
from roam_core.model.union_find import UnionFind

__all__ = ["down_sets", "forward_value_groups", "free_branch_groups", "group_precedences"]


def free_branch_groups(graph: Graph, max_descendants: int = 40, *,
                       reach: Reachability | None = None) -> list[tuple[OpId, ...]]:
    """Weakly connected groups of *free-branch* ops: optimizer ops, and ops with at most
    ``max_descendants`` descendants all of whose successors are free-branch ops
    (weight-gradient matmuls, gradient accumulations).  Any disjoint groups give a valid
    :func:`~roam_core.oracle.bounds.choice.choice_lower_bound`; these are the ones whose
    placement is a real choice (run early and hold the result, or late and hold the input).

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> free_branch_groups(tiny_train_step())
    [('mm', 'relu', 'loss', 'ones', 'relu_bw', 't', 'grad_w')]
    """
    r = reach if reach is not None else reachability(graph)
    ids = graph.op_ids
    free = [False] * len(ids)
    index = {op: i for i, op in enumerate(ids)}
    for i in reversed(topological_indices(graph)):
        op = ids[i]
        if graph.op(op).phase is Phase.OPTIMIZER:
            free[i] = True
        else:
            free[i] = (r.descendants.bit_count(r.index[op]) <= max_descendants
                       and all(free[index[s]] for s in graph.successors(op)))
    uf = UnionFind(range(len(ids)))
    for src, dst, _ in graph.edges():
        a, b = index[src], index[dst]
        if free[a] and free[b]:
            uf.union(a, b)
    comps: dict[int, list[OpId]] = {}  # by their first op that is kept
    for i, op in enumerate(ids):
        # sinks that allocate nothing (``detach``) only multiply the down-sets: leave them out
        # (a smaller group is still a valid group)
        if free[i] and (graph.successors(op) or any(
                graph.tensors[t].size_bytes for t in graph.storages_created(op))):
            comps.setdefault(uf.find(i), []).append(op)
    return [tuple(c) for c in comps.values()]


def forward_value_groups(graph: Graph, max_group_ops: int = 40, *,
                         reach: Reachability | None = None) -> list[tuple[OpId, ...]]:
    """Weakly connected groups of *forward-value* ops: backward ops that do not descend from
    a loss op (products of forward values that only the backward reads, e.g. the ``3 * x**2``
    of a tanh-GELU's backward).

    Such an op may run in the forward (hold its result until the backward) or in the
    backward (hold its forward inputs until then): at an op of the backward one of the two is
    live in every order, and the live-set argument sees neither.  Used as the groups of
    :func:`~roam_core.oracle.bounds.choice.choice_lower_bound`, they make it count the
    cheaper one.  Any disjoint groups give a valid bound; groups above ``max_group_ops`` are
    left out, and so are sinks that allocate nothing (views, ``detach``).  Without a loss op
    every backward op qualifies (the groups are then large and left out, or still valid).
    """
    r = reach if reach is not None else reachability(graph)
    after_loss = 0
    for i, o in enumerate(graph.ops):  # program order: ``i`` is the op's index
        if o.phase is Phase.LOSS:
            after_loss |= r.descendants[i] | (1 << i)
    after = mask_to_bool(after_loss, len(graph.ops)).tolist()  # one unpacking, no shifts
    free = [o.id for o, a in zip(graph.ops, after, strict=True)
            if o.phase is Phase.BACKWARD and not a]
    is_free = set(free)
    uf = UnionFind(free)
    for src, dst, _ in graph.edges():
        if src in is_free and dst in is_free:
            uf.union(src, dst)
    comps: dict[OpId, list[OpId]] = {}  # by their first op that is kept
    for op in free:
        if any(graph.tensors[t].size_bytes for t in graph.storages_created(op)):
            comps.setdefault(uf.find(op), []).append(op)
    return [tuple(c) for c in comps.values() if len(c) <= max_group_ops]


def group_precedences(r: Reachability, gidx: Sequence[int]) -> tuple[int, list[int]]:
    """``(group mask, local predecessors)`` of the group of ops at program indices ``gidx``:
    the global mask of the group, and per op ``j`` the local mask of the group ops that are
    its ancestors (transitive: through ops outside the group too)."""
    local = {g: j for j, g in enumerate(gidx)}
    umask = 0
    for g in gidx:
        umask |= 1 << g
    pred_local = [0] * len(gidx)
    for j, g in enumerate(gidx):
        for i in iter_bits(r.ancestors[g] & umask):
            pred_local[j] |= 1 << local[i]
    return umask, pred_local


def down_sets(pred_local: Sequence[int], limit: int) -> list[int] | None:
    """Every down-set of a group (local masks closed under ``pred_local``), ascending, or
    ``None`` when there are more than ``limit``.

    Examples
    --------
    >>> down_sets([0, 0b01, 0b01], 8)  # op 0 before ops 1 and 2
    [0, 1, 3, 5, 7]
    >>> down_sets([0, 0, 0], 4) is None
    True
    """
    k = len(pred_local)
    seen = {0}
    frontier = [0]
    while frontier:
        nxt = []
        for d in frontier:
            for j in range(k):
                b = 1 << j
                if d & b or pred_local[j] & ~d:
                    continue
                e = d | b
                if e not in seen:
                    seen.add(e)
                    nxt.append(e)
                    if len(seen) > limit:
                        return None
        frontier = nxt
    return sorted(seen)
