"""An integer-indexed view of a graph for list schedulers, and their shared state.

:class:`CompactGraph` renumbers ops (program order) and the planned storages that take
memory (non-resident, non-zero rounded size), with predecessor/successor lists and
producer/user lists as tuples of ints, so greedy schedulers run on plain lists and numpy
arrays.  :class:`ListState` is the bookkeeping one forward list-scheduling run needs:
readiness, and for every op the bytes it would allocate and free if it ran next (numpy arrays);
:class:`ScheduleState` is the same bookkeeping on plain lists, reporting what each step changes,
for schedulers that keep their ready ops in priority queues.

Derived data only: the :class:`~roam_core.model.graph.Graph` is never touched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from roam_core.base.errors import GraphError
from roam_core.base.graph_cache import PerGraphCache
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, Order, TensorId, round_size
from roam_core.model.positions import program_index, remember_indices
from roam_core.model.reach import adjacency

#: :meth:`CompactGraph.order_ids` remembers the indices of whole orders from this many ops
#: (below it looking them up is cheap, and sub-task orders would crowd the cache).
_REMEMBER_FROM = 4096

__all__ = ["CompactGraph", "ListState", "ScheduleState", "compact"]


@dataclass(frozen=True, slots=True)
class CompactGraph:
    """Integer-indexed view of a graph for list schedulers (derived data, never mutated).

    Op ``i`` is ``op_ids[i]`` (program order).  Only planned (non-resident) storages with a
    non-zero rounded size are kept: storage ``s`` is ``storage_ids[s]``.

    Parameters
    ----------
    op_ids : tuple of OpId
        Ops in program order.
    index : Mapping of OpId to int
        Program index of every op.
    preds, succs : tuple of tuple of int
        Ordering predecessors / successors (data and control edges) per op.
    storage_ids : tuple of TensorId
        Kept storages.
    size_bytes : tuple of int
        Rounded size per kept storage.
    producer : tuple of int
        Producing op per kept storage.
    users : tuple of tuple of int
        Ops (other than the producer) that read or write each kept storage.
    is_output : tuple of bool
        Storage is a graph output (live to the end).
    creates : tuple of tuple of int
        Kept storages each op allocates.
    uses : tuple of tuple of int
        Kept storages each op reads or writes without allocating them.
    """

    op_ids: tuple[OpId, ...]
    index: Mapping[OpId, int]
    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    storage_ids: tuple[TensorId, ...]
    size_bytes: tuple[int, ...]
    producer: tuple[int, ...]
    users: tuple[tuple[int, ...], ...]
    is_output: tuple[bool, ...]
    creates: tuple[tuple[int, ...], ...]
    uses: tuple[tuple[int, ...], ...]

    @property
    def n_ops(self) -> int:
        """Number of ops."""
        return len(self.op_ids)

    def defined_bytes(self) -> np.ndarray:
        """Bytes each op allocates (int64 array)."""
        out = np.zeros(self.n_ops, dtype=np.int64)
        if self.producer:  # storage s is created by producer[s] (``creates`` inverted)
            np.add.at(out, np.asarray(self.producer, dtype=np.int64),
                      np.asarray(self.size_bytes, dtype=np.int64))
        return out

    def order_ids(self, idx: Sequence[int] | np.ndarray) -> Order:
        """Op ids of a sequence of op indices (a whole large graph's order is remembered
        with its indices: the checker and the simulator do not look its ops up again)."""
        out = tuple(map(self.op_ids.__getitem__, idx))
        if len(out) >= _REMEMBER_FROM and len(out) == len(self.op_ids):
            remember_indices(self.op_ids, out, idx)
        return out

    def subgraph(self, keep: Sequence[int]) -> tuple[CompactGraph, list[int]]:
        """The induced sub-view on ops ``keep``; returns it and the new-to-old op map.

        Storages produced outside ``keep`` are dropped (treated as pre-existing); users
        outside ``keep`` are ignored, so a storage is freed after its last use inside.
        """
        old = list(keep)
        new_of = {v: i for i, v in enumerate(old)}
        preds = tuple(tuple(new_of[p] for p in self.preds[v] if p in new_of) for v in old)
        succs = tuple(tuple(new_of[s] for s in self.succs[v] if s in new_of) for v in old)
        sids: list[TensorId] = []
        sizes: list[int] = []
        prods: list[int] = []
        users: list[tuple[int, ...]] = []
        outs: list[bool] = []
        snew: dict[int, int] = {}
        for s, p in enumerate(self.producer):
            if p in new_of:
                snew[s] = len(sids)
                sids.append(self.storage_ids[s])
                sizes.append(self.size_bytes[s])
                prods.append(new_of[p])
                users.append(tuple(new_of[u] for u in self.users[s] if u in new_of))
                outs.append(self.is_output[s])
        creates = tuple(tuple(snew[s] for s in self.creates[v]) for v in old)
        uses = tuple(tuple(snew[s] for s in self.uses[v] if s in snew) for v in old)
        sub = CompactGraph(
            op_ids=tuple(self.op_ids[v] for v in old), index={self.op_ids[v]: i
                                                              for i, v in enumerate(old)},
            preds=preds, succs=succs, storage_ids=tuple(sids), size_bytes=tuple(sizes),
            producer=tuple(prods), users=tuple(users), is_output=tuple(outs),
            creates=creates, uses=uses)
        return sub, old


#: The compact views of the last few graphs, by alignment.
_CACHE: PerGraphCache[CompactGraph] = PerGraphCache(max_entries=16)


def compact(graph: Graph, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> CompactGraph:
    """The :class:`CompactGraph` of ``graph`` (cached per graph object).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> cg = compact(diamond(), alignment_bytes=1)
    >>> cg.preds[3], cg.size_bytes
    ((1, 2), (100, 200, 50, 10))
    """
    return _CACHE.get_or_build(graph, lambda: _compact(graph, alignment_bytes),
                               key=alignment_bytes)


def _compact(graph: Graph, alignment_bytes: int) -> CompactGraph:
    ids = graph.op_ids
    index = program_index(graph)  # shared, read-only
    adj = adjacency(graph)  # the same neighbour lists (cached: reachability reads them too)
    preds = tuple(map(tuple, adj.preds))
    succs = tuple(map(tuple, adj.succs))
    outputs = set(graph.outputs)
    sids: list[TensorId] = []
    sizes: list[int] = []
    prods: list[int] = []
    users: list[tuple[int, ...]] = []
    outs: list[bool] = []
    sidx: dict[str, int] = {}
    for t in graph.tensors.values():
        size = round_size(t.size_bytes, alignment_bytes)
        if t.producer is None or size == 0:
            continue
        sidx[t.id] = len(sids)
        sids.append(t.id)
        sizes.append(size)
        prods.append(index[t.producer])
        users.append(tuple(index[c] for c in t.consumers))
        outs.append(t.id in outputs)
    creates: list[list[int]] = [[] for _ in ids]
    uses: list[list[int]] = [[] for _ in ids]
    for s, p in enumerate(prods):
        creates[p].append(s)
        for u in users[s]:
            uses[u].append(s)
    return CompactGraph(
        op_ids=ids, index=index, preds=preds, succs=succs, storage_ids=tuple(sids),
        size_bytes=tuple(sizes), producer=tuple(prods), users=tuple(users),
        is_output=tuple(outs), creates=tuple(tuple(c) for c in creates),
        uses=tuple(tuple(u) for u in uses))


def _initial_frees(cg: CompactGraph) -> tuple[list[int], list[int]]:
    """Per op, the bytes its run frees before anything else is scheduled: storages it is the
    only user of (``last_free``) and outputs nobody reads (``dead_out``); graph outputs never."""
    last_free = [0] * cg.n_ops
    dead_out = [0] * cg.n_ops
    for s, us in enumerate(cg.users):
        if cg.is_output[s]:
            continue
        if not us:
            dead_out[cg.producer[s]] += cg.size_bytes[s]
        elif len(us) == 1:
            last_free[us[0]] += cg.size_bytes[s]
    return last_free, dead_out


class ListState:
    """Shared bookkeeping of a forward list scheduler (scratch state of one run).

    ``defined[v]``: bytes ``v`` allocates; ``last_free[v]``: bytes of inputs whose last
    remaining user is ``v``; ``dead_out[v]``: bytes of ``v``'s outputs nobody reads (freed at
    once).  ``ready`` is a boolean mask of schedulable ops and ``ready_idx`` the same set as a
    sorted int64 array, kept up to date incrementally, so a scheduler's step costs
    ``O(ready ops)`` instead of ``O(all ops)`` (a whole run stays near-linear on deep graphs).
    """

    def __init__(self, cg: CompactGraph) -> None:
        n = cg.n_ops
        self.cg = cg
        self.defined = cg.defined_bytes()
        self.remaining = [len(u) for u in cg.users]
        self.indeg = [len(p) for p in cg.preds]
        self.done = [False] * n
        self.ready = np.zeros(n, dtype=bool)
        for v in range(n):
            if self.indeg[v] == 0:
                self.ready[v] = True
        self.ready_idx = np.flatnonzero(self.ready).astype(np.int64)
        last_free, dead_out = _initial_frees(cg)
        self.last_free = np.asarray(last_free, dtype=np.int64)
        self.dead_out = np.asarray(dead_out, dtype=np.int64)
        self.order: list[int] = []
        self.newly_ready: list[int] = []

    def schedule(self, v: int) -> None:
        """Run ``v``: update readiness and the last-user frees."""
        cg = self.cg
        assert self.ready[v]
        assert not self.done[v]
        self.ready[v] = False
        self.done[v] = True
        self.order.append(v)
        self.newly_ready = []
        for s in cg.succs[v]:
            self.indeg[s] -= 1
            if self.indeg[s] == 0:
                self.ready[s] = True
                self.newly_ready.append(s)
        r = self.ready_idx  # plain slicing and concatenation: np.delete/np.insert cost more
        i = int(r.searchsorted(v))
        new = self.newly_ready
        if not new:
            self.ready_idx = np.concatenate((r[:i], r[i + 1:]))
        elif len(new) == 1:
            j = int(r.searchsorted(new[0]))
            if j <= i:
                self.ready_idx = np.concatenate((r[:j], new, r[j:i], r[i + 1:]))
            else:
                self.ready_idx = np.concatenate((r[:i], r[i + 1:j], new, r[j:]))
        else:
            rest = np.concatenate((r[:i], r[i + 1:], new))
            rest.sort()
            self.ready_idx = rest
        for s in cg.uses[v]:
            self.remaining[s] -= 1
            if self.remaining[s] == 1 and not cg.is_output[s]:
                for u in cg.users[s]:
                    if not self.done[u]:
                        self.last_free[u] += cg.size_bytes[s]
                        break

    def finish(self) -> list[int]:
        """The order; raises if some op never became ready (cannot happen on a DAG)."""
        if len(self.order) != self.cg.n_ops:
            raise GraphError(
                f"list scheduler stopped after {len(self.order)} of {self.cg.n_ops} ops")
        return self.order


class ScheduleState:
    """The bookkeeping of :class:`ListState` on plain Python lists, for priority-queue schedulers.

    ``last_free[v]``, ``dead_out[v]`` and ``defined[v]`` mean the same as in :class:`ListState`
    (same values, same updates).  Instead of a ready mask, :meth:`schedule` returns what the
    step changed: the ops that became ready and the not-yet-run ops whose ``last_free`` grew,
    so a scheduler updates only their keys (``O(changes)`` per step, not ``O(ready ops)``).
    """

    __slots__ = ("cg", "dead_out", "defined", "done", "indeg", "last_free", "order",
                 "remaining")

    def __init__(self, cg: CompactGraph) -> None:
        n = cg.n_ops
        self.cg = cg
        self.defined = cg.defined_bytes().tolist()
        self.remaining = [len(u) for u in cg.users]
        self.indeg = [len(p) for p in cg.preds]
        self.done = [False] * n
        self.last_free, self.dead_out = _initial_frees(cg)
        self.order: list[int] = []

    def initially_ready(self) -> list[int]:
        """Ops with no predecessor, ascending."""
        return [v for v, d in enumerate(self.indeg) if d == 0]

    def schedule(self, v: int) -> tuple[list[int], list[int]]:
        """Run ``v`` (it must be ready): returns (ops that became ready, in successor order;
        not-yet-run ops whose ``last_free`` grew, possibly repeated)."""
        cg = self.cg
        done = self.done
        assert not done[v]
        done[v] = True
        self.order.append(v)
        indeg = self.indeg
        new: list[int] = []
        for s in cg.succs[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                new.append(s)
        grew: list[int] = []
        remaining = self.remaining
        for s in cg.uses[v]:
            remaining[s] -= 1
            if remaining[s] == 1 and not cg.is_output[s]:
                for u in cg.users[s]:
                    if not done[u]:
                        self.last_free[u] += cg.size_bytes[s]
                        grew.append(u)
                        break
        return new, grew

    def finish(self) -> list[int]:
        """The order; raises if some op never became ready (cannot happen on a DAG)."""
        if len(self.order) != self.cg.n_ops:
            raise GraphError(
                f"list scheduler stopped after {len(self.order)} of {self.cg.n_ops} ops")
        return self.order
