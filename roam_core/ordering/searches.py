"""Graph-search orders: inductor's BFS and DFS, XLA's DFS and post-order schedulers.

Each costs ``O(E log N)``.

References
----------
inductor ``torch/_inductor/memory.py`` (BFS, DFS); XLA ``hlo_memory_scheduler.cc`` (DFS and
post-order schedulers).  Ideas only: no code was copied.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from roam_core.base.errors import GraphError
from roam_core.model.dag_view import CompactGraph, compact
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, Order

__all__ = ["bfs_order", "dfs_order", "xla_dfs_order", "xla_postorder_order"]

def bfs_order(graph: Graph, *,
              alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """Inductor-style BFS: the ready op whose predecessors ran earliest goes first.

    The priority of a ready op is the sorted list of the steps its predecessors ran at
    (FIFO: buffers created early are consumed, hence freed, early); ties by program index.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> bfs_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    cg = compact(graph, alignment_bytes)
    n = cg.n_ops
    step = [-1] * n
    indeg = [len(p) for p in cg.preds]
    heap: list[tuple[list[int], int]] = [([], v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, v = heapq.heappop(heap)
        step[v] = len(out)
        out.append(v)
        for s in cg.succs[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (sorted({step[p] for p in cg.preds[s]}), s))
    if len(out) != n:
        raise GraphError("bfs stopped early")
    return cg.order_ids(out)


def _post_order(cg: CompactGraph, roots: Sequence[int],
                operands: Callable[[int], Sequence[int]]) -> list[int]:
    """Iterative DFS post-order over predecessors (an op after all its operands)."""
    seen = [False] * cg.n_ops
    out: list[int] = []
    for root in roots:
        if seen[root]:
            continue
        seen[root] = True
        stack = [(root, iter(operands(root)))]
        while stack:
            v, it = stack[-1]
            for p in it:
                if not seen[p]:
                    seen[p] = True
                    stack.append((p, iter(operands(p))))
                    break
            else:
                stack.pop()
                out.append(v)
    return out


def dfs_order(graph: Graph, *,
              alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """Inductor-style DFS: visit ops by ascending ``output + input bytes``.

    Each visited op first visits its unmet predecessors (also by that key), then is
    emitted, so small ops and their producers go first.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> dfs_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    cg = compact(graph, alignment_bytes)
    swr = cg.defined_bytes()
    for v, ss in enumerate(cg.uses):
        swr[v] += sum(cg.size_bytes[s] for s in ss)
    key = [(int(swr[v]), v) for v in range(cg.n_ops)]
    preds_sorted = [sorted(ps, key=lambda p: key[p]) for ps in cg.preds]
    roots = sorted(range(cg.n_ops), key=lambda v: key[v])
    return cg.order_ids(_post_order(cg, roots, lambda v: preds_sorted[v]))


def _sinks(cg: CompactGraph) -> list[int]:
    return [v for v in range(cg.n_ops) if not cg.succs[v]]


def xla_dfs_order(graph: Graph, *,
                  alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """XLA-style DFS scheduler: post-order from the sinks, heavy operands first.

    For each op, ``extra_users`` (fan-out beyond one, accumulated over its operands) and
    ``total_size`` (bytes defined by it and, cumulatively, by its operands) are computed in
    topological order; operands with more extra users, then larger total size, then
    smaller name are visited first.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> xla_dfs_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    from roam_core.model.reach import topological_indices

    cg = compact(graph, alignment_bytes)
    n = cg.n_ops
    defined = cg.defined_bytes()
    extra = [0] * n
    total = [0] * n
    cumulative = 0
    for v in topological_indices(graph):
        extra[v] = max(len(cg.succs[v]) - 1, 0)
        total[v] = int(defined[v])
        cumulative += int(defined[v])
        for p in cg.preds[v]:
            extra[v] += extra[p]
            total[v] += total[p]
        total[v] = min(total[v], cumulative)
        extra[v] = min(extra[v], n)
    key = [(-extra[v], -total[v], cg.op_ids[v]) for v in range(n)]
    ops_sorted = [sorted(ps, key=lambda p: key[p]) for ps in cg.preds]
    roots = sorted(_sinks(cg), key=lambda v: key[v])
    return cg.order_ids(_post_order(cg, roots, lambda v: ops_sorted[v]))


def xla_postorder_order(graph: Graph, *,
                        alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> Order:
    """XLA-style post order: DFS from each sink (program order), operands in input order.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> xla_postorder_order(diamond())
    ('a', 'b', 'c', 'd')
    """
    cg = compact(graph, alignment_bytes)
    return cg.order_ids(_post_order(cg, _sinks(cg), lambda v: cg.preds[v]))
