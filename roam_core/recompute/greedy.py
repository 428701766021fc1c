"""Which storages to drop: a greedy trajectory over a fixed base order, evaluated exactly.

For a set ``D`` of dropped storages, :func:`~roam_core.model.recompute.recompute_ops_for`
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

from collections.abc import Callable, Iterable, Mapping, Sequence
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
from roam_core.model.recompute import (
    COPY_SUFFIX,
    LATE_PHASES,
    RecomputeOp,
    droppable_storages,
    op_bytes_moved,
    op_flops,
    recompute_blockers,
    recompute_ops_for,
)

__all__ = ["Evaluation", "JitEvaluator", "TrajectoryPoint", "greedy_trajectory",
           "hoist_views", "jit_order", "knee", "prune"]


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


class JitEvaluator:
    """Fast peak of ``expand(graph, recompute_ops_for(D))`` in the just-in-time order.

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

    def evaluate(self, dropped: Iterable[TensorId]) -> Evaluation:
        """Recompute ops, order and peak of one drop set."""
        g = self.graph
        drop = tuple(dict.fromkeys(dropped))
        dset = set(drop)
        rops = recompute_ops_for(g, drop, self.blockers) if drop else ()
        order = jit_order(self.base, rops, g)
        pos = {o: i for i, o in enumerate(order)}
        n = len(order)
        diff = np.zeros(n + 2, dtype=np.int64)
        spans: dict[TensorId, tuple[int, int]] = {}
        extra_reads: dict[TensorId, list[int]] = {}  # storage -> steps of re-runs reading it
        copy_end: dict[str, int] = {}
        for r in rops:
            here = pos[r.id]
            for u in r.inputs:
                if u not in self.values:  # a copy made by another re-run
                    cs = _copy_storage(g, u)
                    copy_end[cs] = max(copy_end.get(cs, 0), here)
                else:
                    extra_reads.setdefault(g.storage_of(u), []).append(here)
        for t in g.tensors.values():
            if t.producer is None or not self.size[t.id]:
                continue
            s = pos[t.producer]
            if t.id in self.outputs:
                e = n
            else:
                dropped_here = t.id in dset
                ends = [pos[c] for c in self.readers[t.id]
                        if not (dropped_here and c in self.late)]
                ends.extend(extra_reads.get(t.id, ()))
                e = max(ends, default=s) + 1
            diff[s] += self.size[t.id]
            diff[max(e, s + 1)] -= self.size[t.id]
            spans[t.id] = (s, max(e, s + 1))
        for r in rops:  # the copies
            here = pos[r.id]
            for sid in g.storages_created(r.source):
                size = self.size[sid]
                if not size:
                    continue
                e = here
                if sid in dset:
                    e = max([pos[c] for c in self.readers[sid] if c in self.late]
                            + [copy_end.get(sid, here)])
                diff[here] += size
                diff[e + 1] -= size
        live = np.cumsum(diff[:n])
        peak = int(live.max()) if n else 0
        steps = int((live == peak).sum()) if n else 0
        flops = sum(self.flops[r.source] for r in rops)
        moved = sum(self.moved[r.source] for r in rops)
        return Evaluation(drop, tuple(rops), order, peak + self.resident, steps, flops, moved,
                          spans, live)

    def live_curve(self, ev: Evaluation) -> np.ndarray:
        """Per-step planned bytes of an evaluation's order (for candidate scoring)."""
        return _curve(self, ev)


def _copy_storage(g: Graph, copy_value: str) -> TensorId:
    """The original storage whose copy a recompute-op output value names."""
    return g.storage_of(copy_value[: -len(COPY_SUFFIX)])


def _spans(ev_self: JitEvaluator, ev: Evaluation) -> dict[TensorId, tuple[int, int]]:
    g = ev_self.graph
    pos = {o: i for i, o in enumerate(ev.order)}
    n = len(ev.order)
    dset = set(ev.dropped)
    extra: dict[TensorId, list[int]] = {}
    for r in ev.recompute:
        for u in r.inputs:
            if u in ev_self.values:
                extra.setdefault(g.storage_of(u), []).append(pos[r.id])
    out: dict[TensorId, tuple[int, int]] = {}
    for t in g.tensors.values():
        if t.producer is None:
            continue
        s = pos[t.producer]
        if t.id in ev_self.outputs:
            out[t.id] = (s, n)
            continue
        ends = [pos[c] for c in ev_self.readers[t.id]
                if not (t.id in dset and c in ev_self.late)]
        ends.extend(extra.get(t.id, ()))
        out[t.id] = (s, max(ends, default=s) + 1)
    return out


def _curve(ev_self: JitEvaluator, ev: Evaluation) -> np.ndarray:
    n = len(ev.order)
    diff = np.zeros(n + 2, dtype=np.int64)
    for tid, (s, e) in _spans(ev_self, ev).items():
        diff[s] += ev_self.size[tid]
        diff[e] -= ev_self.size[tid]
    return np.cumsum(diff[:n])


def _closure(ev_self: JitEvaluator, s: TensorId, dset: set[TensorId], running: set[OpId],
             live_at: Callable[[TensorId], bool]
             ) -> tuple[list[OpId], list[TensorId], list[TensorId]]:
    """What dropping ``s`` takes: ops newly re-run, kept storages they read, chain drops.

    An input of a re-run that is not live at the peak step anyway is itself rebuilt (a
    chain) when its producer may re-run, rather than kept alive across the peak.
    """
    g = ev_self.graph
    new: list[OpId] = []
    kept: list[TensorId] = []
    chain: list[TensorId] = []
    drop = dset | {s}
    stack = [g.tensors[s].producer]
    seen: set[OpId] = set()
    # views of s that forward ops made and late readers read are re-run too
    for r in ev_self.readers[s]:
        if r in ev_self.late:
            for v in g.op(r).inputs:
                if g.storage_of(v) == s:
                    p = g.value_producer(v)
                    if p is not None and p not in ev_self.late:
                        stack.append(p)
    while stack:
        p = stack.pop()
        if p is None or p in seen or p in running:
            continue
        seen.add(p)
        new.append(p)
        for u in g.op(p).inputs:
            su = g.storage_of(u)
            t = g.tensors[su]
            if su in drop:
                stack.append(g.value_producer(u))
            elif t.producer is None or not ev_self.size[su]:
                continue
            elif (not live_at(su) and ev_self.blockers[t.producer] is None
                  and su not in ev_self.outputs):
                drop.add(su)
                chain.append(su)
                stack.append(g.value_producer(u))
            else:
                kept.append(su)
    return new, kept, chain


def _pinned_before(ev_self: JitEvaluator, new: Sequence[OpId], pos: dict[str, int],
                   step: int, drop: set[TensorId] | frozenset[TensorId] = frozenset()
                   ) -> bool:
    """Whether a re-run of ``new`` must run at or before ``step``: it reads a storage that
    an in-place write after its source (at or before ``step``) overwrites.  Storages in
    ``drop`` are read through their copies (an in-place built mask: its writers re-run on
    the copy), never overwritten."""
    g = ev_self.graph
    for o in new:
        src = pos[o]
        for u in g.op(o).inputs:
            if g.storage_of(u) in drop:
                continue
            for w in ev_self.writers.get(g.storage_of(u), ()):
                if src < pos[w] <= step:
                    return True
    return False


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

    Returns
    -------
    (list of TensorId, list of TrajectoryPoint)
        The drop sequence, and one point per prefix (the first is "drop nothing").
    """
    ev_self = evaluator or JitEvaluator(graph, base_order, alignment_bytes)
    dropped: list[TensorId] = []
    cur = ev_self.evaluate(())
    points = [TrajectoryPoint(0, cur.peak_bytes, 0, 0)]
    cand_all = [s for s in ev_self.droppable if ev_self.size[s]]
    rejected: set[TensorId] = set()
    last_peak = cur.peak_bytes
    while True:
        if stop_at_bytes is not None and cur.peak_bytes <= stop_at_bytes:
            break
        if max_steps is not None and len(dropped) >= max_steps:
            break
        if cur.peak_bytes != last_peak:
            rejected.clear()
            last_peak = cur.peak_bytes
        curve = cur.live
        peak_live = int(curve.max())
        peak_steps = np.flatnonzero(curve == peak_live)
        spans = cur.spans
        pos = {o: i for i, o in enumerate(cur.order)}
        dset = set(dropped)
        running = {r.source for r in cur.recompute}
        scored: list[tuple[float, TensorId, tuple[TensorId, ...]]] = []
        for p in peak_steps[:1]:
            p = int(p)
            for s in cand_all:
                if s in dset or s in rejected:
                    continue
                a, b = spans[s]
                if not (a <= p < b):
                    continue
                early = [pos[c] for c in ev_self.readers[s] if c not in ev_self.late]
                late = [pos[c] for c in ev_self.readers[s] if c in ev_self.late]
                if not late or max(early, default=a) >= p or min(late) <= p:
                    continue
                def live_at(t: TensorId, p: int = p, spans: dict = spans) -> bool:
                    a, b = spans[t]
                    return a <= p < b

                new, kept, chain = _closure(ev_self, s, dset, running, live_at)
                if _pinned_before(ev_self, new, pos, p, dset | {s, *chain}):
                    continue  # a re-run would have to run before the peak: no gain
                penalty = sum(ev_self.size[k] for k in set(kept) if not live_at(k))
                gain = ev_self.size[s] - penalty
                if gain <= 0:
                    continue
                cost = sum(ev_self.flops[o] + bytes_weight * ev_self.moved[o] for o in new)
                scored.append((gain / (cost + 1.0), s, tuple(chain)))
        scored.sort(key=lambda x: (-x[0], x[1]))
        if not scored:
            break
        for _, s, chain in scored[:tries_per_step]:
            nxt = ev_self.evaluate([*dropped, *chain, s])
            if (nxt.peak_bytes, nxt.peak_steps) < (cur.peak_bytes, cur.peak_steps):
                dropped.extend(chain)
                dropped.append(s)
                cur = nxt
                points.append(TrajectoryPoint(len(dropped), cur.peak_bytes, cur.extra_flops,
                                              cur.extra_bytes))
                break
            rejected.add(s)
        # when none of the tried candidates lowered the peak, the loop goes on with the
        # next best ones (the rejected are skipped until the peak changes)
    return dropped, points


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
    for s in sorted(dropped, key=lambda s: (-own_cost(s), s)):
        trial = [x for x in cur if x != s]
        ev = evaluator.evaluate(trial)
        if ev.peak_bytes <= allowed and ev.cost(bytes_weight) <= best.cost(bytes_weight):
            cur, best = trial, ev
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
