"""Planning under a memory budget: recomputation chosen with the order and the layout.

:func:`plan_with_budget` (reached through ``make_plan(graph, PlannerConfig(budget_bytes=B))``):

1. plan without recomputation (ROAM order + layout); if its arena fits, that is the answer;
2. run the greedy drop trajectory (:mod:`roam_core.recompute.greedy`) over that order: every
   prefix is a (peak, cost) point, so one run gives the frontier (and ``"auto"`` its knee);
3. on graphs of at most ``recompute_exact_max_ops`` ops, solve the exact CP-SAT model
   (:mod:`roam_core.recompute.exact`: drops and order together); otherwise take the shortest
   prefix whose just-in-time peak fits, re-admit what the budget does not
   need (:func:`~roam_core.recompute.greedy.prune`), expand the graph with its recompute ops
   and plan the expanded graph with the full ROAM pipeline (sub-task CP-SAT orders move the
   recompute ops together with everything else; the layout packs the copies);
4. if fragmentation pushes the arena over the budget, aim lower and repeat.

The result is an ordinary :class:`~roam_core.model.plan.Plan` for the *input* graph with
``recompute`` ops, ``extra_flops`` and ``step_flops``; it passes the independent validator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from roam_core.base.config import PlannerConfig
from roam_core.base.errors import BudgetInfeasibleError, ConfigError, PlanInvalidError
from roam_core.base.units import format_bytes
from roam_core.model.graph import Graph
from roam_core.model.plan import Plan
from roam_core.model.recompute import expand_graph, flops_recorded, step_flops
from roam_core.oracle.validate import check_plan
from roam_core.recompute.greedy import JitEvaluator, TrajectoryPoint, greedy_trajectory, knee, prune

__all__ = ["frontier_points", "plan_with_budget"]


@dataclass(frozen=True, slots=True)
class _Choice:
    dropped: tuple[Any, ...]
    recompute: tuple[Any, ...]
    order: tuple[Any, ...]
    extra_flops: int


def _no_budget(config: PlannerConfig) -> PlannerConfig:
    return replace(config, budget_bytes=None)


def frontier_points(graph: Graph, base_order: Any, config: PlannerConfig
                    ) -> tuple[JitEvaluator, list[Any], list[TrajectoryPoint]]:
    """The greedy trajectory over ``base_order``: evaluator, drop sequence, points."""
    ev = JitEvaluator(graph, base_order, config.alignment_bytes)
    dropped, points = greedy_trajectory(graph, base_order, evaluator=ev,
                                        alignment_bytes=config.alignment_bytes,
                                        bytes_weight=config.recompute_bytes_weight)
    return ev, dropped, points


def plan_with_budget(graph: Graph, config: PlannerConfig, *, make_plan: Any,
                     **kwargs: Any) -> Plan:
    """Plan ``graph`` so that its arena is at most ``config.budget_bytes``.

    Parameters
    ----------
    graph : Graph
        The graph.
    config : PlannerConfig
        ``budget_bytes`` is an int (bytes, resident included) or ``"auto"``.
    make_plan : callable
        The planner without a budget (passed in to keep this module below the façade).
    **kwargs
        Forwarded to ``make_plan`` (progress, cancel, executor).

    Raises
    ------
    BudgetInfeasibleError
        No plan fits; the message states the smallest reachable peak.
    """
    t0 = time.perf_counter()
    budget = config.budget_bytes
    if budget != "auto" and (isinstance(budget, bool) or not isinstance(budget, int)
                             or budget <= 0):
        raise ConfigError(f"budget {budget!r}: give a positive number of bytes or 'auto'")
    plain = _no_budget(config)
    sflops = step_flops(graph)
    notes: list[str] = []
    if not flops_recorded(graph):
        notes.append("the graph has no per-op FLOPs (traced before roam recorded them): "
                     "FLOPs are estimated from the matrix products only; re-trace for "
                     "torch's counts")
    base = make_plan(graph, plain, **kwargs)
    if budget != "auto" and base.arena_bytes <= budget:
        return replace(base, step_flops=sflops,
                       notes=(*base.notes, *notes, "fits the budget without recomputation"))
    ev, dropped, points = frontier_points(graph, base.order, config)
    if budget == "auto":
        k = knee(points, config.recompute_bytes_weight)
        budget = max(k.peak_bytes, 1)
        notes.append(f"budget auto: the frontier's knee, {format_bytes(budget)} "
                     f"(+{100 * k.extra_flops / max(sflops, 1):.1f}% FLOPs)")
        if base.arena_bytes <= budget:
            return replace(base, step_flops=sflops, notes=(*base.notes, *notes))
    lowest = min(p.peak_bytes for p in points)
    target = budget
    w = config.recompute_bytes_weight
    best_arena = None
    exact = len(graph.ops) <= config.recompute_exact_max_ops
    if exact:
        from roam_core.recompute.exact import exact_recompute
    cache: dict[int, Any] = {}

    def candidate(target_bytes: int) -> Any:
        """(evaluation-like record, expanded graph, plan) for one target peak."""
        if exact:
            ex = exact_recompute(graph, target_bytes, alignment_bytes=config.alignment_bytes,
                                 bytes_weight=w,
                                 time_limit_s=config.recompute_exact_time_limit_s)
            if ex.status in ("optimal", "feasible"):
                notes.append(f"exact recomputation model: {ex.status}, cost {ex.cost:.0f} "
                             f"(bound {ex.best_bound:.0f}) in {ex.wall_time_s:.1f} s")
                return _Choice(ex.dropped, ex.recompute, ex.order, ex.extra_flops)
            if ex.status == "infeasible":
                return None
        idx = next((i for i, p in enumerate(points) if p.peak_bytes <= target_bytes), None)
        if idx is None:
            return None
        if idx not in cache:
            e = prune(ev, dropped[:points[idx].n_dropped], target_bytes, w)
            cache[idx] = _Choice(e.dropped, e.recompute, e.order, e.extra_flops)
        return cache[idx]

    for _attempt in range(4):
        ev_i = candidate(target)
        if ev_i is None:
            break
        g2 = expand_graph(graph, ev_i.recompute, order=ev_i.order)
        p2 = make_plan(g2, plain, **kwargs)
        best_arena = p2.arena_bytes if best_arena is None else min(best_arena, p2.arena_bytes)
        if p2.arena_bytes <= budget:
            plan = replace(
                p2, graph_fingerprint=graph.fingerprint(), graph_name=graph.name,
                baseline_peak_bytes=base.baseline_peak_bytes,
                recompute=ev_i.recompute, extra_flops=ev_i.extra_flops, step_flops=sflops,
                solve_seconds=time.perf_counter() - t0,
                settings={**config.to_dict(), "method": "roam"},
                notes=(*p2.notes, *notes,
                       f"recomputes {len(ev_i.recompute)} ops "
                       f"({len(ev_i.dropped)} storages dropped) for "
                       f"+{100 * ev_i.extra_flops / max(sflops, 1):.2f}% FLOPs; budget "
                       f"{format_bytes(budget)}"))
            bad = check_plan(graph, plan)
            if bad:
                raise PlanInvalidError(bad)
            return plan
        target -= max(p2.arena_bytes - budget, config.alignment_bytes)
    smallest = min(lowest, best_arena) if best_arena is not None else lowest
    raise BudgetInfeasibleError(
        f"graph {graph.name!r}: no plan fits {format_bytes(budget)}; the smallest peak roam "
        f"reaches with recomputation is {format_bytes(smallest)} (without recomputation "
        f"{format_bytes(base.arena_bytes)}; resident {format_bytes(base.resident_bytes)})",
        budget, smallest)
