"""Lifetimes and the live-bytes curve of an order: the single peak-memory oracle.

For an order of the ops (step ``i`` runs ``order[i]``), a storage produced at step ``s`` is
allocated just before step ``s`` runs and freed just after its last use at step ``e``: it is
live on the half-open interval ``[s, e + 1)``.  A storage that nobody uses is live on
``[s, s + 1)``; a graph output stays live until the end of the order.  While step ``i``
runs, its inputs and its outputs are live together.

Every byte figure rounds each storage up to the allocator granularity (512 B by default,
like PyTorch's caching allocator) and includes the resident bytes (storages that exist
before the step: parameters, buffers, the batch, optimizer state created earlier).  This
module is the one estimator every ordering method is scored with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.base.errors import GraphError
from roam_core.base.graph_cache import PerGraphCache
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, TensorId, round_size
from roam_core.model.positions import order_indices, program_index

__all__ = ["Lifetime", "MemoryProfile", "lifetimes", "simulate"]


@dataclass(frozen=True, slots=True)
class Lifetime:
    """Steps during which a storage is live: the half-open interval ``[start, end)``."""

    start: int
    end: int

    def overlaps(self, other: Lifetime) -> bool:
        """True when the two intervals share a step."""
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True, slots=True)
class MemoryProfile:
    """The memory curve of one order.

    Parameters
    ----------
    live_bytes : tuple of int
        Rounded bytes of planned (non-resident) storages live while each step runs.
    resident_bytes : int
        Rounded bytes live for the whole step (no producer).
    peak_bytes : int
        ``resident_bytes + max(live_bytes)`` (just ``resident_bytes`` for an empty order).
    peak_step : int
        First step where the peak is reached (``-1`` for an empty order).
    alignment_bytes : int
        The rounding granularity used.
    """

    live_bytes: tuple[int, ...]
    resident_bytes: int
    peak_bytes: int
    peak_step: int
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES

    def total_bytes(self) -> tuple[int, ...]:
        """Per-step bytes including the resident bytes."""
        return tuple(b + self.resident_bytes for b in self.live_bytes)


def _positions(graph: Graph, order: Sequence[OpId]) -> dict[OpId, int]:
    pos = {op: i for i, op in enumerate(order)}
    if len(pos) != len(order) or len(pos) != len(graph.ops):
        raise GraphError(
            f"order has {len(order)} entries ({len(pos)} distinct) for {len(graph.ops)} ops"
        )
    for op in graph.op_ids:
        if op not in pos:
            raise GraphError(f"order does not contain op {op!r}")
    return pos


def lifetimes(graph: Graph, order: Sequence[OpId]) -> dict[TensorId, Lifetime]:
    """Lifetime of every planned (non-resident) storage in ``order``.

    Parameters
    ----------
    graph : Graph
        The graph.
    order : sequence of OpId
        A permutation of the graph's ops (validity is not checked here).

    Returns
    -------
    dict
        ``TensorId -> Lifetime`` for each storage that has a producer.

    Raises
    ------
    GraphError
        If ``order`` is not a permutation of the graph's ops.

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> g = chain3()
    >>> lifetimes(g, g.op_ids)["a"]
    Lifetime(start=0, end=2)
    """
    sp = _spans(graph)
    s, e = _starts_ends(graph, order, sp)
    return dict(zip(sp.ids, map(Lifetime, s.tolist(), e.tolist()), strict=True))


def simulate(
    graph: Graph,
    order: Sequence[OpId] | None = None,
    *,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    lifetimes_override: Mapping[TensorId, Lifetime] | None = None,
) -> MemoryProfile:
    """Live bytes per step of ``order`` (program order when ``None``).

    Parameters
    ----------
    graph : Graph
        The graph.
    order : sequence of OpId, optional
        The order to simulate; defaults to program order (the eager baseline).
    alignment_bytes : int
        Each storage is rounded up to a multiple of this (512 like CUDA's allocator;
        1 for exact bytes).
    lifetimes_override : Mapping, optional
        Precomputed lifetimes for ``order`` (skip recomputing them).

    Returns
    -------
    MemoryProfile

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> p = simulate(diamond(), alignment_bytes=1)
    >>> p.live_bytes, p.peak_bytes, p.peak_step
    ((100, 300, 350, 260), 350, 2)
    """
    if order is None:
        order = graph.op_ids
    n = len(order)
    arr = _arrays(graph, alignment_bytes)
    if lifetimes_override is None:
        diff = _live_diff(graph, order, arr)
    else:
        diff = np.zeros(n + 1, dtype=np.int64)
        for tid, lt in lifetimes_override.items():
            size = round_size(graph.tensors[tid].size_bytes, alignment_bytes)
            if size:
                diff[lt.start] += size
                diff[lt.end] -= size
    live = np.cumsum(diff[:n]) if n else np.zeros(0, dtype=np.int64)
    resident = arr.resident_bytes
    if n:
        peak_step = int(np.argmax(live))
        peak = int(live[peak_step]) + resident
    else:
        peak_step, peak = -1, resident
    return MemoryProfile(
        live_bytes=tuple(live.tolist()),
        resident_bytes=resident,
        peak_bytes=peak,
        peak_step=peak_step,
        alignment_bytes=alignment_bytes,
    )


@dataclass(frozen=True, slots=True)
class _Spans:
    """Storages as arrays: ids, producer and consumers (CSR) by program index, output flag
    (for :func:`lifetimes` every produced storage, zero-size ones too)."""

    ids: tuple[TensorId, ...]
    producer: np.ndarray
    cons: np.ndarray
    cons_start: np.ndarray
    has_cons: np.ndarray
    is_output: np.ndarray


@dataclass(frozen=True, slots=True)
class _Arrays:
    """A graph's planned storages (non-zero rounded size) for :func:`simulate`: their spans
    arrays and rounded sizes."""

    spans: _Spans
    size: np.ndarray
    resident_bytes: int


def _same_storages(cached: object, graph: object) -> bool:
    """A copy with more control edges (``Graph.with_control_edges``) shares its original's
    ops and storages, so it shares the arrays built from them too."""
    return (isinstance(cached, Graph) and isinstance(graph, Graph)
            and cached.tensors is graph.tensors and cached.op_ids is graph.op_ids
            and cached.outputs == graph.outputs)


#: Per-graph arrays, for a few graphs at a time (the input and its rewritten copies).
_SPANS: PerGraphCache[_Spans] = PerGraphCache(max_entries=8, shares=_same_storages)
_ARRAYS: PerGraphCache[_Arrays] = PerGraphCache(max_entries=8, shares=_same_storages)


def _spans(graph: Graph) -> _Spans:
    def build() -> _Spans:
        index = program_index(graph)
        outputs = set(graph.outputs)
        ids: list[TensorId] = []
        prod: list[int] = []
        out: list[bool] = []
        cons: list[int] = []
        start: list[int] = []
        has: list[bool] = []
        for t in graph.tensors.values():
            if t.producer is None:
                continue
            ids.append(t.id)
            prod.append(index[t.producer])
            out.append(t.id in outputs)
            start.append(len(cons))
            has.append(bool(t.consumers))
            cons.extend(index[c] for c in t.consumers)
        return _Spans(tuple(ids), np.asarray(prod, dtype=np.int64), np.asarray(cons, np.int64),
                      np.asarray(start, dtype=np.int64), np.asarray(has, dtype=bool),
                      np.asarray(out, dtype=bool))

    return _SPANS.get_or_build(graph, build)


def _arrays(graph: Graph, alignment_bytes: int) -> _Arrays:
    def build() -> _Arrays:
        sp = _spans(graph)  # the planned storages: those of non-zero rounded size
        raw = np.fromiter((graph.tensors[t].size_bytes for t in sp.ids), np.int64,
                          len(sp.ids))
        al = max(1, alignment_bytes)
        size = np.where(raw > 0, -(-raw // al) * al, 0)  # round_size, vectorised
        keep = size > 0
        per = np.diff(np.append(sp.cons_start, len(sp.cons)))  # consumers per storage
        start = np.zeros(int(keep.sum()), np.int64)
        np.cumsum(per[keep][:-1], out=start[1:])
        kept = _Spans(tuple(t for t, k in zip(sp.ids, keep.tolist(), strict=True) if k),
                      sp.producer[keep], sp.cons[np.repeat(keep, per)], start,
                      sp.has_cons[keep], sp.is_output[keep])
        return _Arrays(kept, size[keep], graph.resident_bytes(alignment_bytes))

    return _ARRAYS.get_or_build(graph, build, alignment_bytes)


def _starts_ends(graph: Graph, order: Sequence[OpId], sp: _Spans,
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Live steps ``[start, end)`` in ``order`` of the storages of ``sp``: from the
    producer's step to past the last consumer's (at least one step; outputs to the end).
    Raises ``GraphError`` naming the problem when ``order`` is no permutation of the ops."""
    n = len(order)
    try:
        idx = order_indices(graph, order)  # shared with the checker
    except KeyError:
        _positions(graph, order)  # raises the GraphError that names the problem
        raise
    if n != len(graph.ops) or (n and np.bincount(idx, minlength=n).max() != 1):
        _positions(graph, order)
        raise GraphError(f"order is not a permutation of the graph's {len(graph.ops)} ops")
    pos = np.empty(n, dtype=np.int64)
    pos[idx] = np.arange(n)
    s = pos[sp.producer]
    e = s + 1
    if len(sp.cons):
        last = np.maximum.reduceat(pos[sp.cons], sp.cons_start[sp.has_cons])
        e[sp.has_cons] = np.maximum(last + 1, e[sp.has_cons])
    e[sp.is_output] = n
    return s, e


def _live_diff(graph: Graph, order: Sequence[OpId], arr: _Arrays) -> np.ndarray:
    """The difference array of the live bytes of ``order`` (the lifetimes of
    :func:`lifetimes`, vectorised)."""
    n = len(order)
    s, e = _starts_ends(graph, order, arr.spans)
    diff = np.zeros(n + 1, dtype=np.int64)
    np.add.at(diff, s, arr.size)
    np.add.at(diff, e, -arr.size)
    return diff
