"""Polish: re-solve windows of the merged order centred on its peak step."""

from __future__ import annotations

import time

from roam_core.base.cancel import CancelFlag
from roam_core.model.graph import Graph, OpId
from roam_core.model.plan import SolveRecord
from roam_core.oracle.simulate import MemoryProfile, simulate
from roam_core.ordering.order_ilp import solve_order_problem
from roam_core.ordering.order_problem import build_order_problem, merge_orders
from roam_core.planner.config import PlannerConfig

__all__ = ["polish_peak"]


def polish_peak(g2: Graph, graph: Graph, order: tuple[OpId, ...], prof: MemoryProfile,
                config: PlannerConfig, floor: int, cancel: CancelFlag | None,
                deadline: float | None, records: list[SolveRecord]
                ) -> tuple[tuple[OpId, ...], MemoryProfile]:
    """Re-solve windows centred on the peak step while that lowers the peak.

    Any run of consecutive steps of a valid order is a valid sub-problem, so a window may
    straddle the borders of the task tree's sub-tasks (whose borders were fixed before the
    solve).  Windows honour the placement rewrites (``g2``); solving them against the input
    graph instead was tried and is far slower to prove (update branches widen every window).
    Each round keeps the new order only if its peak (whole graph) is not higher.
    """
    a = config.alignment_bytes
    width = 2 * config.node_limit
    tried: set[tuple[int, int]] = set()
    for k in range(config.polish_rounds):
        if (cancel is not None and cancel()) or (deadline is not None
                                                 and time.monotonic() > deadline):
            break
        n = len(order)
        peak_live = max(prof.live_bytes)
        steps = [i for i, b in enumerate(prof.live_bytes) if b == peak_live]
        lo = max(0, min(steps[0] - width // 2, n - width))
        hi = min(n, lo + width)
        if (lo, hi) in tried or peak_live <= floor:
            break
        tried.add((lo, hi))
        problem = build_order_problem(g2, order, order[lo:hi], task_id=f"polish{k + 1}",
                                      config=config.order, floor_bytes=floor,
                                      alignment_bytes=a)
        res = solve_order_problem(problem, cancel)
        new = merge_orders(order, problem, res)
        new_prof = simulate(graph, new, alignment_bytes=a)
        records.append(SolveRecord("polish", res.task_id, res.status,
                                   res.peak_bytes + prof.resident_bytes,
                                   None if res.best_bound_bytes is None
                                   else res.best_bound_bytes + prof.resident_bytes,
                                   res.wall_time_s, res.num_ops))
        if new_prof.peak_bytes > prof.peak_bytes or new == order:
            if res.peak_bytes >= res.hint_peak_bytes:
                break
            continue
        order, prof = new, new_prof
    return order, prof
