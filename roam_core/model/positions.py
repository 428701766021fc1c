"""Program indices of a graph's ops, and of the ops of an order, computed once.

The planner checks an order and then simulates it, often the same tuple several times (a
baseline is checked, simulated, rescored; the chosen order is checked, simulated and
summarised): mapping 100k op ids to indices is a dict lookup per op that leaves the CPU
caches (about 17 ms an order at 100k ops, 34 orders a plan).  :func:`order_indices` maps each
tuple once; the checker and the simulator share the result.  Orders built from indices
(:meth:`~roam_core.model.dag_view.CompactGraph.order_ids`: the list schedulers, the update
insertion) are remembered with them (:func:`remember_indices`), and program order is
``0 .. N - 1``: those are never looked up.

The mapping is a pure function of the graph's op ids and the order's contents.  The program
index is kept per graph object (:class:`~roam_core.base.graph_cache.PerGraphCache`; copies made
by ``Graph.with_control_edges`` share their original's ``op_ids`` tuple, so its index too).
The orders' indices are kept per order *tuple*, which the cache holds (tuples are immutable,
cannot be weakly referenced, and holding them keeps their ``id`` from being reused); lists
are mapped every time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

import numpy as np

from roam_core.base.graph_cache import PerGraphCache
from roam_core.model.graph import Graph, OpId

__all__ = ["order_indices", "program_index", "remember_indices"]


def _same_op_ids(other: object, graph: object) -> bool:
    """Whether two graphs hold the very same ``op_ids`` tuple (a copy and its original)."""
    return (isinstance(other, Graph) and isinstance(graph, Graph)
            and other.op_ids is graph.op_ids)


#: The program index of the last few graphs (a graph with the very same ``op_ids`` tuple,
#: such as a ``Graph.with_control_edges`` copy, shares it).
_INDEX: PerGraphCache[dict[OpId, int]] = PerGraphCache(max_entries=4, shares=_same_op_ids)
#: ``(id(op_ids), id(order)) -> (op_ids, order, indices)``, most recent last.
_OrderCache = dict[tuple[int, int], tuple[tuple[OpId, ...], tuple[OpId, ...], np.ndarray]]
_ORDERS: _OrderCache = {}
_KEPT_ORDERS = 8


def program_index(graph: Graph) -> Mapping[OpId, int]:
    """``{op: i}`` for ``graph.op_ids``, computed once per graph and shared by its copies
    (read-only: it is shared).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> program_index(diamond())["c"]
    2
    """
    return _INDEX.get_or_build(graph, lambda: {op: i for i, op in enumerate(graph.op_ids)})


def order_indices(graph: Graph, order: Sequence[OpId]) -> np.ndarray:
    """The program index of every op of ``order``, in order (a read-only int64 array).

    Parameters
    ----------
    graph : Graph
        The graph whose program indices are meant.
    order : sequence of OpId
        Any ops of it (a tuple is mapped once and remembered; the last few are kept).

    Returns
    -------
    numpy.ndarray

    Raises
    ------
    KeyError
        An entry of ``order`` that is no op of ``graph`` (callers name it).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> order_indices(diamond(), ("a", "c", "b", "d")).tolist()
    [0, 2, 1, 3]
    """
    ids = graph.op_ids
    cacheable = type(order) is tuple
    key = (id(ids), id(order))
    if cacheable:
        hit = _ORDERS.get(key)
        if hit is not None and hit[0] is ids and hit[1] is order:
            return hit[2]
        if order is ids:  # program order
            return remember_indices(ids, order, range(len(ids)))
    index = program_index(graph)
    out = np.fromiter(map(index.__getitem__, order), np.int64, len(order))
    out.flags.writeable = False
    if cacheable:
        _trim(_ORDERS, _KEPT_ORDERS)
        _ORDERS[key] = (ids, cast("tuple[OpId, ...]", order), out)  # cacheable: a tuple
    return out


def remember_indices(ids: tuple[OpId, ...], order: tuple[OpId, ...],
                     indices: Sequence[int] | np.ndarray) -> np.ndarray:
    """Remember that ``order[i] is ids[indices[i]]`` (the caller built ``order`` from the
    indices, so :func:`order_indices` need not look each op up), and return the indices as
    :func:`order_indices` would.

    Parameters
    ----------
    ids : tuple of OpId
        A graph's ``op_ids`` (the entry is found through graphs with this very tuple).
    order : tuple of OpId
        ``tuple(ids[i] for i in indices)``.
    indices : sequence of int

    Returns
    -------
    numpy.ndarray
    """
    out = np.fromiter(indices, np.int64, len(order))
    out.flags.writeable = False
    _trim(_ORDERS, _KEPT_ORDERS)
    _ORDERS[(id(ids), id(order))] = (ids, order, out)
    return out


def _trim(cache: _OrderCache, kept: int) -> None:
    """Drop the oldest entries, leaving room for one more under ``kept`` (another thread
    may be trimming too)."""
    while len(cache) >= kept:
        try:
            del cache[next(iter(cache))]
        except (KeyError, RuntimeError, StopIteration):
            return
