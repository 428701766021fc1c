"""The greedy recomputation search as first written: a full simulation of the expanded graph
per drop set.  The test oracle of the indexed :class:`JitEvaluator` and
:class:`GreedyTrajectory`, which must give the same evaluations and the same trajectory."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from roam_core.model.graph import Graph, OpId, TensorId
from roam_core.model.recompute_ops import expand_graph, recompute_ops_for
from roam_core.oracle.simulate import lifetimes, simulate
from roam_core.recompute.evaluator import JitEvaluator, jit_order
from roam_core.recompute.greedy import TrajectoryPoint


def reference_evaluate(ev: JitEvaluator, dropped: Sequence[TensorId]) -> dict:
    """Order, peak, steps at the peak, costs, spans and live bytes of one drop set: the
    simulation of the expanded graph (what runs) in the just-in-time order."""
    g = ev.graph
    drop = tuple(dict.fromkeys(dropped))
    rops = recompute_ops_for(g, drop, ev.blockers) if drop else ()
    order = jit_order(ev.base, rops, g)
    pos = {o: i for i, o in enumerate(order)}
    g2 = expand_graph(g, rops, order=order)
    prof = simulate(g2, order, alignment_bytes=ev.align)
    lts = lifetimes(g2, order)
    spans = {t.id: (lts[t.id].start, lts[t.id].end) for t in g.tensors.values()
             if t.producer is not None and ev.size[t.id]}
    live = np.asarray(prof.live_bytes, dtype=np.int64)
    peak = int(live.max()) if len(live) else 0
    return {"dropped": drop, "recompute": tuple(rops), "order": order,
            "peak_bytes": peak + ev.resident, "peak_steps": int((live == peak).sum()),
            "extra_flops": sum(ev.flops[r.source] for r in rops),
            "extra_bytes": sum(ev.moved[r.source] for r in rops),
            "spans": spans, "live": live, "positions": pos}


def _closure(ev: JitEvaluator, s: TensorId, dset: set[TensorId], running: set[OpId],
             live_at: Callable[[TensorId], bool]
             ) -> tuple[list[OpId], list[TensorId], list[TensorId]]:
    g = ev.graph
    new: list[OpId] = []
    kept: list[TensorId] = []
    chain: list[TensorId] = []
    drop = dset | {s}
    stack = [g.tensors[s].producer]
    seen: set[OpId] = set()
    for r in ev.readers[s]:
        if r in ev.late:
            for v in g.op(r).inputs:
                if g.storage_of(v) == s:
                    p = g.value_producer(v)
                    if p is not None and p not in ev.late:
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
            elif t.producer is None or not ev.size[su]:
                continue
            elif not live_at(su) and ev.blockers[t.producer] is None and su not in ev.outputs:
                drop.add(su)
                chain.append(su)
                stack.append(g.value_producer(u))
            else:
                kept.append(su)
    return new, kept, chain


def _pinned_before(ev: JitEvaluator, new: Sequence[OpId], pos: dict[str, int], step: int,
                   drop: set[TensorId]) -> bool:
    g = ev.graph
    for o in new:
        src = pos[o]
        for u in g.op(o).inputs:
            if g.storage_of(u) in drop:
                continue
            for w in ev.writers.get(g.storage_of(u), ()):
                if src < pos[w] <= step:
                    return True
    return False


def reference_trajectory(graph: Graph, base_order: Sequence[OpId], *,
                         tries_per_step: int = 8
                         ) -> tuple[list[TensorId], list[TrajectoryPoint]]:
    """The whole greedy trajectory, every drop set re-simulated from scratch (scored by the
    evaluator's objective, the default)."""
    ev = JitEvaluator(graph, base_order)
    eps = ev.costs.epsilon
    dropped: list[TensorId] = []
    cur = reference_evaluate(ev, ())
    points = [TrajectoryPoint(0, cur["peak_bytes"], 0, 0)]
    cand_all = [s for s in ev.droppable if ev.size[s]]
    rejected: set[TensorId] = set()
    last_peak = cur["peak_bytes"]
    while True:
        if cur["peak_bytes"] != last_peak:
            rejected.clear()
            last_peak = cur["peak_bytes"]
        p = int(np.flatnonzero(cur["live"] == int(cur["live"].max()))[0])
        spans, pos = cur["spans"], cur["positions"]
        dset = set(dropped)
        running = {r.source for r in cur["recompute"]}
        scored = []

        def live_at(t: TensorId, p: int = p, spans: dict = spans) -> bool:
            a, b = spans[t]
            return a <= p < b

        for s in cand_all:
            if s in dset or s in rejected:
                continue
            a, b = spans[s]
            if not (a <= p < b):
                continue
            early = [pos[c] for c in ev.readers[s] if c not in ev.late]
            late = [pos[c] for c in ev.readers[s] if c in ev.late]
            if not late or max(early, default=a) >= p or min(late) <= p:
                continue
            new, kept, chain = _closure(ev, s, dset, running, live_at)
            if _pinned_before(ev, new, pos, p, dset | {s, *chain}):
                continue
            gain = ev.size[s] - sum(ev.size[k] for k in set(kept) if not live_at(k))
            if gain <= 0:
                continue
            cost = sum(ev.cost[o] for o in new)
            scored.append((gain / (cost + eps), s, tuple(chain)))
        scored.sort(key=lambda x: (-x[0], x[1]))
        if not scored:
            break
        for _, s, chain in scored[:tries_per_step]:
            nxt = reference_evaluate(ev, [*dropped, *chain, s])
            if (nxt["peak_bytes"], nxt["peak_steps"]) < (cur["peak_bytes"], cur["peak_steps"]):
                dropped.extend(chain)
                dropped.append(s)
                cur = nxt
                rops = cur["recompute"]
                points.append(TrajectoryPoint(len(dropped), cur["peak_bytes"],
                                              cur["extra_flops"], cur["extra_bytes"],
                                              sum(ev.cost[r.source] for r in rops),
                                              sum(ev.seconds[r.source] for r in rops)))
                break
            rejected.add(s)
    return dropped, points
