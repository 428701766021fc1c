"""Which storages to drop: a greedy trajectory over a fixed base order, evaluated exactly.

For a set ``D`` of dropped storages, :func:`~roam_core.model.recompute_ops.recompute_ops_for`
gives the recompute ops, and each one is placed just before its first consumer in the base
order ("just in time").  :class:`JitEvaluator` computes the peak of that expanded order in
``O(n)`` without building a graph.

:func:`greedy_trajectory` starts from ``D = {}`` and repeatedly drops the storage with the
best *bytes removed at the peak step per unit of recompute cost* (FLOPs plus
``bytes_weight`` x bytes moved, so cheap elementwise re-runs are not free), taking the first
of the best-scored candidates whose exact evaluation lowers ``(peak, steps at the peak)``.
Every prefix of the trajectory is a plan, with a non-increasing peak and a non-decreasing
cost, so one run gives the whole frontier and a budget's answer is monotone in the budget.
:func:`prune` then re-admits dropped storages that the budget no longer needs (costliest
first).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from roam_core.model.graph import (
    DEFAULT_ALIGNMENT_BYTES,
    Graph,
    OpId,
    Phase,
    TensorId,
    round_size,
)
from roam_core.model.recompute_ops import (
    COPY_SUFFIX,
    LATE_PHASES,
    RecomputeOp,
    droppable_storages,
    late_read_index,
    op_bytes_moved,
    op_flops,
    recompute_blockers,
    recompute_ops_for,
)

__all__ = ["Evaluation", "GreedyTrajectory", "JitEvaluator", "KeepBound", "TrajectoryPoint",
           "greedy_trajectory", "hoist_views", "jit_order", "knee", "prune"]

#: Most storages one group move drops (besides its chain), see :class:`GreedyTrajectory`.
GROUP_MAX_STORAGES = 16


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The just-in-time expansion of one drop set.

    Parameters
    ----------
    dropped : tuple of TensorId
        The drop set.
    recompute : tuple of RecomputeOp
        Its recompute ops (inputs first).
    order : tuple of OpId
        The base order with each recompute op just before its first consumer.
    peak_bytes : int
        Simulated peak of ``order`` (resident bytes included).
    peak_steps : int
        Steps at the peak.
    extra_flops : int
        FLOPs of the recompute ops.
    extra_bytes : int
        Bytes they move.
    """

    dropped: tuple[TensorId, ...]
    recompute: tuple[RecomputeOp, ...]
    order: tuple[OpId, ...]
    peak_bytes: int
    peak_steps: int
    extra_flops: int
    extra_bytes: int
    #: ``[start, end)`` steps of every planned storage with bytes (originals only).
    spans: Mapping[TensorId, tuple[int, int]] | None = field(default=None, compare=False,
                                                              repr=False)
    #: Planned live bytes per step of ``order``.
    live: Any = field(default=None, compare=False, repr=False)
    #: Step of every graph op in ``order``.
    positions: Mapping[OpId, int] | None = field(default=None, compare=False, repr=False)

    def cost(self, bytes_weight: float) -> float:
        """The objective the planner minimises: FLOPs + ``bytes_weight`` x bytes moved."""
        return self.extra_flops + bytes_weight * self.extra_bytes


@dataclass(frozen=True, slots=True)
class TrajectoryPoint:
    """One prefix of the greedy trajectory: drop the first ``n_dropped`` storages."""

    n_dropped: int
    peak_bytes: int
    extra_flops: int
    extra_bytes: int


def jit_order(base: Sequence[OpId], rops: Sequence[RecomputeOp],
              graph: Graph | None = None) -> tuple[OpId, ...]:
    """``base`` with each recompute op just before its first consumer (inputs first).

    With ``graph``, a recompute op also runs before any in-place write of an input that
    follows its source (it must read the version the source read), e.g. the optimizer
    update of a weight whose gradient matmul was delayed past it.
    """
    pos = {o: i for i, o in enumerate(base)}
    n = len(base)
    made_by = {v: r.id for r in rops for v in r.outputs}
    first: dict[str, int] = {}
    writers: dict[str, list[OpId]] = {}
    if graph is not None:
        for op in graph.ops:
            for s in op.mutates:
                writers.setdefault(s, []).append(op.id)
    for r in rops:
        for reader in r.readers:
            first[r.id] = min(first.get(r.id, n), pos[reader])
        if graph is not None:
            for u in r.inputs:
                if u in made_by:
                    continue
                for w in writers.get(graph.storage_of(u), ()):
                    if pos[w] > pos[r.source]:
                        first[r.id] = min(first.get(r.id, n), pos[w])
    for r in reversed(rops):
        for u in r.inputs:
            p = made_by.get(u)
            if p is not None:
                first[p] = min(first.get(p, n), first.get(r.id, n))
    before: dict[int, list[OpId]] = {}
    for r in rops:
        before.setdefault(first.get(r.id, n), []).append(r.id)
    out: list[OpId] = []
    for i, o in enumerate(base):
        out.extend(before.get(i, ()))
        out.append(o)
    out.extend(before.get(n, ()))
    return tuple(out)


def hoist_views(graph: Graph, order: Sequence[OpId]) -> tuple[OpId, ...]:
    """``order`` with every forward view op moved right after its last predecessor.

    A view op (no new storage, no in-place write) only extends the lifetime of what it
    reads, so running it as early as its predecessors allow never raises any step's live
    bytes.  Orderers often delay a forward ``detach`` or ``view`` until its backward reader;
    once that reader reads a recomputed copy, the delayed view would keep the dropped
    storage alive.
    """
    early = {Phase.FORWARD, Phase.LOSS}
    key: dict[OpId, tuple[int, int]] = {}
    for i, o in enumerate(order):
        op = graph.op(o)
        if (op.phase in early and not op.mutates and op.outputs
                and not graph.storages_created(o)):
            preds = [key[p] for p in graph.predecessors(o) if p in key]
            k = max(preds, default=(-1, 0))
            key[o] = (k[0], k[1] + 1)
        else:
            key[o] = (i, 0)
    rank = {o: i for i, o in enumerate(order)}
    return tuple(sorted(order, key=lambda o: (key[o], rank[o])))


class _Spans(Mapping[TensorId, tuple[int, int]]):
    """``[start, end)`` steps of the planned storages of one evaluation, computed on demand
    from the expanded positions of the base order (no per-storage dict is built)."""

    __slots__ = ("_ends", "_epos", "_ev", "_n")

    def __init__(self, ev: JitEvaluator, epos: np.ndarray, n: int,
                 ends: dict[int, int]) -> None:
        self._ev, self._epos, self._n, self._ends = ev, epos, n, ends

    def __getitem__(self, tid: TensorId) -> tuple[int, int]:
        ev = self._ev
        i = ev._tix[tid]  # KeyError: not a planned storage with bytes
        s = int(self._epos[ev._bs[i]])
        if ev._out[i]:
            return s, self._n
        e = self._ends.get(i)
        if e is None:
            e = int(self._epos[ev._be[i]]) + 1
        return s, e

    def __iter__(self) -> Iterator[TensorId]:
        return iter(self._ev._tids)

    def __len__(self) -> int:
        return len(self._ev._tids)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Starts and ends of every planned storage, in :attr:`JitEvaluator.planned` order."""
        ev = self._ev
        start = self._epos[ev._bs]
        end = self._epos[ev._be_clip] + 1
        end[ev._out] = self._n
        for i, e in self._ends.items():
            end[i] = e
        return start, end


class _Positions(Mapping[OpId, int]):
    """Step of each graph op in an evaluation's order (recompute ops are not keys)."""

    __slots__ = ("_bpos", "epos")

    def __init__(self, bpos: Mapping[OpId, int], epos: np.ndarray) -> None:
        self._bpos = bpos
        #: step of each base-order position
        self.epos = epos

    def __getitem__(self, o: OpId) -> int:
        return int(self.epos[self._bpos[o]])

    def __iter__(self) -> Iterator[OpId]:
        return iter(self._bpos)

    def __len__(self) -> int:
        return len(self._bpos)


class JitEvaluator:
    """Fast peak of ``expand(graph, recompute_ops_for(D))`` in the just-in-time order.

    The live bytes of the base order are computed once; an evaluation maps them onto the
    expanded order (every base op moves by the number of recompute ops placed before it)
    and corrects only what the drop set changes: the dropped storages (they end at their
    last forward reader), the kept storages the re-runs read (they live until the last
    re-run reading them) and the copies.  The cost is ``O(n)`` numpy work plus Python
    work proportional to the re-runs, and the result equals a simulation of the expanded
    graph in that order.

    Parameters
    ----------
    graph : Graph
        The graph.
    base_order : sequence of OpId
        A valid order of ``graph`` (its forward views are hoisted, :func:`hoist_views`, and
        the recompute ops are inserted into it).
    alignment_bytes : int
        Allocator rounding.
    """

    def __init__(self, graph: Graph, base_order: Sequence[OpId],
                 alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> None:
        self.graph = graph
        self.base = hoist_views(graph, base_order)
        self.align = alignment_bytes
        self.blockers = recompute_blockers(graph)
        self.droppable = droppable_storages(graph, self.blockers)
        self.size = {t.id: round_size(t.size_bytes, alignment_bytes)
                     for t in graph.tensors.values()}
        self.resident = graph.resident_bytes(alignment_bytes)
        self.outputs = set(graph.outputs)
        self.late = {o.id for o in graph.ops if o.phase in LATE_PHASES}
        self.readers: dict[TensorId, list[OpId]] = {t: list(graph.tensors[t].consumers)
                                                    for t in graph.tensors}
        self.flops = {o.id: op_flops(graph, o) for o in graph.ops}
        self.moved = {o.id: op_bytes_moved(graph, o) for o in graph.ops}
        self.values = set(graph.tensors) | {a.id for a in graph.aliases}
        self.writers: dict[TensorId, list[OpId]] = {}
        for op in graph.ops:
            for s in op.mutates:
                self.writers.setdefault(s, []).append(op.id)
        self._late_reads = late_read_index(graph)
        self._tprod = {t.id: t.producer for t in graph.tensors.values()}
        self._lvp: dict[TensorId, tuple[OpId, ...]] = {}
        self._vprod: dict[str, OpId | None] = {v: graph.value_producer(v) for v in self.values}
        self._op_ins = {op.id: tuple((u, graph.storage_of(u)) for u in op.inputs)
                        for op in graph.ops}
        self._copy_outs = {op.id: tuple(v + COPY_SUFFIX for v in op.outputs)
                           for op in graph.ops}
        self._created = {op.id: tuple((s, self.size[s]) for s in graph.storages_created(op.id)
                                      if self.size[s]) for op in graph.ops}
        self._rop_cache: dict[RecomputeOp, tuple[int, tuple[OpId, ...], tuple[TensorId, ...],
                                                 tuple[int, ...]]] = {}
        #: the same facts by object identity (the object is kept to make the id safe)
        self._rop_by_id: dict[int, tuple[RecomputeOp, tuple[Any, ...]]] = {}
        #: (source, inputs, readers) -> the one RecomputeOp built for them
        self._rop_memo: dict[tuple[OpId, tuple[str, ...], tuple[OpId, ...]], RecomputeOp] = {}
        self._index()

    def _index(self) -> None:
        """Per-storage positions in the base order and its static live curves."""
        g, base = self.graph, self.base
        n0 = len(base)
        self._bpos: dict[OpId, int] = {o: i for i, o in enumerate(base)}
        bpos, late = self._bpos, self.late
        tids = [t.id for t in g.tensors.values() if t.producer is not None and self.size[t.id]]
        #: the planned storages with bytes, in graph order (the index of the arrays)
        self.planned: tuple[TensorId, ...] = tuple(tids)
        self._tids = self.planned
        self._tix = {t: i for i, t in enumerate(tids)}
        m = len(tids)
        bs = np.zeros(m, dtype=np.int64)
        be = np.zeros(m, dtype=np.int64)  # last reader (n0 for step outputs)
        be_early = np.zeros(m, dtype=np.int64)  # last forward reader (else the producer)
        first_late = np.full(m, -1, dtype=np.int64)
        last_early = np.full(m, -1, dtype=np.int64)
        last_late = np.full(m, -1, dtype=np.int64)
        out = np.zeros(m, dtype=bool)
        z = np.zeros(m, dtype=np.int64)
        for i, tid in enumerate(tids):
            t = g.tensors[tid]
            s = bpos[t.producer]  # type: ignore[index]
            early = [bpos[c] for c in self.readers[tid] if c not in late]
            lat = [bpos[c] for c in self.readers[tid] if c in late]
            bs[i] = s
            z[i] = self.size[tid]
            out[i] = tid in self.outputs
            be[i] = n0 if out[i] else max(early + lat, default=s)
            be_early[i] = max(early, default=s)
            if early:
                last_early[i] = max(early)
            if lat:
                first_late[i], last_late[i] = min(lat), max(lat)
        self._bs, self._be, self._out, self._z = bs, be, out, z
        self._be_clip = np.minimum(be, max(n0 - 1, 0))
        self._be_early, self._first_late = be_early, first_late
        self._last_early, self._last_late = last_early, last_late
        # live bytes at each base op (bs <= i <= be) and in each gap before base op f, where
        # recompute ops go (bs < f <= be); the step outputs live to the end
        d = np.zeros(n0 + 2, dtype=np.int64)
        np.add.at(d, bs, z)
        np.add.at(d, be + 1, -z)
        self._live_op = np.cumsum(d[:n0])
        d = np.zeros(n0 + 2, dtype=np.int64)
        np.add.at(d, bs + 1, z)
        np.add.at(d, be + 1, -z)
        self._live_gap = np.cumsum(d[:n0 + 1])
        self._base_writers: dict[TensorId, list[int]] = {
            s: [bpos[w] for w in ws] for s, ws in self.writers.items()}

    def _late_view_producers(self, s: TensorId) -> tuple[OpId, ...]:
        """Forward producers of the values of ``s`` that late ops read (views), cached."""
        out = self._lvp.get(s)
        if out is None:
            g, late = self.graph, self.late
            found: list[OpId] = []
            for r in self.readers[s]:
                if r in late:
                    for u, su in self._op_ins[r]:
                        if su == s:
                            p = g.value_producer(u)
                            if p is not None and p not in late:
                                found.append(p)
            out = self._lvp[s] = tuple(found)
        return out

    def recompute_ops(self, dropped: Sequence[TensorId]) -> tuple[RecomputeOp, ...]:
        """:func:`~roam_core.model.recompute_ops.recompute_ops_for` of ``dropped``, from
        indexes built once (the same ops in the same order; the same errors)."""
        g, blockers, late = self.graph, self.blockers, self.late
        drop = set(dropped)
        if any(s not in self._tix and (s not in g.tensors or g.tensors[s].producer is None)
               for s in drop):
            return recompute_ops_for(g, drop, blockers)  # raises the error
        vprod, op_ins = self._vprod, self._op_ins
        chosen: dict[OpId, None] = {}
        readers: dict[OpId, dict[OpId, None]] = {}

        def need(v: str, reader: OpId | None) -> bool:
            p = vprod.get(v)
            if reader is not None and p is not None and p in late:
                return True
            if p is None or blockers[p] is not None:
                return False
            if reader is not None:
                readers.setdefault(p, {})[reader] = None
            if p in chosen:
                return True
            for u, su in op_ins[p]:
                if su in drop and not need(u, None):
                    return False
            chosen[p] = None
            return True

        for _, _, v, op_id in sorted(r for s in drop for r in self._late_reads.get(s, ())):
            if not need(v, op_id):
                return recompute_ops_for(g, drop, blockers)  # raises the error
        out = []
        memo = self._rop_memo
        for p in chosen:
            ins = tuple(u + COPY_SUFFIX if su in drop else u for u, su in op_ins[p])
            key = (p, ins, tuple(readers.get(p, {})))
            r = memo.get(key)
            if r is None:  # one object per distinct re-run: its facts are cached by identity
                r = memo[key] = RecomputeOp(OpId(p + COPY_SUFFIX), p, ins, self._copy_outs[p],
                                            key[2])
            out.append(r)
        return tuple(out)

    def _rop_info(self, r: RecomputeOp) -> tuple[int, tuple[OpId, ...], tuple[TensorId, ...],
                                                  tuple[int, ...]]:
        """What an evaluation needs of one recompute op, cached: its own earliest slot (first
        reader, in-place writes of what it reads), the sources of the copies it reads, the
        original storages of those copies and the kept planned storages it reads."""
        hit = self._rop_by_id.get(id(r))
        if hit is not None and hit[0] is r:
            return hit[1]
        info = self._rop_cache.get(r)
        if info is None:
            g, bpos = self.graph, self._bpos
            f = len(self.base)
            for reader in r.readers:
                f = min(f, bpos[reader])
            src = bpos[r.source]
            copy_src: list[OpId] = []
            copy_of: list[TensorId] = []
            kept: list[int] = []
            for u in r.inputs:
                if u not in self.values:  # a copy made by another re-run
                    v0 = u[: -len(COPY_SUFFIX)]
                    copy_src.append(self._vprod[v0])  # type: ignore[arg-type]
                    copy_of.append(g.storage_of(v0))
                    continue
                su = g.storage_of(u)
                for w in self._base_writers.get(su, ()):
                    if w > src:
                        f = min(f, w)
                i = self._tix.get(su)
                if i is not None and not self._out[i]:
                    kept.append(i)
            info = (f, tuple(copy_src), tuple(copy_of), tuple(kept))
            self._rop_cache[r] = info
        self._rop_by_id[id(r)] = (r, info)
        return info

    def _slots(self, rops: Sequence[RecomputeOp], infos: Sequence[tuple[Any, ...]] | None = None
               ) -> list[int]:
        """Base position each recompute op runs before (:func:`jit_order`'s placement)."""
        if infos is None:
            infos = [self._rop_info(r) for r in rops]
        first = [i[0] for i in infos]
        by_source = {r.source: k for k, r in enumerate(rops)}
        for k in range(len(rops) - 1, -1, -1):
            for src in infos[k][1]:
                p = by_source.get(src)
                if p is not None and first[k] < first[p]:
                    first[p] = first[k]
        return first

    def evaluate(self, dropped: Iterable[TensorId]) -> Evaluation:
        """Recompute ops, order and peak of one drop set."""
        drop = tuple(dict.fromkeys(dropped))
        dset = set(drop)
        rops = self.recompute_ops(drop) if drop else ()
        base, n0 = self.base, len(self.base)
        infos = [self._rop_info(r) for r in rops]
        slots = self._slots(rops, infos)
        nr = len(rops)
        n = n0 + nr
        counts = np.bincount(np.asarray(slots, dtype=np.int64), minlength=n0 + 1) if nr \
            else np.zeros(n0 + 1, dtype=np.int64)
        cum = np.cumsum(counts)
        epos = np.arange(n0, dtype=np.int64) + cum[:n0]
        # recompute op k: after the base ops before its slot and the earlier ops of its slot
        seen: dict[int, int] = {}
        rpos: list[int] = []
        for f in slots:
            k = seen.get(f, 0)
            seen[f] = k + 1
            rpos.append(f + int(cum[f] - counts[f]) + k)
        order = _insert(base, rops, slots)
        live = np.empty(n, dtype=np.int64)
        live[epos] = self._live_op
        if nr:
            live[np.asarray(rpos, dtype=np.int64)] = self._live_gap[np.asarray(slots)]
        corr = np.zeros(n + 2, dtype=np.int64)
        ends: dict[int, int] = {}
        tix, z = self._tix, self._z
        for s in drop:  # a dropped storage ends after its last forward reader
            i = tix.get(s)
            if i is None:
                continue
            e = int(epos[self._be_early[i]]) + 1
            ends[i] = e
            corr[int(epos[self._be_clip[i]]) + 1] += z[i]
            corr[e] -= z[i]
        read_by: dict[int, int] = {}  # kept storage -> last re-run reading it
        copy_end: dict[TensorId, int] = {}
        for (_, _, copy_of, kept), here in zip(infos, rpos, strict=True):
            for cs in copy_of:
                if copy_end.get(cs, 0) < here:
                    copy_end[cs] = here
            for i in kept:
                if read_by.get(i, 0) < here:
                    read_by[i] = here
        for i, here in read_by.items():
            old = ends.get(i, int(epos[self._be_clip[i]]) + 1)
            if here + 1 > old:
                ends[i] = here + 1
                corr[old] += z[i]
                corr[here + 1] -= z[i]
        for r, here in zip(rops, rpos, strict=True):  # the copies
            for sid, size in self._created[r.source]:
                e = here
                if sid in dset:
                    i = tix[sid]
                    ll = int(self._last_late[i])
                    e = max(int(epos[ll]) if ll >= 0 else -1, copy_end.get(sid, here))
                corr[here] += size
                corr[e + 1] -= size
        live += np.cumsum(corr[:n])
        peak = int(live.max()) if n else 0
        steps = int((live == peak).sum()) if n else 0
        flops = sum(self.flops[r.source] for r in rops)
        moved = sum(self.moved[r.source] for r in rops)
        return Evaluation(drop, tuple(rops), order, peak + self.resident, steps, flops, moved,
                          _Spans(self, epos, n, ends), live, _Positions(self._bpos, epos))

    def keep_bound(self, current: Evaluation) -> KeepBound:
        """A :class:`KeepBound` of an evaluation (bounds of its drop set less one storage)."""
        return KeepBound(self, current)

    def live_curve(self, ev: Evaluation) -> np.ndarray:
        """Per-step planned bytes of an evaluation's order (originals only, for scoring)."""
        n = len(ev.order)
        assert isinstance(ev.spans, _Spans)
        start, end = ev.spans.arrays()
        d = np.zeros(n + 2, dtype=np.int64)
        np.add.at(d, start, self._z)
        np.add.at(d, end, -self._z)
        return np.cumsum(d[:n])


def _insert(base: Sequence[OpId], rops: Sequence[RecomputeOp], slots: Sequence[int]
            ) -> tuple[OpId, ...]:
    """``base`` with each recompute op before the base op of its slot (list order kept)."""
    if not rops:
        return tuple(base)
    by_slot: dict[int, list[OpId]] = {}
    for r, f in zip(rops, slots, strict=True):
        by_slot.setdefault(f, []).append(r.id)
    out: list[OpId] = []
    prev = 0
    for f in sorted(by_slot):
        out.extend(base[prev:f])
        out.extend(by_slot[f])
        prev = f
    out.extend(base[prev:])
    return tuple(out)


def _closure(ev: JitEvaluator, s: TensorId, dset: set[TensorId], running: set[OpId],
             live_at: Callable[[TensorId], bool]
             ) -> tuple[list[OpId], list[TensorId], list[TensorId]]:
    """What dropping ``s`` takes: ops newly re-run, kept storages they read, chain drops.

    An input of a re-run that is not live at the peak step anyway is itself rebuilt (a
    chain) when its producer may re-run, rather than kept alive across the peak.
    """
    new: list[OpId] = []
    kept: list[TensorId] = []
    chain: list[TensorId] = []
    drop = dset | {s}
    tprod, vprod, size, blockers, outputs = (ev._tprod, ev._vprod, ev.size, ev.blockers,
                                             ev.outputs)
    # views of s that forward ops made and late readers read are re-run too
    stack: list[OpId | None] = [tprod[s], *ev._late_view_producers(s)]
    seen: set[OpId] = set()
    while stack:
        p = stack.pop()
        if p is None or p in seen or p in running:
            continue
        seen.add(p)
        new.append(p)
        for u, su in ev._op_ins[p]:
            if su in drop:
                stack.append(vprod[u])
                continue
            tp = tprod[su]
            if tp is None or not size[su]:
                continue
            if not live_at(su) and blockers[tp] is None and su not in outputs:
                drop.add(su)
                chain.append(su)
                stack.append(vprod[u])
            else:
                kept.append(su)
    return new, kept, chain


def _pinned_before(ev: JitEvaluator, new: Sequence[OpId], pos: Mapping[str, int],
                   step: int, drop: set[TensorId] | frozenset[TensorId] = frozenset()
                   ) -> bool:
    """Whether a re-run of ``new`` must run at or before ``step``: it reads a storage that
    an in-place write after its source (at or before ``step``) overwrites.  Storages in
    ``drop`` are read through their copies (an in-place built mask: its writers re-run on
    the copy), never overwritten."""
    for o in new:
        src = -1
        for _, su in ev._op_ins[o]:
            if su in drop:
                continue
            ws = ev.writers.get(su)
            if not ws:
                continue
            if src < 0:
                src = pos[o]
            for w in ws:
                if src < pos[w] <= step:
                    return True
    return False


class GreedyTrajectory:
    """The greedy drop trajectory as a resumable computation (see :func:`greedy_trajectory`).

    :meth:`run` advances it until a peak is reached or no candidate lowers the peak any
    more; a later call goes on from where the previous one stopped, so one budget only
    pays for the prefix it needs and the frontier extends the same run.

    Parameters
    ----------
    graph, base_order, alignment_bytes, bytes_weight, tries_per_step, evaluator
        As for :func:`greedy_trajectory`.
    """

    def __init__(self, graph: Graph, base_order: Sequence[OpId], *,
                 alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES, bytes_weight: float = 1.0,
                 tries_per_step: int = 8, evaluator: JitEvaluator | None = None,
                 group_moves: bool = True, max_group: int = GROUP_MAX_STORAGES) -> None:
        self.evaluator = ev = evaluator or JitEvaluator(graph, base_order, alignment_bytes)
        self.bytes_weight = bytes_weight
        self.tries_per_step = tries_per_step
        #: also score group moves (:func:`_group_moves`); ``False``: one storage at a time
        self.group_moves = group_moves
        self.max_group = max_group
        self._rejected_groups: set[frozenset[TensorId]] = set()
        #: the drop sequence so far
        self.dropped: list[TensorId] = []
        self.current = ev.evaluate(())
        #: one point per prefix (the first is "drop nothing")
        self.points: list[TrajectoryPoint] = [
            TrajectoryPoint(0, self.current.peak_bytes, 0, 0)]
        #: True once no candidate lowers the peak
        self.finished = False
        self._rejected: set[TensorId] = set()
        self._last_peak = self.current.peak_bytes
        self._cand = [s for s in ev.droppable if ev.size[s]]
        ix = np.asarray([ev._tix[s] for s in self._cand], dtype=np.int64)
        self._ix = ix
        self._first_late = ev._first_late[ix]
        self._last_early = ev._last_early[ix]
        g = ev.graph
        self._producer: dict[TensorId, OpId] = {
            s: g.tensors[s].producer for s in self._cand}  # type: ignore[misc]
        #: storages no late op reads that a re-run may rebuild (forward intermediates):
        #: with group moves, one that re-runs hold across the peak is a candidate too
        self._held: list[TensorId] = []
        if group_moves:
            late, dr = ev.late, set(self._cand)
            self._held = [t for t in ev.planned if t not in dr and t not in ev.outputs
                          and ev.blockers[self._tp(t)] is None
                          and not any(r in late for r in ev.readers[t])]
            for t in self._held:
                self._producer[t] = self._tp(t)
        self._own_cost = {s: ev.flops[p] + bytes_weight * ev.moved[p]
                          for s, p in self._producer.items()}

    def _tp(self, t: TensorId) -> OpId:
        p = self.evaluator.graph.tensors[t].producer
        assert p is not None
        return p

    def run(self, stop_at_bytes: int | None = None, max_steps: int | None = None
            ) -> GreedyTrajectory:
        """Advance until the peak is at most ``stop_at_bytes``, ``max_steps`` drops are made
        or the trajectory ends; returns ``self``."""
        while not self.finished:
            if stop_at_bytes is not None and self.current.peak_bytes <= stop_at_bytes:
                break
            if max_steps is not None and len(self.dropped) >= max_steps:
                break
            self._step()
        return self

    def _candidates(self) -> list[TensorId]:
        """Droppable storages live across the first peak step, read before it in the
        forward and after it in a late phase (in droppable order)."""
        cur = self.current
        assert isinstance(cur.spans, _Spans)
        assert isinstance(cur.positions, _Positions)
        p = int(np.argmax(cur.live))
        epos = cur.positions.epos
        start, end = cur.spans.arrays()
        a, b = start[self._ix], end[self._ix]
        fl, le = self._first_late, self._last_early
        late_ok = (fl >= 0) & (epos[np.maximum(fl, 0)] > p)
        early_ok = np.where(le >= 0, epos[np.maximum(le, 0)] < p, a < p)
        keep = np.flatnonzero((a <= p) & (p < b) & late_ok & early_ok)
        return [self._cand[k] for k in keep]

    def _step(self) -> None:
        ev_self, cur, w = self.evaluator, self.current, self.bytes_weight
        if cur.peak_bytes != self._last_peak:
            self._rejected.clear()
            self._rejected_groups.clear()
            self._last_peak = cur.peak_bytes
        p = int(np.argmax(cur.live))
        spans = cur.spans
        pos = cur.positions
        dset = set(self.dropped)
        running = {r.source for r in cur.recompute}
        scored: list[tuple[float, TensorId, tuple[TensorId, ...]]] = []

        start, end = spans.arrays()  # type: ignore[attr-defined]
        live_here = {ev_self._tids[i] for i in np.flatnonzero((start <= p) & (p < end))}
        live_at = live_here.__contains__

        # A candidate's score is at most its size over its own producer's cost (the
        # re-runs always include the producer unless it already re-runs): candidates are
        # scored in that bound's order, stopping once no bound reaches the k-th best score,
        # so the k best are the same as when every candidate is scored.
        k = self.tries_per_step
        bounds: list[tuple[float, TensorId]] = []
        cands = self._candidates()
        if self._held:  # kept across the peak only for the re-runs that read them
            cands += [t for t in self._held if t in live_here and t not in dset]
        for s in cands:
            if s in dset or s in self._rejected:
                continue
            own = 0.0 if self._producer[s] in running else self._own_cost[s]
            bounds.append((-(ev_self.size[s] / (own + 1.0)), s))
        bounds.sort()
        top: list[float] = []  # the k best scores so far (a min-heap)
        for neg_ub, s in bounds:
            if len(top) >= k and -neg_ub < top[0]:
                break
            new, kept, chain = _closure(ev_self, s, dset, running, live_at)
            if _pinned_before(ev_self, new, pos, p, dset | {s, *chain}):
                continue  # a re-run would have to run before the peak: no gain
            penalty = sum(ev_self.size[t] for t in set(kept) if not live_at(t))
            gain = ev_self.size[s] - penalty
            if gain <= 0:
                continue
            cost = sum(ev_self.flops[o] + w * ev_self.moved[o] for o in new)
            score = gain / (cost + 1.0)
            scored.append((score, s, tuple(chain)))
            if len(top) < k:
                heapq.heappush(top, score)
            else:
                heapq.heappushpop(top, score)
        scored.sort(key=lambda x: (-x[0], x[1]))
        moves: list[tuple[float, str, tuple[TensorId, ...], tuple[TensorId, ...]]] = [
            (sc, s, chain, (s,)) for sc, s, chain in scored]
        if self.group_moves and (not scored or self._costs_flops(scored[0], dset, running,
                                                                 live_at)):
            groups = _group_moves(ev_self, [s for s in cands if s not in dset], dset,
                                  running, live_at, pos, p, w, self.max_group)
            moves += [(sc, min(m), chain, m) for sc, chain, m in groups
                      if frozenset(m) not in self._rejected_groups]
            moves.sort(key=lambda x: (-x[0], x[1], len(x[3])))
        if not moves:
            self.finished = True
            return
        for _, _, chain, members in moves[:self.tries_per_step]:
            nxt = ev_self.evaluate([*self.dropped, *chain, *members])
            if (nxt.peak_bytes, nxt.peak_steps) < (cur.peak_bytes, cur.peak_steps):
                self.dropped.extend(chain)
                self.dropped.extend(members)
                self.current = nxt
                self.points.append(TrajectoryPoint(len(self.dropped), nxt.peak_bytes,
                                                   nxt.extra_flops, nxt.extra_bytes))
                return
            if len(members) == 1:
                self._rejected.add(members[0])
            else:
                self._rejected_groups.add(frozenset(members))
        # when none of the tried candidates lowered the peak, the next step goes on with
        # the next best ones (the rejected are skipped until the peak changes)


    def _costs_flops(self, best: tuple[float, TensorId, tuple[TensorId, ...]],
                     dset: set[TensorId], running: set[OpId],
                     live_at: Callable[[TensorId], bool]) -> bool:
        """Whether the best single move re-runs an op that costs FLOPs (then group moves
        of cheaper storages are scored beside it)."""
        ev = self.evaluator
        new, _, _ = _closure(ev, best[1], dset, running, live_at)
        return any(ev.flops[o] > 0 for o in new)


def _group_moves(ev: JitEvaluator, cands: Sequence[TensorId], dset: set[TensorId],
                 running: set[OpId], live_at: Callable[[TensorId], bool],
                 pos: Mapping[OpId, int], step: int, bytes_weight: float, max_group: int
                 ) -> list[tuple[float, tuple[TensorId, ...], tuple[TensorId, ...]]]:
    """Drop sets that only pay off together: candidates whose re-runs need the same storage
    that is not live at the peak step.

    Dropping one storage may need an input that is not live at the peak anyway: the single
    move either holds it across the peak (no gain) or rebuilds it too (a chain, often a
    matmul).  GPT-2's dropout mask is rebuilt from the shape of the projection output, and
    so is the residual ``add`` after it: each alone frees 3 MiB and needs the projection's
    3 MiB output (or its ``addmm`` re-run).  Candidates that need the same such storage
    are joined (union-find over the storages they would hold or rebuild; at most
    ``max_group`` storages a group, the first in candidate order), and the group keeps each
    storage two or more members need (held once, not rebuilt), so together they free more
    than they hold, without the shared re-run.  A group is scored as one move -- bytes
    freed at the peak step less bytes held, per unit of the cost of the ops it re-runs
    (FLOPs + ``bytes_weight`` x bytes moved) -- beside the single moves, and evaluated
    exactly by the caller.

    Returns
    -------
    list of (score, chain, members)
        Groups of two or more members with a positive gain.
    """
    needs: dict[TensorId, set[TensorId]] = {}
    for s in cands:
        _, kept, chain = _closure(ev, s, dset, running, live_at)
        h = {t for t in kept if not live_at(t)} | set(chain)
        if h:
            needs[s] = h
    parent: dict[TensorId, TensorId] = {}

    def find(x: TensorId) -> TensorId:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    first_of: dict[TensorId, TensorId] = {}
    count: dict[TensorId, int] = {}
    for s, h in needs.items():
        for t in sorted(h):
            count[t] = count.get(t, 0) + 1
            a, b = find(s), find(first_of.setdefault(t, s))
            if a != b:
                parent[max(a, b)] = min(a, b)
    comps: dict[TensorId, list[TensorId]] = {}
    for s in needs:
        comps.setdefault(find(s), []).append(s)
    groups = [m[:max_group] for m in comps.values() if len(m) > 1]
    out: list[tuple[float, tuple[TensorId, ...], tuple[TensorId, ...]]] = []
    for members in groups:
        ms = set(members)
        shared = {t for t in set().union(*(needs.get(s, set()) for s in members))
                  if t not in ms and sum(t in needs.get(s, ()) for s in members) > 1}

        def live_or_shared(t: TensorId, shared: set[TensorId] = shared) -> bool:
            return t in shared or live_at(t)

        d = set(dset)
        run = set(running)
        new_all: list[OpId] = []
        kept_all: set[TensorId] = set()
        chain_all: list[TensorId] = []
        for s in members:
            new, kept, chain = _closure(ev, s, d, run, live_or_shared)
            d.add(s)
            d.update(chain)
            run.update(new)
            new_all += new
            kept_all.update(kept)
            chain_all += chain
        kept_all -= d
        if _pinned_before(ev, new_all, pos, step, d):
            continue
        gain = sum(ev.size[s] for s in members) - sum(
            ev.size[t] for t in kept_all if not live_at(t))
        if gain <= 0:
            continue
        cost = sum(ev.flops[o] + bytes_weight * ev.moved[o] for o in set(new_all))
        out.append((gain / (cost + 1.0), tuple(dict.fromkeys(chain_all)), tuple(members)))
    return out


def greedy_trajectory(
    graph: Graph,
    base_order: Sequence[OpId],
    *,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    bytes_weight: float = 1.0,
    stop_at_bytes: int | None = None,
    max_steps: int | None = None,
    tries_per_step: int = 8,
    evaluator: JitEvaluator | None = None,
    group_moves: bool = True,
) -> tuple[list[TensorId], list[TrajectoryPoint]]:
    """Drop storages one at a time, each time lowering the peak for the least cost.

    Parameters
    ----------
    graph : Graph
        The graph.
    base_order : sequence of OpId
        A valid order of ``graph`` (usually the planner's order without recomputation).
    alignment_bytes : int
        Allocator rounding.
    bytes_weight : float
        Cost of one byte moved, in FLOPs (0: FLOPs only).
    stop_at_bytes : int, optional
        Stop once the peak is at or below this.
    max_steps : int, optional
        Stop after this many drops.
    tries_per_step : int
        Best-scored candidates evaluated exactly per step.
    evaluator : JitEvaluator, optional
        Reuse an evaluator built for ``(graph, base_order)``.
    group_moves : bool
        When the best single move re-runs an op with FLOPs, also score groups of storages
        that only lower the peak together (they keep the same input alive; one move drops
        them all, :func:`_group_moves`).  ``False``: one storage at a time.

    Returns
    -------
    (list of TensorId, list of TrajectoryPoint)
        The drop sequence, and one point per prefix (the first is "drop nothing"; a group
        move adds one point for all its storages).
    """
    t = GreedyTrajectory(graph, base_order, alignment_bytes=alignment_bytes,
                         bytes_weight=bytes_weight, tries_per_step=tries_per_step,
                         evaluator=evaluator, group_moves=group_moves
                         ).run(stop_at_bytes, max_steps)
    return t.dropped, t.points


class KeepBound:
    """A lower bound on the just-in-time peak of a fitting drop set with one storage kept again.

    Keeping a dropped storage ``s`` again makes it live over its gap (after its last forward
    reader, up to its last reader) at every base op.  What can fall is only what the re-runs
    that rebuilt ``s`` add: the re-runs reached from ``s``'s late reads and, upstream, those
    whose copies they read (the set ``A``).  Their copies are live only from their slot on,
    and the kept storages they read are extended only after their own last reader, so at the
    base ops before the first of these nothing falls; after it, at most ``A``'s copies and
    kept inputs, in bytes, fall.  Every other storage keeps or lengthens its interval.  So at
    each base op ``q`` of the gap, the drop set's live bytes at ``q`` plus ``s``, less that
    amount after the first such op, bound the result from below.  :func:`prune` skips a trial
    whose bound is over the limit: its evaluation could only be rejected.

    Build it with :meth:`JitEvaluator.keep_bound` from the current drop set's evaluation.
    """

    __slots__ = ("_by_src", "_ev", "_infos", "_live", "_rops", "_slots")

    def __init__(self, ev: JitEvaluator, current: Evaluation) -> None:
        self._ev = ev
        rops = current.recompute
        self._rops = rops
        self._infos = [ev._rop_info(r) for r in rops]
        self._slots = ev._slots(rops, self._infos)
        self._by_src = {r.source: k for k, r in enumerate(rops)}
        assert isinstance(current.positions, _Positions)
        self._live = np.asarray(current.live)[current.positions.epos]

    def peak_with(self, s: TensorId) -> int:
        """The bound on the peak of the drop set with ``s`` kept again (resident included);
        0 when none is known."""
        ev = self._ev
        i = ev._tix.get(s)
        if i is None:
            return 0
        a, b, z = int(ev._be_early[i]) + 1, int(ev._be_clip[i]) + 1, int(ev._z[i])
        if a >= b:
            return 0
        by_src, infos = self._by_src, self._infos
        stack = [k for k in (by_src.get(ev._vprod.get(v)) for _, _, v, _ in
                             ev._late_reads.get(s, ())) if k is not None]
        seen: set[int] = set()
        q0 = len(self._live)
        fall = 0
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            r = self._rops[k]
            q0 = min(q0, self._slots[k])
            fall += sum(size for _, size in ev._created[r.source])
            for j in infos[k][3]:
                fall += int(ev._z[j])
                q0 = min(q0, int(ev._be_clip[j]) + 1)
            for src in infos[k][1]:
                u = by_src.get(src)
                if u is not None:
                    stack.append(u)
        live = self._live
        top = -(1 << 62)
        m = min(b, max(a, q0))
        if m > a:
            top = int(live[a:m].max()) + z
        if b > m:
            top = max(top, int(live[m:b].max()) + z - fall)
        return top + ev.resident


def prune(evaluator: JitEvaluator, dropped: Sequence[TensorId], limit_bytes: int,
          bytes_weight: float = 1.0) -> Evaluation:
    """Keep again every dropped storage the limit does not need (costliest re-run first).

    Returns the evaluation of the pruned drop set (its peak is ``<= limit_bytes`` when the
    input's was).
    """
    cur = list(dropped)
    best = evaluator.evaluate(cur)
    g = evaluator.graph

    def own_cost(s: TensorId) -> float:
        p = g.tensors[s].producer
        assert p is not None
        return evaluator.flops[p] + bytes_weight * evaluator.moved[p]

    allowed = max(limit_bytes, best.peak_bytes)  # never worse than the input
    bound: KeepBound | None = None
    for s in sorted(dropped, key=lambda s: (-own_cost(s), s)):
        if bound is None:
            bound = KeepBound(evaluator, best)
        if bound.peak_with(s) > allowed:
            continue  # keeping s again is over the limit whatever the re-runs do
        trial = [x for x in cur if x != s]
        ev = evaluator.evaluate(trial)
        if ev.peak_bytes <= allowed and ev.cost(bytes_weight) <= best.cost(bytes_weight):
            cur, best, bound = trial, ev, None
    return best


def knee(points: Sequence[TrajectoryPoint], bytes_weight: float = 1.0) -> TrajectoryPoint:
    """The frontier's knee: the point closest to (lowest peak, no cost), both normalised.

    Examples
    --------
    >>> pts = [TrajectoryPoint(0, 100, 0, 0), TrajectoryPoint(1, 60, 5, 0),
    ...        TrajectoryPoint(2, 50, 100, 0)]
    >>> knee(pts).n_dropped
    1
    """
    hi = max(p.peak_bytes for p in points)
    lo = min(p.peak_bytes for p in points)
    top = max(p.extra_flops + bytes_weight * p.extra_bytes for p in points) or 1.0

    def dist(p: TrajectoryPoint) -> float:
        x = (p.peak_bytes - lo) / (hi - lo) if hi > lo else 0.0
        y = (p.extra_flops + bytes_weight * p.extra_bytes) / top
        return x * x + y * y

    return min(points, key=lambda p: (dist(p), p.n_dropped))
