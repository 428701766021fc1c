"""MODeL-style monolithic CP-SAT ordering: one model for the whole graph, no decomposition.

This is the "SOTA ILP" baseline ROAM compares against (MODeL, Steiner et al., ICML'23), in
single-stream (ss) mode: one op per step, ``N`` steps for ``N`` ops.  It is exact (given
time) and scales badly, which is the point of the comparison; use it on graphs of at most a
few hundred ops.

Formulation (time-indexed, steps ``0..N-1``)
--------------------------------------------
1. ``x[v, t]``: op ``v`` runs at step ``t``, for ``t`` in its serial window
   ``[asap(v) - 1, alap(v) - 1]`` (:mod:`roam_core.model.reach`).  Each op runs once, each step runs
   one op.
2. ``done[v, t]``: ``v`` has run at or before ``t`` (``done[v, t] = done[v, t-1] + x[v, t]``,
   fixed to 0 before the window and 1 after it).
3. Precedence, for every data or control edge ``u -> v``: ``done[v, t] <= done[u, t-1]``.
4. Liveness, consistent with :func:`roam_core.oracle.simulate.simulate`: a planned storage ``s``
   made by ``p`` is live at ``t`` when ``p`` has run and some user has not finished before
   ``t``: ``live[s, t] >= done[p, t] - done[u, t-1]`` for every user ``u``; an unused storage
   is live only while ``p`` runs (``live[s, t] >= x[p, t]``); an output stays live to the end
   (``live[s, t] >= done[p, t]``).  Live variables only have lower bounds: the objective
   pushes them down, so at an optimum they are exact.
5. ``peak >= sum_s size_s * live[s, t]`` for every step; minimise ``peak`` (sizes divided by
   their GCD).

The best heuristic order (:func:`roam_core.ordering.registry.best_heuristic_order`) is the hint and
the upper bound; the reported peak is always re-simulated.

References
----------
Steiner, Elhoushi, Kahn, Hegarty, "MODeL: Memory Optimizations for Deep Learning", ICML 2023.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from roam_core.base.cpsat import make_solver, status_name
from roam_core.base.errors import GraphError
from roam_core.base.status import SolveStatus
from roam_core.model.dag_view import CompactGraph, compact
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, Order
from roam_core.oracle.simulate import simulate
from roam_core.ordering.registry import best_heuristic_order

__all__ = [
    "DEFAULT_MAX_OPS",
    "MonolithicModel",
    "MonolithicResult",
    "build_monolithic_model",
    "extract_order",
    "solve_monolithic",
]

_logger = logging.getLogger(__name__)

#: Graphs above this many ops are refused (the model grows as ``N^2``).
DEFAULT_MAX_OPS = 400

@dataclass(frozen=True, slots=True)
class MonolithicModel:
    """The CP-SAT model and its variables (see the module docstring for the meaning)."""

    model: cp_model.CpModel
    cg: CompactGraph
    x: dict[tuple[int, int], cp_model.IntVar]
    done: dict[tuple[int, int], cp_model.IntVar]
    live: dict[tuple[int, int], cp_model.IntVar]
    peak: cp_model.IntVar
    unit_bytes: int
    windows: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class MonolithicResult:
    """Outcome of :func:`solve_monolithic`.

    Parameters
    ----------
    order : tuple of OpId
        Best order found (the hint when the solver found nothing better).
    peak_bytes : int
        Its simulated peak, resident bytes included.
    status : SolveStatus
        ``OPTIMAL`` (solved, or the warm start meets a proven lower bound),
        ``FEASIBLE`` or ``HINT`` (no better solver solution: the warm start is returned).
    best_bound_bytes : int
        Proven lower bound on the peak of any order (resident included); equals
        ``peak_bytes`` when optimal.
    wall_time_s : float
        Seconds spent (build + solve).
    hint_method : str
        The heuristic used as warm start.
    hint_peak_bytes : int
        Its peak.
    """

    order: Order
    peak_bytes: int
    status: SolveStatus
    best_bound_bytes: int
    wall_time_s: float
    hint_method: str
    hint_peak_bytes: int


def _windows(graph: Graph) -> tuple[tuple[int, int], ...]:
    from roam_core.model.reach import reachability

    r = reachability(graph)
    n = len(graph.ops)
    return tuple((r.ancestors[i].bit_count(), n - 1 - r.descendants[i].bit_count())
                 for i in range(n))


def build_monolithic_model(
    graph: Graph,
    *,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    upper_bound_bytes: int | None = None,
    lower_bound_bytes: int | None = None,
) -> MonolithicModel:
    """Build the time-indexed CP-SAT model of the whole graph.

    Parameters
    ----------
    graph : Graph
        The graph.
    alignment_bytes : int
        Storage rounding (as ``simulate``).
    upper_bound_bytes : int, optional
        A known achievable planned peak (resident bytes excluded) to bound ``peak``.
    lower_bound_bytes : int, optional
        A proven lower bound on the planned peak (resident bytes excluded).

    Returns
    -------
    MonolithicModel
    """
    cg = compact(graph, alignment_bytes)
    n = cg.n_ops
    win = _windows(graph)
    unit = 0
    for s in cg.size_bytes:
        unit = math.gcd(unit, s)
    unit = unit or 1
    m = cp_model.CpModel()
    x: dict[tuple[int, int], cp_model.IntVar] = {}
    done: dict[tuple[int, int], cp_model.IntVar] = {}
    # 1. assignment
    for v in range(n):
        lo, hi = win[v]
        for t in range(lo, hi + 1):
            x[v, t] = m.new_bool_var(f"x_{v}_{t}")
        m.add_exactly_one(x[v, t] for t in range(lo, hi + 1))
    for t in range(n):
        m.add_exactly_one(x[v, t] for v in range(n) if (v, t) in x)
    # 2. done[v, t] channelling; constants outside the window
    one = m.new_constant(1)
    zero = m.new_constant(0)

    def d(v: int, t: int) -> cp_model.IntVar:
        lo, hi = win[v]
        if t < lo:
            return zero
        if t >= hi:
            return one
        return done[v, t]

    for v in range(n):
        lo, hi = win[v]
        for t in range(lo, hi):
            done[v, t] = m.new_bool_var(f"done_{v}_{t}")
            prev = d(v, t - 1)
            m.add(done[v, t] == prev + x[v, t])
    # 3. precedence: v has run by t only if u had run by t - 1 (beyond v's window the
    #    windows already guarantee it: alap(u) < alap(v))
    for v in range(n):
        for u in cg.preds[v]:
            for t in range(win[v][0], win[v][1]):
                m.add(d(v, t) <= d(u, t - 1))
    # 4. liveness
    live: dict[tuple[int, int], cp_model.IntVar] = {}
    per_step: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(n)]
    for s, p in enumerate(cg.producer):
        size = cg.size_bytes[s] // unit
        users = cg.users[s]
        start = win[p][0]
        end = n - 1 if cg.is_output[s] else max([win[p][1], *(win[u][1] for u in users)])
        for t in range(start, end + 1):
            lv = m.new_bool_var(f"live_{s}_{t}")
            live[s, t] = lv
            per_step[t].append((size, lv))
            if (p, t) in x:
                m.add(lv >= x[p, t])  # the producer's step, whatever the users
            if cg.is_output[s]:
                m.add(lv >= d(p, t))
            for u in users:
                m.add(lv >= d(p, t) - d(u, t - 1))
    # 5. objective
    cap = sum(cg.size_bytes) // unit
    if upper_bound_bytes is not None:
        cap = min(cap, -(-upper_bound_bytes // unit))
    floor = 0
    if lower_bound_bytes is not None:
        floor = min(max(0, -(-lower_bound_bytes // unit)), max(cap, 0))
    peak = m.new_int_var(floor, max(cap, 0), "peak")
    for t in range(n):
        if per_step[t]:
            m.add(sum(sz * lv for sz, lv in per_step[t]) <= peak)
    m.minimize(peak)
    return MonolithicModel(model=m, cg=cg, x=x, done=done, live=live, peak=peak,
                           unit_bytes=unit, windows=win)


def _hint(mm: MonolithicModel, graph: Graph, order: Order, alignment_bytes: int) -> None:
    cg = mm.cg
    pos = {cg.index[o]: t for t, o in enumerate(order)}
    for (v, t), var in mm.x.items():
        mm.model.add_hint(var, int(pos[v] == t))
    for (v, t), var in mm.done.items():
        mm.model.add_hint(var, int(pos[v] <= t))
    n = cg.n_ops
    for (s, t), var in mm.live.items():
        p = cg.producer[s]
        end = n - 1 if cg.is_output[s] else max([pos[p], *(pos[u] for u in cg.users[s])])
        mm.model.add_hint(var, int(pos[p] <= t <= end))
    prof = simulate(graph, order, alignment_bytes=alignment_bytes)
    mm.model.add_hint(mm.peak, max(prof.live_bytes, default=0) // mm.unit_bytes)


def extract_order(mm: MonolithicModel, solver: cp_model.CpSolver) -> Order:
    """The order of a solved model (ops sorted by their step)."""
    step = {}
    for (v, t), var in mm.x.items():
        if solver.boolean_value(var):
            step[v] = t
    return tuple(mm.cg.op_ids[v] for v in sorted(step, key=step.__getitem__))


def solve_monolithic(
    graph: Graph,
    *,
    time_limit_s: float = 10.0,
    num_workers: int = 1,
    random_seed: int = 0,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    max_ops: int = DEFAULT_MAX_OPS,
    hint: Order | None = None,
    lower_bound_bytes: int | None = None,
) -> MonolithicResult:
    """Order the whole graph with one CP-SAT model (MODeL-style, ss mode).

    Parameters
    ----------
    graph : Graph
        At most ``max_ops`` ops.
    time_limit_s : float
        Solver wall-clock limit.
    num_workers, random_seed : int
        CP-SAT search workers and seed.
    alignment_bytes : int
        Storage rounding.
    max_ops : int
        Refuse larger graphs (``GraphError``).
    hint : Order, optional
        Warm start; default the best cheap order.
    lower_bound_bytes : int, optional
        A proven lower bound on the peak (resident included) that tightens the model;
        default the best bound of :mod:`roam_core.oracle.bounds`.

    Returns
    -------
    MonolithicResult

    Raises
    ------
    GraphError
        If the graph has more than ``max_ops`` ops.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> r = solve_monolithic(diamond(), time_limit_s=5, alignment_bytes=1)
    >>> r.status, r.peak_bytes, r.best_bound_bytes
    (<SolveStatus.OPTIMAL: 'optimal'>, 350, 350)
    """
    t0 = time.perf_counter()
    if len(graph.ops) > max_ops:
        raise GraphError(f"monolithic ordering takes at most {max_ops} ops; the graph has "
                         f"{len(graph.ops)} (use the ROAM planner)")
    resident = graph.resident_bytes(alignment_bytes)
    if hint is None:
        hr = best_heuristic_order(graph, alignment_bytes=alignment_bytes)
        hint, hint_method, hint_peak = hr.order, hr.method, hr.profile.peak_bytes
    else:
        hint_method = "given"
        hint_peak = simulate(graph, hint, alignment_bytes=alignment_bytes).peak_bytes
    if not graph.ops:
        return MonolithicResult((), resident, SolveStatus.OPTIMAL, resident, 0.0, hint_method,
                                resident)
    if lower_bound_bytes is None:
        from roam_core.oracle.bounds import best_lower_bound, live_set_lower_bound

        lower_bound_bytes = max(best_lower_bound(graph, alignment_bytes).bound_bytes,
                                live_set_lower_bound(graph, alignment_bytes).bound_bytes)
    if hint_peak <= lower_bound_bytes:
        # the warm start meets a proven bound: nothing to search
        return MonolithicResult(hint, hint_peak, SolveStatus.OPTIMAL, hint_peak,
                                time.perf_counter() - t0, hint_method, hint_peak)
    mm = build_monolithic_model(graph, alignment_bytes=alignment_bytes,
                                upper_bound_bytes=hint_peak - resident,
                                lower_bound_bytes=min(lower_bound_bytes, hint_peak) - resident)
    _hint(mm, graph, hint, alignment_bytes)
    # a wall-clock limit (not deterministic time): the monolithic baseline is timed like MODeL
    solver = make_solver(time_limit_s=time_limit_s, num_workers=num_workers,
                         random_seed=random_seed, deterministic=False)
    code = solver.solve(mm.model)
    status = status_name(code)
    order, peak = hint, hint_peak
    bound = resident
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        found = extract_order(mm, solver)
        found_peak = simulate(graph, found, alignment_bytes=alignment_bytes).peak_bytes
        if found_peak <= peak:
            order, peak = found, found_peak
        else:
            status = SolveStatus.HINT
        bound = resident + int(solver.best_objective_bound) * mm.unit_bytes
    else:
        # no solution in time (or, impossibly, infeasible under the hint's own peak)
        status = SolveStatus.HINT
    bound = min(max(bound, lower_bound_bytes), peak)
    if code == cp_model.OPTIMAL or bound >= peak:
        status, bound = SolveStatus.OPTIMAL, peak
    wall = time.perf_counter() - t0
    _logger.info("monolithic %s: %s peak %d bound %d (%.2f s)", graph.name, status, peak,
                 bound, wall)
    return MonolithicResult(order=order, peak_bytes=peak, status=status, best_bound_bytes=bound,
                            wall_time_s=wall, hint_method=hint_method, hint_peak_bytes=hint_peak)
