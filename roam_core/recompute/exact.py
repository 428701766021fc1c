"""Exact recomputation planning on small graphs: drop decisions and the order in one CP-SAT model.

The plan space is the planner's: each storage made by a re-runnable op may be dropped
(``d_s``); each re-runnable op may be re-run once (``run_p``); late readers of a dropped
storage read its copy; a re-run reads dropped inputs through their copies (chains) and kept
ones as they are; re-runs see the same version of in-place-written inputs as the original.
Every op and potential re-run gets a distinct step (``pos``, ``AllDifferent``; an idle
re-run just occupies a step), liveness is time-indexed (``before[o, t] = pos_o <= t``), and
the live bytes of every step, copies included, must fit ``budget - resident``.  The
objective is the re-run cost ``sum cost_p run_p`` (FLOPs + ``bytes_weight`` x bytes
moved), so an optimal solution is the cheapest plan that fits, over *all* orders.

It is the test oracle of the scalable planner (Checkmate, arXiv 1910.02653, solves the same
problem with a MILP over stages; this model is closer to Moccasin's CP-SAT formulation,
arXiv 2304.14463).  Sizes of about 30 ops solve in seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from roam_core.base.cpsat import make_solver, status_name
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, TensorId, round_size
from roam_core.model.recompute_ops import (
    LATE_PHASES,
    RecomputeOp,
    expand_graph,
    op_bytes_moved,
    op_flops,
    recompute_blockers,
    recompute_ops_for,
)
from roam_core.oracle.simulate import simulate

__all__ = ["ExactResult", "exact_recompute"]


@dataclass(frozen=True, slots=True)
class ExactResult:
    """The optimum of :func:`exact_recompute`.

    Parameters
    ----------
    status : str
        ``"optimal"``, ``"feasible"`` (time limit), ``"infeasible"`` or ``"unknown"``.
    cost : float or None
        The objective (re-run cost) of the best plan found.
    best_bound : float or None
        CP-SAT's proven lower bound on the cost.
    extra_flops : int
        FLOPs of the decoded plan's re-runs.
    dropped : tuple of TensorId
        The dropped storages.
    recompute : tuple of RecomputeOp
        Their recompute ops.
    order : tuple of OpId
        The order (graph ops and recompute ops).
    peak_bytes : int
        Simulated peak of the decoded plan (resident included).
    wall_time_s : float
        Solve seconds.
    """

    status: str
    cost: float | None
    best_bound: float | None
    extra_flops: int
    dropped: tuple[TensorId, ...]
    recompute: tuple[RecomputeOp, ...]
    order: tuple[OpId, ...]
    peak_bytes: int
    wall_time_s: float


def exact_recompute(graph: Graph, budget_bytes: int, *,
                    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES, bytes_weight: float = 1.0,
                    time_limit_s: float = 60.0, max_ops: int = 60) -> ExactResult:
    """The cheapest recomputation plan (over all orders) whose peak fits ``budget_bytes``.

    Parameters
    ----------
    graph : Graph
        A small graph (at most ``max_ops`` ops).
    budget_bytes : int
        Peak limit, resident bytes included.
    alignment_bytes : int
        Allocator rounding.
    bytes_weight : float
        Cost of one byte moved, in FLOPs.
    time_limit_s : float
        CP-SAT deterministic-time limit.
    max_ops : int
        Refuse larger graphs (the model is time-indexed: quadratic in the op count).

    Raises
    ------
    ValueError
        The graph has more than ``max_ops`` ops.
    """
    if len(graph.ops) > max_ops:
        raise ValueError(f"exact_recompute: {len(graph.ops)} ops > max_ops={max_ops}")
    t0 = time.perf_counter()
    g = graph
    why = dict(recompute_blockers(g))
    # in-place built storages (CPU dropout masks) are kept here: the model does not follow
    # in-place writes into copies (the greedy planner rebuilds them as chains)
    written = {s for o in g.ops for s in o.mutates}
    for o in g.ops:
        if why[o.id] is None and (o.mutates or written & set(g.storages_created(o.id))):
            why[o.id] = "builds a storage in place (not modelled by the exact planner)"
    rec = [o.id for o in g.ops if why[o.id] is None]
    late = {o.id for o in g.ops if o.phase in LATE_PHASES}
    size = {t.id: round_size(t.size_bytes, alignment_bytes) for t in g.tensors.values()}
    outputs = set(g.outputs)
    cand = {s for p in rec for s in g.storages_created(p) if size[s] and s not in outputs}
    m = cp_model.CpModel()
    rid = {p: f"{p}#R" for p in rec}
    every = [*g.op_ids, *rid.values()]
    T = len(every)
    pos = {o: m.NewIntVar(0, T - 1, f"pos[{o}]") for o in every}
    m.AddAllDifferent(list(pos.values()))
    before: dict[str, list[cp_model.IntVar]] = {}
    for o in every:
        bs = [m.NewBoolVar(f"b[{o},{t}]") for t in range(T)]
        for t in range(T):
            m.Add(pos[o] <= t).OnlyEnforceIf(bs[t])
            m.Add(pos[o] >= t + 1).OnlyEnforceIf(bs[t].Not())
        before[o] = bs
    d = {s: m.NewBoolVar(f"d[{s}]") for s in sorted(cand)}
    run = {p: m.NewBoolVar(f"run[{p}]") for p in rec}
    zero = m.NewConstant(0)
    one = m.NewConstant(1)

    def b(o: str, t: int) -> cp_model.IntVar:
        return zero if t < 0 else before[o][t]

    def both(x: cp_model.IntVar, y: cp_model.IntVar, name: str) -> cp_model.IntVar:
        z = m.NewBoolVar(name)
        m.AddBoolAnd([x, y]).OnlyEnforceIf(z)
        m.AddBoolOr([x.Not(), y.Not()]).OnlyEnforceIf(z.Not())
        return z

    for src, dst, _ in g.edges():
        m.Add(pos[src] < pos[dst])
    pos0 = {o: i for i, o in enumerate(g.op_ids)}
    writers: dict[TensorId, list[OpId]] = {}
    for op in g.ops:
        for s in op.mutates:
            writers.setdefault(s, []).append(op.id)
    # late readers of a dropped storage read its copy, made by re-running the value's maker
    copy_reads: dict[TensorId, list[tuple[str, cp_model.IntVar]]] = {}  # s -> (reader, cond)
    orig_reads: dict[TensorId, list[tuple[str, cp_model.IntVar]]] = {}
    for op in g.ops:
        for s in g.storages_read(op.id):
            if g.tensors[s].producer is None or g.tensors[s].producer == op.id:
                continue
            if op.id in late and s in d:
                orig_reads.setdefault(s, []).append((op.id, d[s].Not()))
                copy_reads.setdefault(s, []).append((op.id, d[s]))
            else:
                orig_reads.setdefault(s, []).append((op.id, one))
        if op.id not in late:
            continue
        for v in op.inputs:
            s = g.storage_of(v)
            if s not in d:
                continue
            q = g.value_producer(v)
            if q is None or q in late:
                continue
            if q not in run:
                m.Add(d[s] == 0)
                continue
            m.AddImplication(d[s], run[q])
            m.Add(pos[rid[q]] < pos[op.id]).OnlyEnforceIf(d[s])
    for p in rec:
        if g.op(p).random:  # a re-run replays the state its source drew at: after it
            m.Add(pos[p] < pos[rid[p]]).OnlyEnforceIf(run[p])
        for u in g.op(p).inputs:
            su = g.storage_of(u)
            q = g.value_producer(u)
            if su in d:
                c = both(run[p], d[su], f"chain[{p},{u}]")
                if q is None or q not in run:
                    m.Add(c == 0)
                else:
                    m.AddImplication(c, run[q])
                    m.Add(pos[rid[q]] < pos[rid[p]]).OnlyEnforceIf(c)
                    copy_reads.setdefault(su, []).append((rid[p], c))
                k = both(run[p], d[su].Not(), f"keep[{p},{u}]")
                if q is not None:
                    m.Add(pos[q] < pos[rid[p]]).OnlyEnforceIf(k)
                if g.tensors[su].producer is not None:
                    orig_reads.setdefault(su, []).append((rid[p], k))
            else:
                if q is not None:
                    m.Add(pos[q] < pos[rid[p]]).OnlyEnforceIf(run[p])
                if g.tensors[su].producer is not None:
                    orig_reads.setdefault(su, []).append((rid[p], run[p]))
            for w in writers.get(su, ()):
                if pos0[w] < pos0[p]:
                    m.Add(pos[w] < pos[rid[p]]).OnlyEnforceIf(run[p])
                else:
                    m.Add(pos[rid[p]] < pos[w]).OnlyEnforceIf(run[p])
    # liveness and memory
    resident = g.resident_bytes(alignment_bytes)
    limit = budget_bytes - resident
    mem: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(T)]

    def span(name: str, maker: str, active: cp_model.IntVar | None,
             reads: list[tuple[str, cp_model.IntVar]], forever: bool, sz: int) -> None:
        for t in range(T):
            lv = m.NewBoolVar(f"live[{name},{t}]")
            own = [b(maker, t), b(maker, t - 1).Not()]
            if active is not None:
                own.append(active)
            m.AddBoolOr([x.Not() for x in own] + [lv])
            if forever:
                m.AddBoolOr([b(maker, t).Not(), lv])
            for r, cond in reads:  # made by t, read at or after t
                m.AddBoolOr([b(maker, t).Not(), b(r, t - 1), cond.Not(), lv])
            mem[t].append((sz, lv))

    for t_ in g.tensors.values():
        if t_.producer is None or not size[t_.id]:
            continue
        span(t_.id, t_.producer, None, orig_reads.get(t_.id, []), t_.id in outputs,
             size[t_.id])
    for p in rec:
        for s in g.storages_created(p):
            if size[s]:
                span(f"{s}'", rid[p], run[p], copy_reads.get(s, []), False, size[s])
    for t in range(T):
        m.Add(sum(sz * lv for sz, lv in mem[t]) <= max(limit, 0))
    cost = {p: int(op_flops(g, g.op(p)) + bytes_weight * op_bytes_moved(g, g.op(p)))
            for p in rec}
    m.Minimize(sum(cost[p] * run[p] for p in rec))
    # hint: program order, nothing re-run
    for i, o in enumerate(g.op_ids):
        m.AddHint(pos[o], i)
    for j, p in enumerate(rec):
        m.AddHint(pos[rid[p]], len(g.op_ids) + j)
        m.AddHint(run[p], 0)
    solver = make_solver(time_limit_s=time_limit_s)
    st = solver.Solve(m)
    name = status_name(st)
    wall = time.perf_counter() - t0
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return ExactResult(name, None, None, 0, (), (), (), 0, wall)
    dropped = tuple(s for s in sorted(d) if solver.Value(d[s]))
    rops = recompute_ops_for(g, dropped, why)
    keep = {r.source for r in rops}
    chosen = list(g.op_ids) + [rid[p] for p in rec if p in keep]
    chosen.sort(key=lambda o: solver.Value(pos[o]))
    back = {v: k for k, v in rid.items()}
    order = tuple(OpId(back[o] + "@r") if o in back else OpId(o) for o in chosen)
    g2 = expand_graph(g, rops)
    peak = simulate(g2, order, alignment_bytes=alignment_bytes).peak_bytes
    flops = sum(op_flops(g, g.op(r.source)) for r in rops)
    real_cost = sum(cost[r.source] for r in rops)
    return ExactResult(name, float(real_cost), float(solver.BestObjectiveBound()), flops,
                       dropped, rops, order, peak, wall)
