"""Exhaustive search over topological orders: the test oracle for tiny graphs.

Every valid order (data and control edges honoured) of a graph with at most
:data:`MAX_BRUTE_FORCE_OPS` ops is enumerated by a depth-first search over the ready set
and scored with :func:`roam_core.oracle.simulate.simulate`; the minimum is exact.  At most
``8! = 40320`` orders are visited.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from roam_core.base.errors import GraphError
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, Order
from roam_core.oracle.simulate import simulate

__all__ = ["MAX_BRUTE_FORCE_OPS", "BruteForceResult", "all_orders", "brute_force_order"]

_logger = logging.getLogger(__name__)

#: Largest graph :func:`brute_force_order` accepts.
MAX_BRUTE_FORCE_OPS = 8


@dataclass(frozen=True, slots=True)
class BruteForceResult:
    """The exact minimum-peak order.

    Parameters
    ----------
    order : tuple of OpId
        A valid order reaching the minimum (the first found, in DFS order).
    peak_bytes : int
        Its simulated peak (resident bytes included).
    n_orders : int
        Valid orders enumerated.
    """

    order: Order
    peak_bytes: int
    n_orders: int


def all_orders(graph: Graph) -> Iterator[Order]:
    """Every valid order of ``graph`` (data + control edges), in lexicographic DFS order.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> list(all_orders(diamond()))
    [('a', 'b', 'c', 'd'), ('a', 'c', 'b', 'd')]
    """
    ids = graph.op_ids
    index = {op: i for i, op in enumerate(ids)}
    succs = [[index[s] for s in graph.successors(op)] for op in ids]
    indeg = [len(graph.predecessors(op)) for op in ids]
    n = len(ids)
    prefix: list[int] = []
    used = [False] * n

    def rec() -> Iterator[Order]:
        if len(prefix) == n:
            yield tuple(ids[i] for i in prefix)
            return
        for v in range(n):
            if used[v] or indeg[v]:
                continue
            used[v] = True
            prefix.append(v)
            for s in succs[v]:
                indeg[s] -= 1
            yield from rec()
            for s in succs[v]:
                indeg[s] += 1
            prefix.pop()
            used[v] = False

    yield from rec()


def brute_force_order(
    graph: Graph, *, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES
) -> BruteForceResult:
    """The minimum simulated peak over all valid orders of a tiny graph.

    Parameters
    ----------
    graph : Graph
        At most :data:`MAX_BRUTE_FORCE_OPS` ops.
    alignment_bytes : int
        Rounding used by ``simulate``.

    Returns
    -------
    BruteForceResult

    Raises
    ------
    GraphError
        If the graph has more than :data:`MAX_BRUTE_FORCE_OPS` ops.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> r = brute_force_order(diamond(), alignment_bytes=1)
    >>> r.peak_bytes, r.n_orders
    (350, 2)
    """
    if len(graph.ops) > MAX_BRUTE_FORCE_OPS:
        raise GraphError(
            f"brute force takes at most {MAX_BRUTE_FORCE_OPS} ops; the graph has {len(graph.ops)}")
    best: tuple[int, Order] | None = None
    count = 0
    for order in all_orders(graph):
        count += 1
        peak = simulate(graph, order, alignment_bytes=alignment_bytes).peak_bytes
        if best is None or peak < best[0]:
            best = (peak, order)
    assert best is not None or not graph.ops
    if best is None:
        return BruteForceResult((), graph.resident_bytes(alignment_bytes), 1)
    _logger.debug("brute force: %d orders, min peak %d", count, best[0])
    return BruteForceResult(order=tuple(OpId(o) for o in best[1]), peak_bytes=best[0],
                            n_orders=count)
