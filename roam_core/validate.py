"""Independent checkers for orders and plans; they share no code with any solver.

Every checker returns a list of :class:`~roam_core.errors.Violation` (empty when valid) and
never raises on a bad plan.  The rules:

1. the order is a permutation of the graph's ops (``MISSING_OP``, ``DUPLICATE_OP``,
   ``UNKNOWN_OP``);
2. every data edge runs forward (``PRECEDENCE``), every mutation hazard keeps its side
   (``MUTATION_ORDER``), random ops keep their relative order (``RNG_ORDER``);
3. (layouts, see :func:`check_arena`) every planned tensor has an aligned offset inside the
   arena and no two co-live tensors share bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from roam_core.errors import Violation, ViolationKind
from roam_core.graph import EdgeReason, Graph, OpId

__all__ = ["check_order"]

_EDGE_KIND = {
    EdgeReason.DATA: ViolationKind.PRECEDENCE,
    EdgeReason.MUTATION: ViolationKind.MUTATION_ORDER,
    EdgeReason.RNG: ViolationKind.RNG_ORDER,
    EdgeReason.WEIGHT_UPDATE: ViolationKind.PRECEDENCE,
}


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

    Examples
    --------
    >>> from roam_core.samples import diamond
    >>> check_order(diamond(), ["a", "c", "b", "d"])
    []
    >>> [v.kind.value for v in check_order(diamond(), ["b", "a", "c", "d"])]
    ['precedence']
    """
    out: list[Violation] = []
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
    for op in graph.ops:
        for v in op.inputs:
            src = graph.value_producer(v)
            if src is None or src == op.id or src not in pos or op.id not in pos:
                continue
            if pos[src] > pos[op.id]:
                out.append(Violation(
                    ViolationKind.PRECEDENCE, op.id,
                    f"op {op.id!r} (step {pos[op.id]}) reads {v!r} before its producer "
                    f"{src!r} runs (step {pos[src]})"))
    for e in graph.control_edges:
        if e.src in pos and e.dst in pos and pos[e.src] > pos[e.dst]:
            out.append(Violation(
                _EDGE_KIND[e.reason], e.dst,
                f"{e.reason.value} edge {e.src!r} -> {e.dst!r} broken: step {pos[e.src]} "
                f"after step {pos[e.dst]}"))
    return out
