"""Polish: re-solve windows of the merged order centred on its peak step."""

from __future__ import annotations

import time
from dataclasses import dataclass

from roam_core.base.cancel import CancelFlag
from roam_core.model.graph import Graph, OpId
from roam_core.model.plan import SolveRecord
from roam_core.model.stage_cost import worst_stop
from roam_core.oracle.simulate import MemoryProfile, simulate
from roam_core.ordering.order_ilp import solve_order_problem
from roam_core.ordering.order_problem import build_order_problem, merge_orders
from roam_core.planner.config import PlannerConfig

__all__ = ["PolishWork", "polish_peak"]


@dataclass(frozen=True, slots=True)
class PolishWork:
    """What the polish spent: CP-SAT deterministic milliseconds (``done_ms``) against its
    budget (``limit_ms``: ``polish_rounds`` windows of ``order.time_limit_s``) and why it
    stopped (a ``StageCost`` reason: the one of its solves that says most)."""

    done_ms: int
    limit_ms: int
    stopped: str


def polish_peak(g2: Graph, graph: Graph, order: tuple[OpId, ...], prof: MemoryProfile,
                config: PlannerConfig, floor: int, cancel: CancelFlag | None,
                deadline: float | None, records: list[SolveRecord]
                ) -> tuple[tuple[OpId, ...], MemoryProfile, PolishWork]:
    """Re-solve windows centred on the peak step while that lowers the peak.

    Any run of consecutive steps of a valid order is a valid sub-problem, so a window may
    straddle the borders of the task tree's sub-tasks (whose borders were fixed before the
    solve).  Windows honour the placement rewrites (``g2``); solving them against the input
    graph instead was tried and is far slower to prove (update branches widen every window).
    Each round keeps the new order only if its peak (whole graph) is not higher.  A solve is
    bounded by deterministic work (``order.time_limit_s``); ``deadline``
    (``PlannerConfig.time_limit_s``) stops a running solve too, keeping its best order.
    """
    a = config.alignment_bytes
    width = 2 * config.node_limit
    tried: set[tuple[int, int]] = set()
    stops: list[str] = []
    det_s = 0.0

    def stop() -> bool:
        return bool((cancel is not None and cancel())
                    or (deadline is not None and time.monotonic() > deadline))

    for k in range(config.polish_rounds):
        if stop():
            stops.append("cancelled" if cancel is not None and cancel() else "time")
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
        res = solve_order_problem(problem, stop)
        det_s += res.deterministic_time_s
        # a deadline that stopped the solve is the planner's time limit, not a cancel
        stops.append("time" if res.stopped == "cancelled" and not (cancel is not None
                                                                   and cancel())
                     else res.stopped)
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
    limit_ms = round(config.polish_rounds * config.order.time_limit_s * 1000)
    return order, prof, PolishWork(round(det_s * 1000), limit_ms, worst_stop(stops))
