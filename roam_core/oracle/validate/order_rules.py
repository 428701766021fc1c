"""Order rules: the order is a permutation of the ops and every edge runs forward.

``MISSING_OP``, ``DUPLICATE_OP`` and ``UNKNOWN_OP`` for a non-permutation; ``PRECEDENCE``
for a data edge run backwards, ``MUTATION_ORDER`` for a broken mutation hazard and
``RNG_ORDER`` for random ops out of their relative order, ``COLLECTIVE_ORDER`` for
collectives out of theirs (checked from the op targets alone, whatever edges the graph holds:
every rank runs the plan, and ranks that issue collectives in different orders deadlock or
mix up data).  A vectorised pass over an edge index (kept per graph) clears valid orders;
only an order it cannot clear is walked op by op, naming every violation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.base.checks import require_type
from roam_core.base.errors import Violation, ViolationKind
from roam_core.base.graph_cache import PerGraphCache
from roam_core.model.graph import EdgeReason, Graph, OpId
from roam_core.model.parallel import is_collective
from roam_core.model.positions import order_indices, program_index

__all__ = ["check_collective_order", "check_order"]

_EDGE_KIND = {
    EdgeReason.DATA: ViolationKind.PRECEDENCE,
    EdgeReason.MUTATION: ViolationKind.MUTATION_ORDER,
    EdgeReason.RNG: ViolationKind.RNG_ORDER,
    EdgeReason.WEIGHT_UPDATE: ViolationKind.PRECEDENCE,
    EdgeReason.COLLECTIVE: ViolationKind.COLLECTIVE_ORDER,
}

#: The collective ops of the last few graphs checked, in program order.
_COLLECTIVES: PerGraphCache[tuple[OpId, ...]] = PerGraphCache(max_entries=16)


def _collectives(graph: Graph) -> tuple[OpId, ...]:
    hit = _COLLECTIVES.get(graph)
    if hit is None:
        hit = _COLLECTIVES.put(graph, tuple(op.id for op in graph.ops
                                            if is_collective(op.target)))
    return hit


def check_collective_order(graph: Graph, order: Sequence[OpId]) -> list[Violation]:
    """``COLLECTIVE_ORDER`` for every collective that runs before one it followed in the
    graph's program order (ops absent from ``order`` are left to :func:`check_order`).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> check_collective_order(diamond(), ["a", "c", "b", "d"])   # no collectives
    []
    """
    coll = _collectives(graph)
    if not coll:
        return []
    wanted = set(coll)
    pos = {op: i for i, op in enumerate(order) if op in wanted}
    seq = [c for c in coll if c in pos]
    out: list[Violation] = []
    latest: OpId | None = None
    for c in seq:
        if latest is not None and pos[c] < pos[latest]:
            out.append(Violation(
                ViolationKind.COLLECTIVE_ORDER, c,
                f"collective {c!r} (step {pos[c]}) runs before {latest!r} (step "
                f"{pos[latest]}), which it follows on every rank"))
        if latest is None or pos[c] > pos[latest]:
            latest = c
    return out


@dataclass(frozen=True, slots=True)
class _EdgeIndex:
    """Every edge ``check_order`` checks, as program indices (cached per graph object)."""

    index: Mapping[OpId, int]
    src: np.ndarray
    dst: np.ndarray


#: The edge index of the last few graphs checked.
_EDGE_INDEX: PerGraphCache[_EdgeIndex] = PerGraphCache(max_entries=16)


def _edge_index(graph: Graph) -> _EdgeIndex:
    hit = _EDGE_INDEX.get(graph)
    if hit is not None:
        return hit
    ei = _extended_edge_index(graph)
    if ei is None:
        ei = _own_edge_index(graph)
    return _EDGE_INDEX.put(graph, ei)


def _extended_edge_index(graph: Graph) -> _EdgeIndex | None:
    """The edge index of a copy with more control edges (``Graph.with_control_edges``) from
    its original's cached one, when the copy holds the original's very ops and control edges
    (checked here, object by object) followed by more: those are appended."""
    derived = graph.derived_from()
    if derived is None:
        return None
    base = derived[0]
    old = _EDGE_INDEX.get(base)
    n_base = len(base.control_edges)
    if (old is None or graph.ops is not base.ops
            or len(graph.control_edges) < n_base
            or any(a is not b for a, b in zip(graph.control_edges, base.control_edges))):
        return None
    index = old.index
    extra = graph.control_edges[n_base:]
    src = np.fromiter((index[e.src] for e in extra), np.int64, len(extra))
    dst = np.fromiter((index[e.dst] for e in extra), np.int64, len(extra))
    return _EdgeIndex(index, np.concatenate([old.src, src]), np.concatenate([old.dst, dst]))


def _own_edge_index(graph: Graph) -> _EdgeIndex:
    index = program_index(graph)
    src: list[int] = []
    dst: list[int] = []
    for op in graph.ops:  # the same edges as the full check below, read the same way
        for v in op.inputs:
            p = graph.value_producer(v)
            if p is not None and p != op.id:
                src.append(index[p])
                dst.append(index[op.id])
    for e in graph.control_edges:
        src.append(index[e.src])
        dst.append(index[e.dst])
    return _EdgeIndex(index, np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64))


def _obviously_valid(graph: Graph, order: Sequence[OpId]) -> bool:
    """True only when ``order`` is a permutation of the ops and every edge runs forward (the
    rules of :func:`check_order`, vectorised); False sends the order to the full check, which
    names every violation."""
    ei = _edge_index(graph)
    n = len(ei.index)
    if len(order) != n:
        return False
    try:
        prog = order_indices(graph, order)  # ei.index's mapping (program indices)
    except Exception:  # an unknown (or unhashable) entry: the full check reports it
        return False
    step = np.full(n, -1, dtype=np.int64)
    step[prog] = np.arange(n)
    if n and step.min() < 0:  # some op twice, so another one missing
        return False
    return not bool(np.any(step[ei.src] > step[ei.dst]))


def check_order(graph: Graph, order: Sequence[OpId]) -> list[Violation]:
    """Check that ``order`` is a valid execution order of ``graph``.

    Parameters
    ----------
    graph : Graph
        The graph whose data edges and control edges must be honoured.
    order : sequence of OpId
        The candidate order.

    Returns
    -------
    list of Violation
        One record per broken rule; empty when the order is valid.

    Notes
    -----
    A vectorised pass over the same rules answers first; only an order it cannot clear goes
    through the op-by-op check that names every violation (``O(N + E)`` either way).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> check_order(diamond(), ["a", "c", "b", "d"])
    []
    >>> [v.kind.value for v in check_order(diamond(), ["b", "a", "c", "d"])]
    ['precedence']
    """
    require_type(graph, Graph, "check_order: graph")
    if _obviously_valid(graph, order):
        return check_collective_order(graph, order)
    out: list[Violation] = check_collective_order(graph, order)
    pos: dict[str, int] = {}
    known = set(graph.op_ids)
    for i, op in enumerate(order):
        if op not in known:
            out.append(Violation(ViolationKind.UNKNOWN_OP, str(op),
                                 f"order step {i} names unknown op {op!r}"))
        elif op in pos:
            out.append(Violation(ViolationKind.DUPLICATE_OP, op,
                                 f"op {op!r} appears at steps {pos[op]} and {i}"))
        else:
            pos[op] = i
    for op in graph.op_ids:
        if op not in pos:
            out.append(Violation(ViolationKind.MISSING_OP, op, f"op {op!r} is not in the order"))
    # every edge must run forward; edges touching absent ops were reported above
    for node in graph.ops:
        for v in node.inputs:
            src = graph.value_producer(v)
            if src is None or src == node.id or src not in pos or node.id not in pos:
                continue
            if pos[src] > pos[node.id]:
                out.append(Violation(
                    ViolationKind.PRECEDENCE, node.id,
                    f"op {node.id!r} (step {pos[node.id]}) reads {v!r} before its producer "
                    f"{src!r} runs (step {pos[src]})"))
    named = {v.subject_id for v in out if v.kind is ViolationKind.COLLECTIVE_ORDER}
    for e in graph.control_edges:
        if e.reason is EdgeReason.COLLECTIVE and e.dst in named:
            continue  # named by the collective rule already
        if e.src in pos and e.dst in pos and pos[e.src] > pos[e.dst]:
            out.append(Violation(
                _EDGE_KIND[e.reason], e.dst,
                f"{e.reason.value} edge {e.src!r} -> {e.dst!r} broken: step {pos[e.src]} "
                f"after step {pos[e.dst]}"))
    return out
