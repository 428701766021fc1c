"""Exact recomputation planning on small graphs: drop decisions and the order in one CP-SAT model.

The plan space is the planner's: each storage made by a re-runnable op may be dropped
(``d_s``); each re-runnable op may be re-run once (``run_p``); late readers of a dropped
storage read its copy; a re-run reads dropped inputs through their copies (chains) and kept
ones as they are; re-runs see the same version of in-place-written inputs as the original.
Every op and potential re-run gets a distinct step (``pos``, ``AllDifferent``; an idle
re-run just occupies a step), liveness is time-indexed (``before[o, t] = pos_o <= t``), and
the live bytes of every step, copies included, must fit ``budget - resident``.  The
objective is the re-run cost ``sum cost_p run_p`` (:mod:`roam_core.recompute.objective`:
estimated seconds on a device profile by default, as integer nanoseconds), so an optimal
solution is the cheapest plan that fits, over *all* orders.

It is the test oracle of the scalable planner (Checkmate, arXiv 1910.02653, solves the same
problem with a MILP over stages; this model is closer to Moccasin's CP-SAT formulation,
arXiv 2304.14463).  Sizes of about 30 ops solve in seconds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from ortools.sat.python import cp_model

from roam_core.base.checks import require_type
from roam_core.base.cpsat import make_solver, solve_with_stop
from roam_core.base.errors import ConfigError
from roam_core.base.status import SolveStatus
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, TensorId, round_size
from roam_core.model.recompute_ops import (
    LATE_PHASES,
    RecomputeOp,
    expand_graph,
    op_flops,
    recompute_blockers,
    recompute_ops_for,
)
from roam_core.oracle.simulate import simulate
from roam_core.recompute.objective import RerunCosts, rerun_costs

__all__ = ["ExactResult", "ExactVariables", "exact_recompute"]


@dataclass(frozen=True, slots=True)
class ExactResult:
    """The optimum of :func:`exact_recompute`.

    Parameters
    ----------
    status : str
        ``"optimal"``, ``"feasible"`` (time limit), ``"infeasible"`` or ``"unknown"``.
    cost : float or None
        The objective (re-run cost, in the objective's unit) of the best plan found.
    best_bound : float or None
        CP-SAT's proven lower bound on the cost (same unit).
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
    extra_seconds : float
        Estimated seconds of the decoded plan's re-runs (the objective's device profile).
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
    extra_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class _Facts:
    """What the model needs of the graph (no CP-SAT objects)."""

    graph: Graph
    #: why each op may not be re-run (``None``: it may)
    why: Mapping[OpId, str | None]
    #: the re-runnable ops, in graph order
    rec: tuple[OpId, ...]
    late: frozenset[OpId]
    size: Mapping[TensorId, int]
    outputs: frozenset[TensorId]
    #: the storages that may be dropped
    cand: frozenset[TensorId]
    #: id of each re-runnable op's potential re-run
    rid: Mapping[OpId, str]
    #: every op and potential re-run (one step each)
    every: tuple[str, ...]
    writers: Mapping[TensorId, list[OpId]]


def _facts(g: Graph, alignment_bytes: int) -> _Facts:
    why = dict(recompute_blockers(g))
    # in-place built storages (CPU dropout masks) are kept here: the model does not follow
    # in-place writes into copies (the greedy planner rebuilds them as chains)
    written = {s for o in g.ops for s in o.mutates}
    for o in g.ops:
        if why[o.id] is None and (o.mutates or written & set(g.storages_created(o.id))):
            why[o.id] = "builds a storage in place (not modelled by the exact planner)"
    rec = tuple(o.id for o in g.ops if why[o.id] is None)
    size = {t.id: round_size(t.size_bytes, alignment_bytes) for t in g.tensors.values()}
    outputs = frozenset(g.outputs)
    rid = {p: f"{p}#R" for p in rec}
    writers: dict[TensorId, list[OpId]] = {}
    for op in g.ops:
        for s in op.mutates:
            writers.setdefault(s, []).append(op.id)
    return _Facts(
        g, why, rec, frozenset(o.id for o in g.ops if o.phase in LATE_PHASES), size, outputs,
        frozenset(s for p in rec for s in g.storages_created(p) if size[s] and s not in outputs),
        rid, (*g.op_ids, *rid.values()), writers)


@dataclass(frozen=True, slots=True)
class ExactVariables:
    """The variables of the exact model.

    Attributes
    ----------
    pos : dict of str to cp_model.IntVar
        Step of every op and potential re-run (all different).
    before : dict of str to list of cp_model.IntVar
        ``before[o][t]``: ``pos[o] <= t``.
    drop : dict of TensorId to cp_model.IntVar
        ``d_s``: storage ``s`` is dropped.
    run : dict of OpId to cp_model.IntVar
        ``run_p``: op ``p`` is re-run.
    zero, one : cp_model.IntVar
        The constant literals.
    """

    pos: dict[str, cp_model.IntVar]
    before: dict[str, list[cp_model.IntVar]]
    drop: dict[TensorId, cp_model.IntVar]
    run: dict[OpId, cp_model.IntVar]
    zero: cp_model.IntVar
    one: cp_model.IntVar

    def b(self, o: str, t: int) -> cp_model.IntVar:
        """``pos[o] <= t`` (false before step 0)."""
        return self.zero if t < 0 else self.before[o][t]


#: ``storage -> [(reader, condition)]``: who reads a storage (or its copy), and when.
_Reads = dict[TensorId, list[tuple[str, cp_model.BoolVarT]]]


def _variables(m: cp_model.CpModel, f: _Facts) -> ExactVariables:
    T = len(f.every)
    pos = {o: m.new_int_var(0, T - 1, f"pos[{o}]") for o in f.every}
    m.add_all_different(list(pos.values()))
    before: dict[str, list[cp_model.IntVar]] = {}
    for o in f.every:
        bs = [m.new_bool_var(f"b[{o},{t}]") for t in range(T)]
        for t in range(T):
            m.add(pos[o] <= t).only_enforce_if(bs[t])
            m.add(pos[o] >= t + 1).only_enforce_if(bs[t].negated())
        before[o] = bs
    d = {s: m.new_bool_var(f"d[{s}]") for s in sorted(f.cand)}
    run = {p: m.new_bool_var(f"run[{p}]") for p in f.rec}
    return ExactVariables(pos, before, d, run, m.new_constant(0), m.new_constant(1))


def _both(m: cp_model.CpModel, x: cp_model.BoolVarT, y: cp_model.BoolVarT, name: str
          ) -> cp_model.IntVar:
    z = m.new_bool_var(name)
    m.add_bool_and([x, y]).only_enforce_if(z)
    m.add_bool_or([x.negated(), y.negated()]).only_enforce_if(z.negated())
    return z


def _late_reads(m: cp_model.CpModel, f: _Facts, v: ExactVariables
                ) -> tuple[_Reads, _Reads]:
    """Every read of a planned storage by a graph op (``orig_reads``), late readers of a
    dropped storage reading its copy instead (``copy_reads``), made by re-running the
    value's maker before them."""
    g, d, pos = f.graph, v.drop, v.pos
    copy_reads: _Reads = {}
    orig_reads: _Reads = {}
    for op in g.ops:
        for s in g.storages_read(op.id):
            if g.tensors[s].producer is None or g.tensors[s].producer == op.id:
                continue
            if op.id in f.late and s in d:
                orig_reads.setdefault(s, []).append((op.id, d[s].negated()))
                copy_reads.setdefault(s, []).append((op.id, d[s]))
            else:
                orig_reads.setdefault(s, []).append((op.id, v.one))
        if op.id not in f.late:
            continue
        for u in op.inputs:
            s = g.storage_of(u)
            if s not in d:
                continue
            q = g.value_producer(u)
            if q is None or q in f.late:
                continue
            if q not in v.run:
                m.add(d[s] == 0)
                continue
            m.add_implication(d[s], v.run[q])
            m.add(pos[f.rid[q]] < pos[op.id]).only_enforce_if(d[s])
    return copy_reads, orig_reads


def _rerun_reads(m: cp_model.CpModel, f: _Facts, v: ExactVariables, copy_reads: _Reads,
                 orig_reads: _Reads) -> None:
    """What a re-run reads: dropped inputs through their copies (chains), kept ones as they
    are, each after its maker and on the same side of in-place writes as its source."""
    g, d, run, pos, rid = f.graph, v.drop, v.run, v.pos, f.rid
    pos0 = {o: i for i, o in enumerate(g.op_ids)}
    for p in f.rec:
        if g.op(p).random:  # a re-run replays the state its source drew at: after it
            m.add(pos[p] < pos[rid[p]]).only_enforce_if(run[p])
        for u in g.op(p).inputs:
            su = g.storage_of(u)
            q = g.value_producer(u)
            if su in d:
                c = _both(m, run[p], d[su], f"chain[{p},{u}]")
                if q is None or q not in run:
                    m.add(c == 0)
                else:
                    m.add_implication(c, run[q])
                    m.add(pos[rid[q]] < pos[rid[p]]).only_enforce_if(c)
                    copy_reads.setdefault(su, []).append((rid[p], c))
                k = _both(m, run[p], d[su].negated(), f"keep[{p},{u}]")
                if q is not None:
                    m.add(pos[q] < pos[rid[p]]).only_enforce_if(k)
                if g.tensors[su].producer is not None:
                    orig_reads.setdefault(su, []).append((rid[p], k))
            else:
                if q is not None:
                    m.add(pos[q] < pos[rid[p]]).only_enforce_if(run[p])
                if g.tensors[su].producer is not None:
                    orig_reads.setdefault(su, []).append((rid[p], run[p]))
            for w in f.writers.get(su, ()):
                if pos0[w] < pos0[p]:
                    m.add(pos[w] < pos[rid[p]]).only_enforce_if(run[p])
                else:
                    m.add(pos[rid[p]] < pos[w]).only_enforce_if(run[p])


def _memory(m: cp_model.CpModel, f: _Facts, v: ExactVariables, copy_reads: _Reads,
            orig_reads: _Reads, limit: int) -> None:
    """Time-indexed liveness of every planned storage and copy, and the limit per step."""
    T = len(f.every)
    mem: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(T)]

    def span(name: str, maker: str, active: cp_model.IntVar | None,
             reads: list[tuple[str, cp_model.BoolVarT]], forever: bool, sz: int) -> None:
        for t in range(T):
            lv = m.new_bool_var(f"live[{name},{t}]")
            own = [v.b(maker, t), v.b(maker, t - 1).negated()]
            if active is not None:
                own.append(active)
            m.add_bool_or([x.negated() for x in own] + [lv])
            if forever:
                m.add_bool_or([v.b(maker, t).negated(), lv])
            for r, cond in reads:  # made by t, read at or after t
                m.add_bool_or([v.b(maker, t).negated(), v.b(r, t - 1), cond.negated(), lv])
            mem[t].append((sz, lv))

    g, size = f.graph, f.size
    for t_ in g.tensors.values():
        if t_.producer is None or not size[t_.id]:
            continue
        span(t_.id, t_.producer, None, orig_reads.get(t_.id, []), t_.id in f.outputs,
             size[t_.id])
    for p in f.rec:
        for s in g.storages_created(p):
            if size[s]:
                span(f"{s}'", f.rid[p], v.run[p], copy_reads.get(s, []), False, size[s])
    for t in range(T):
        m.add(sum(sz * lv for sz, lv in mem[t]) <= max(limit, 0))


def _build(f: _Facts, budget_bytes: int, alignment_bytes: int, costs: RerunCosts
           ) -> tuple[cp_model.CpModel, ExactVariables, dict[OpId, int]]:
    """The model, its variables and each re-run's cost (the objective's coefficients)."""
    g = f.graph
    m = cp_model.CpModel()
    v = _variables(m, f)
    for src, dst, _ in g.edges():
        m.add(v.pos[src] < v.pos[dst])
    copy_reads, orig_reads = _late_reads(m, f, v)
    _rerun_reads(m, f, v, copy_reads, orig_reads)
    _memory(m, f, v, copy_reads, orig_reads, budget_bytes - g.resident_bytes(alignment_bytes))
    cost = {p: costs.integer(costs.cost[p]) for p in f.rec}
    m.minimize(sum(cost[p] * v.run[p] for p in f.rec))
    # hint: program order, nothing re-run
    for i, o in enumerate(g.op_ids):
        m.add_hint(v.pos[o], i)
    for j, p in enumerate(f.rec):
        m.add_hint(v.pos[f.rid[p]], len(g.op_ids) + j)
        m.add_hint(v.run[p], 0)
    return m, v, cost


def _extract(solver: cp_model.CpSolver, f: _Facts, v: ExactVariables, cost: Mapping[OpId, int],
             costs: RerunCosts, status: str, alignment_bytes: int, wall_s: float
             ) -> ExactResult:
    """The plan the solution encodes, decoded and simulated."""
    g = f.graph
    dropped = tuple(s for s in sorted(v.drop) if solver.value(v.drop[s]))
    rops = recompute_ops_for(g, dropped, f.why)
    keep = {r.source for r in rops}
    chosen = list(g.op_ids) + [f.rid[p] for p in f.rec if p in keep]
    chosen.sort(key=lambda o: solver.value(v.pos[o]))
    back = {r: p for p, r in f.rid.items()}
    order = tuple(OpId(back[o] + "@r") if o in back else OpId(o) for o in chosen)
    g2 = expand_graph(g, rops)
    peak = simulate(g2, order, alignment_bytes=alignment_bytes).peak_bytes
    flops = sum(op_flops(g, g.op(r.source)) for r in rops)
    scale = costs.integer_scale
    real_cost = sum(cost[r.source] for r in rops) / scale
    secs = sum(costs.seconds[r.source] for r in rops)
    return ExactResult(status, float(real_cost), float(solver.best_objective_bound) / scale,
                       flops, dropped, rops, order, peak, wall_s, secs)


def exact_recompute(graph: Graph, budget_bytes: int, *,
                    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
                    costs: RerunCosts | None = None, time_limit_s: float = 60.0,
                    max_ops: int = 60) -> ExactResult:
    """The cheapest recomputation plan (over all orders) whose peak fits ``budget_bytes``.

    Parameters
    ----------
    graph : Graph
        A small graph (at most ``max_ops`` ops).
    budget_bytes : int
        Peak limit, resident bytes included.
    alignment_bytes : int
        Allocator rounding.
    costs : RerunCosts, optional
        What a re-run of each op costs (default: estimated time on the default device
        profile, :func:`~roam_core.recompute.objective.rerun_costs`).
    time_limit_s : float
        CP-SAT deterministic-time limit.
    max_ops : int
        Refuse larger graphs (the model is time-indexed: quadratic in the op count).

    Raises
    ------
    ValueError
        The graph has more than ``max_ops`` ops.
    """
    require_type(graph, Graph, "exact_recompute: graph", ConfigError)
    if len(graph.ops) > max_ops:
        raise ValueError(f"exact_recompute: {len(graph.ops)} ops > max_ops={max_ops}")
    t0 = time.perf_counter()
    f = _facts(graph, alignment_bytes)
    costs = costs if costs is not None else rerun_costs(graph)
    m, v, cost = _build(f, budget_bytes, alignment_bytes, costs)
    # CPU time, not the wall clock, is the safety net: a loaded machine gets the same plan
    solver = make_solver(time_limit_s=time_limit_s, cpu_guard=True)
    name = solve_with_stop(solver, m).status
    wall = time.perf_counter() - t0
    if name not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
        return ExactResult(name, None, None, 0, (), (), (), 0, wall)
    return _extract(solver, f, v, cost, costs, name, alignment_bytes, wall)
