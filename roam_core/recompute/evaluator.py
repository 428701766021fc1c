"""The just-in-time evaluation of a drop set over a fixed base order, exact and fast.

For a set ``D`` of dropped storages, :func:`~roam_core.model.recompute_ops.recompute_ops_for`
gives the recompute ops, and each one is placed just before its first consumer in the base
order ("just in time", :func:`jit_order`).  :class:`JitEvaluator` computes the peak of that
expanded order in ``O(n)`` without building a graph; the greedy search
(:mod:`~roam_core.recompute.greedy`), the portfolio (:mod:`~roam_core.recompute.improve`)
and the exact windows (:mod:`~roam_core.recompute.windows`) all score drop sets with it.
What it indexes once is public and read-only (:attr:`JitEvaluator.index`,
:class:`~roam_core.recompute.base_order_index.BaseOrderIndex`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

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
from roam_core.recompute.base_order_index import BaseOrderIndex, RerunFacts, index_base_order
from roam_core.recompute.objective import RerunCosts, rerun_costs

__all__ = ["Evaluation", "EvaluationPositions", "EvaluationSpans", "JitEvaluator", "KeepBound",
           "hoist_views", "jit_order"]


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
    extra_cost : float
        Their cost in the planner's objective (:class:`~roam_core.recompute.objective.RerunCosts`:
        estimated seconds, or FLOPs + w x bytes); the searches minimise it.
    extra_seconds : float
        Their estimated seconds on the evaluator's device profile.
    """

    dropped: tuple[TensorId, ...]
    recompute: tuple[RecomputeOp, ...]
    order: tuple[OpId, ...]
    peak_bytes: int
    peak_steps: int
    extra_flops: int
    extra_bytes: int
    extra_cost: float = 0.0
    extra_seconds: float = 0.0
    #: ``[start, end)`` steps of every planned storage with bytes (originals only).
    spans: EvaluationSpans | None = field(default=None, compare=False, repr=False)
    #: Planned live bytes per step of ``order`` (resident excluded).
    live: np.ndarray | None = field(default=None, compare=False, repr=False)
    #: Step of every graph op in ``order``.
    positions: EvaluationPositions | None = field(default=None, compare=False, repr=False)


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


class EvaluationSpans(Mapping[TensorId, tuple[int, int]]):
    """``[start, end)`` steps of the planned storages of one evaluation, computed on demand
    from the expanded positions of the base order (no per-storage dict is built)."""

    __slots__ = ("_ends", "_epos", "_ix", "_n")

    def __init__(self, index: BaseOrderIndex, epos: np.ndarray, n: int,
                 ends: dict[int, int]) -> None:
        self._ix, self._epos, self._n, self._ends = index, epos, n, ends

    def __getitem__(self, tid: TensorId) -> tuple[int, int]:
        ix = self._ix
        i = ix.index_of[tid]  # KeyError: not a planned storage with bytes
        s = int(self._epos[ix.start_step[i]])
        if ix.is_output[i]:
            return s, self._n
        e = self._ends.get(i)
        if e is None:
            e = int(self._epos[ix.end_step[i]]) + 1
        return s, e

    def __iter__(self) -> Iterator[TensorId]:
        return iter(self._ix.planned)

    def __len__(self) -> int:
        return len(self._ix.planned)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Starts and ends of every planned storage, in :attr:`BaseOrderIndex.planned`
        order."""
        ix = self._ix
        start = self._epos[ix.start_step]
        end = self._epos[ix.end_step_clipped] + 1
        end[ix.is_output] = self._n
        for i, e in self._ends.items():
            end[i] = e
        return start, end


class EvaluationPositions(Mapping[OpId, int]):
    """Step of each graph op in an evaluation's order (recompute ops are not keys)."""

    __slots__ = ("_bpos", "base_steps")

    def __init__(self, bpos: Mapping[OpId, int], base_steps: np.ndarray) -> None:
        self._bpos = bpos
        #: step of each base-order position
        self.base_steps = base_steps

    def __getitem__(self, o: OpId) -> int:
        return int(self.base_steps[self._bpos[o]])

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
    costs : RerunCosts, optional
        What a re-run of each op costs (default: :func:`rerun_costs` of the default
        :class:`~roam_core.recompute.config.RecomputeConfig`, estimated time on the
        default device profile).

    Attributes
    ----------
    index : BaseOrderIndex
        What was indexed once (read-only).
    costs : RerunCosts
        The objective: :attr:`cost` per op in its unit, :attr:`seconds` per op.
    """

    def __init__(self, graph: Graph, base_order: Sequence[OpId],
                 alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
                 costs: RerunCosts | None = None) -> None:
        self.graph = graph
        self.costs = costs if costs is not None else rerun_costs(graph)
        #: the objective's cost of one re-run of each op
        self.cost: Mapping[OpId, float] = self.costs.cost
        #: estimated seconds of one re-run of each op
        self.seconds: Mapping[OpId, float] = self.costs.seconds
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
        self.index = index_base_order(graph, self.base, size=self.size, readers=self.readers,
                                      late=self.late, outputs=self.outputs,
                                      writers=self.writers, late_reads=late_read_index(graph))
        #: the planned storages with bytes, in graph order (the index of the arrays)
        self.planned: tuple[TensorId, ...] = self.index.planned
        self._lvp: dict[TensorId, tuple[OpId, ...]] = {}
        self._rop_cache: dict[RecomputeOp, RerunFacts] = {}
        #: the same facts by object identity (the object is kept to make the id safe)
        self._rop_by_id: dict[int, tuple[RecomputeOp, RerunFacts]] = {}
        #: (source, inputs, readers) -> the one RecomputeOp built for them
        self._rop_memo: dict[tuple[OpId, tuple[str, ...], tuple[OpId, ...]], RecomputeOp] = {}

    def late_view_producers(self, s: TensorId) -> tuple[OpId, ...]:
        """Forward producers of the values of ``s`` that late ops read (views), cached."""
        out = self._lvp.get(s)
        if out is None:
            g, late, op_ins = self.graph, self.late, self.index.op_inputs
            found: list[OpId] = []
            for r in self.readers[s]:
                if r in late:
                    for u, su in op_ins[r]:
                        if su == s:
                            p = g.value_producer(u)
                            if p is not None and p not in late:
                                found.append(p)
            out = self._lvp[s] = tuple(found)
        return out

    def recompute_ops(self, dropped: Sequence[TensorId]) -> tuple[RecomputeOp, ...]:
        """:func:`~roam_core.model.recompute_ops.recompute_ops_for` of ``dropped``, from
        indexes built once (the same ops in the same order; the same errors)."""
        g, blockers, late, ix = self.graph, self.blockers, self.late, self.index
        drop = set(dropped)
        if any(s not in ix.index_of and (s not in g.tensors or g.tensors[s].producer is None)
               for s in drop):
            return recompute_ops_for(g, drop, blockers)  # raises the error
        vprod, op_ins = ix.value_producer, ix.op_inputs
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

        for _, _, v, op_id in sorted(r for s in drop for r in ix.late_reads.get(s, ())):
            if not need(v, op_id):
                return recompute_ops_for(g, drop, blockers)  # raises the error
        out = []
        memo, copy_outs = self._rop_memo, ix.copy_outputs
        for p in chosen:
            ins = tuple(u + COPY_SUFFIX if su in drop else u for u, su in op_ins[p])
            key = (p, ins, tuple(readers.get(p, {})))
            r = memo.get(key)
            if r is None:  # one object per distinct re-run: its facts are cached by identity
                r = memo[key] = RecomputeOp(OpId(p + COPY_SUFFIX), p, ins, copy_outs[p],
                                            key[2])
            out.append(r)
        return tuple(out)

    def rerun_facts(self, r: RecomputeOp) -> RerunFacts:
        """What an evaluation needs of one recompute op, cached: its own earliest slot (first
        reader, in-place writes of what it reads), the sources of the copies it reads, the
        original storages of those copies and the kept planned storages it reads."""
        hit = self._rop_by_id.get(id(r))
        if hit is not None and hit[0] is r:
            return hit[1]
        info = self._rop_cache.get(r)
        if info is None:
            g, ix = self.graph, self.index
            bpos, index_of, is_output = ix.position, ix.index_of, ix.is_output
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
                    copy_src.append(ix.value_producer[v0])  # type: ignore[arg-type]  # copied: made
                    copy_of.append(g.storage_of(v0))
                    continue
                su = g.storage_of(u)
                for w in ix.writer_steps.get(su, ()):
                    if w > src:
                        f = min(f, w)
                i = index_of.get(su)
                if i is not None and not is_output[i]:
                    kept.append(i)
            info = RerunFacts(f, tuple(copy_src), tuple(copy_of), tuple(kept),
                              self._sibling_ends(r))
            self._rop_cache[r] = info
        self._rop_by_id[id(r)] = (r, info)
        return info

    def _sibling_ends(self, r: RecomputeOp) -> tuple[tuple[int, int, int], ...]:
        """:attr:`RerunFacts.sibling_ends` of ``r``: a reader of ``r`` reads every value of
        ``r``'s source through the copy (``expand_graph``), a kept one too, so the kept
        original then ends at its last other use and the copy lives to its last reader."""
        ix = self.index
        bpos, outs = ix.position, set(self.graph.op(r.source).outputs)
        out: list[tuple[int, int, int]] = []
        for sid, _ in ix.created_bytes[r.source]:
            i = ix.index_of.get(sid)
            if i is None or ix.is_output[i]:
                continue
            copy_end = -1
            moved: set[OpId] = set()
            for q in r.readers:
                vals = [u for u, su in ix.op_inputs[q] if su == sid]
                if any(u in outs for u in vals):
                    copy_end = max(copy_end, bpos[q])
                    if all(u in outs for u in vals) and q not in self.writers.get(sid, ()):
                        moved.add(q)
            if copy_end < 0:
                continue
            rest = [bpos[c] for c in self.readers[sid] if c not in moved]
            out.append((i, copy_end, max(rest, default=int(ix.start_step[i]))))
        return tuple(out)

    def slots(self, rops: Sequence[RecomputeOp], facts: Sequence[RerunFacts] | None = None
              ) -> list[int]:
        """Base position each recompute op runs before (:func:`jit_order`'s placement)."""
        if facts is None:
            facts = [self.rerun_facts(r) for r in rops]
        first = [i[0] for i in facts]
        by_source = {r.source: k for k, r in enumerate(rops)}
        for k in range(len(rops) - 1, -1, -1):
            for src in facts[k][1]:
                p = by_source.get(src)
                if p is not None and first[k] < first[p]:
                    first[p] = first[k]
        return first

    def evaluate(self, dropped: Iterable[TensorId]) -> Evaluation:
        """Recompute ops, order and peak of one drop set."""
        drop = tuple(dict.fromkeys(dropped))
        rops = self.recompute_ops(drop) if drop else ()
        infos = [self.rerun_facts(r) for r in rops]
        slots = self.slots(rops, infos)
        epos, rpos, n = _expanded_positions(len(self.base), slots)
        ix = self.index
        live = np.empty(n, dtype=np.int64)
        live[epos] = ix.live_at_op_bytes
        if rops:
            live[np.asarray(rpos, dtype=np.int64)] = ix.live_in_gap_bytes[np.asarray(slots)]
        corr, ends = self._corrections(drop, rops, infos, epos, rpos, n)
        live += np.cumsum(corr[:n])
        peak = int(live.max()) if n else 0
        steps = int((live == peak).sum()) if n else 0
        flops = sum(self.flops[r.source] for r in rops)
        moved = sum(self.moved[r.source] for r in rops)
        cost = sum(self.cost[r.source] for r in rops)
        secs = sum(self.seconds[r.source] for r in rops)
        return Evaluation(drop, tuple(rops), _insert(self.base, rops, slots),
                          peak + self.resident, steps, flops, moved, cost, secs,
                          EvaluationSpans(ix, epos, n, ends), live,
                          EvaluationPositions(ix.position, epos))

    def _corrections(self, drop: tuple[TensorId, ...], rops: Sequence[RecomputeOp],
                     infos: Sequence[RerunFacts], epos: np.ndarray, rpos: Sequence[int],
                     n: int) -> tuple[np.ndarray, dict[int, int]]:
        """The difference array of what a drop set changes in the base order's live bytes
        (mapped onto the expanded order), and the new ends of the planned storages it
        shortens or lengthens (by index)."""
        ix = self.index
        index_of, z = ix.index_of, ix.size_bytes
        early_end, end_clip = ix.early_end_step, ix.end_step_clipped
        corr = np.zeros(n + 2, dtype=np.int64)
        ends: dict[int, int] = {}
        for s in drop:  # a dropped storage ends after its last forward reader
            i = index_of.get(s)
            if i is None:
                continue
            e = int(epos[early_end[i]]) + 1
            ends[i] = e
            corr[int(epos[end_clip[i]]) + 1] += z[i]
            corr[e] -= z[i]
        dset = set(drop)
        sib_copy_end: dict[int, int] = {}  # kept sibling (index) -> its copy's last reader
        for info in infos:  # kept siblings: the original ends at its last other use
            for i, q_end, orig_end in info.sibling_ends:
                if ix.planned[i] in dset:
                    continue
                sib_copy_end[i] = int(epos[q_end]) + 1
                old, new = int(epos[end_clip[i]]) + 1, int(epos[orig_end]) + 1
                if new < old:
                    ends[i] = new
                    corr[new] -= z[i]
                    corr[old] += z[i]
        read_by: dict[int, int] = {}  # kept storage -> last re-run reading it
        copy_end: dict[TensorId, int] = {}
        for (_, _, copy_of, kept, _), here in zip(infos, rpos, strict=True):
            for cs in copy_of:
                if copy_end.get(cs, 0) < here:
                    copy_end[cs] = here
            for i in kept:
                if read_by.get(i, 0) < here:
                    read_by[i] = here
        for i, here in read_by.items():
            old = ends.get(i, int(epos[end_clip[i]]) + 1)
            if here + 1 > old:
                ends[i] = here + 1
                corr[old] += z[i]
                corr[here + 1] -= z[i]
        created, last_late = ix.created_bytes, ix.last_late_step
        for r, here in zip(rops, rpos, strict=True):  # the copies
            for sid, size in created[r.source]:
                e = here
                if sid in dset:
                    ll = int(last_late[index_of[sid]])
                    e = max(int(epos[ll]) if ll >= 0 else -1, copy_end.get(sid, here))
                elif sid in index_of and index_of[sid] in sib_copy_end:
                    e = max(here, sib_copy_end[index_of[sid]] - 1)
                corr[here] += size
                corr[e + 1] -= size
        return corr, ends

    def producer_cost(self, s: TensorId) -> float:
        """The objective's cost of re-running the producer of storage ``s`` once (0 for a
        resident storage)."""
        p = self.index.tensor_producer[s]
        return 0.0 if p is None else self.cost[p]

    def keep_bound(self, current: Evaluation) -> KeepBound:
        """A :class:`KeepBound` of an evaluation (bounds of its drop set less one storage)."""
        return KeepBound(self, current)


def _expanded_positions(n0: int, slots: Sequence[int]
                        ) -> tuple[np.ndarray, list[int], int]:
    """Where the base ops and the recompute ops land in the expanded order: the step of
    each base position, of each recompute op, and the expanded length.  Recompute op ``k``
    runs after the base ops before its slot and the earlier recompute ops of its slot."""
    nr = len(slots)
    counts = np.bincount(np.asarray(slots, dtype=np.int64), minlength=n0 + 1) if nr \
        else np.zeros(n0 + 1, dtype=np.int64)
    cum = np.cumsum(counts)
    epos = np.arange(n0, dtype=np.int64) + cum[:n0]
    seen: dict[int, int] = {}
    rpos: list[int] = []
    for f in slots:
        k = seen.get(f, 0)
        seen[f] = k + 1
        rpos.append(f + int(cum[f] - counts[f]) + k)
    return epos, rpos, n0 + nr


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
    amount after the first such op, bound the result from below.
    :func:`~roam_core.recompute.greedy.prune` skips a trial whose bound is over the limit:
    its evaluation could only be rejected.

    Build it with :meth:`JitEvaluator.keep_bound` from the current drop set's evaluation.
    """

    __slots__ = ("_by_src", "_dropped", "_ev", "_infos", "_live", "_rops", "_slots")

    def __init__(self, ev: JitEvaluator, current: Evaluation) -> None:
        self._ev = ev
        rops = current.recompute
        self._rops = rops
        self._infos = [ev.rerun_facts(r) for r in rops]
        self._slots = ev.slots(rops, self._infos)
        self._by_src = {r.source: k for k, r in enumerate(rops)}
        self._dropped = current.dropped
        assert current.positions is not None
        assert current.live is not None
        self._live = np.asarray(current.live)[current.positions.base_steps]

    def peak_with(self, s: TensorId) -> int:
        """The bound on the peak of the drop set with ``s`` kept again (resident included);
        0 when none is known."""
        ev = self._ev
        ix = ev.index
        i = ix.index_of.get(s)
        if i is None:
            return 0
        a, b = int(ix.early_end_step[i]) + 1, int(ix.end_step_clipped[i]) + 1
        z = int(ix.size_bytes[i])
        if a >= b:
            return 0
        src = ix.value_producer.get(s)
        if src is not None and any(d != s and ix.value_producer.get(d) == src
                                   for d in self._dropped):
            # another output of s's source stays dropped: its re-run stays, and s kept
            # again is a kept sibling whose original may end before its gap does
            # (RerunFacts.sibling_ends), so "live over the whole gap" is no bound
            return 0
        q0, fall = self._falls(s)
        live = self._live
        top = -(1 << 62)
        m = min(b, max(a, q0))
        if m > a:
            top = int(live[a:m].max()) + z
        if b > m:
            top = max(top, int(live[m:b].max()) + z - fall)
        return top + ev.resident

    def _falls(self, s: TensorId) -> tuple[int, int]:
        """The first base step at which keeping ``s`` again may lower anything, and the most
        bytes it may lower there (the copies and kept inputs of the re-runs it reaches)."""
        ix = self._ev.index
        by_src, infos = self._by_src, self._infos
        stack = [k for k in (by_src.get(ix.value_producer.get(v))  # type: ignore[arg-type]  # None: no entry
                             for _, _, v, _ in ix.late_reads.get(s, ())) if k is not None]
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
            fall += sum(size for _, size in ix.created_bytes[r.source])
            for j in infos[k].kept_inputs:
                fall += int(ix.size_bytes[j])
                q0 = min(q0, int(ix.end_step_clipped[j]) + 1)
            for src in infos[k].copy_sources:
                u = by_src.get(src)
                if u is not None:
                    stack.append(u)
        return q0, fall
