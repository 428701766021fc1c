"""Planner steps after polishing: the whole-order search and the tightened bound.

* :func:`search_whole_order` runs :func:`~roam_core.ordering.lns.peak_search` on the *input*
  graph (no rewrites, no tree borders): far moves that the task tree and the pinned weight
  updates forbid (a weight-gradient matmul run where its input is made, a backward-only
  product of forward values run after the peak).  Kept only if the simulated peak drops;
  its limit is a count of candidate orders (``PlannerConfig.search_evaluations``), and
  it says why it stopped (:class:`SearchWork`).
* :func:`tighter_bound` computes the choice bound over forward-value groups
  (:func:`~roam_core.oracle.bounds.op_groups.forward_value_groups`), the peak-window chain
  bound (:func:`~roam_core.oracle.bounds.chain.peak_window_chain_bound`) and the
  chain-group bound (:func:`~roam_core.oracle.bounds.chain.chain_group_lower_bound`) while
  a gap is left (``PlannerConfig.tighten_bound``), so ``Plan.lower_bound_bytes`` /
  ``Plan.proven_gap`` report the best bound proven.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from roam_core.base.cancel import CancelFlag
from roam_core.base.status import SolveStatus
from roam_core.model.graph import Graph, OpId
from roam_core.model.plan import SolveRecord
from roam_core.oracle.simulate import MemoryProfile, simulate
from roam_core.oracle.validate import check_order
from roam_core.planner.config import PlannerConfig

__all__ = ["SEARCH_STOPS", "TIGHTER_BOUNDS", "SearchWork", "search_whole_order",
           "tighter_bound"]

#: The ``StageCost`` reason of each way :func:`~roam_core.ordering.lns.peak_search` stops:
#: at the proven bound, no candidate lowers the peak (its own end), the evaluation budget
#: spent, the planner's time limit, cancelled.
SEARCH_STOPS = {"bound": "at_bound", "no move": "done", "budget": "work", "deadline": "time",
                "cancelled": "cancelled"}


@dataclass(frozen=True, slots=True)
class SearchWork:
    """What the whole-order search spent: candidate orders scored (``evaluations``) against
    its budget (``limit``, ``PlannerConfig.search_evaluations``) and why it stopped (a
    ``StageCost`` reason, :data:`SEARCH_STOPS`)."""

    evaluations: int
    limit: int
    stopped: str


def search_whole_order(graph: Graph, order: tuple[OpId, ...], prof: MemoryProfile,
                       config: PlannerConfig, floor: int,
                       cancel: CancelFlag | None, deadline: float | None,
                       records: list[SolveRecord]
                       ) -> tuple[tuple[OpId, ...], MemoryProfile, SearchWork]:
    """Peak-directed moves on the input graph; ``(order, profile, work)``, never worse."""
    from roam_core.ordering.lns import peak_search

    res = peak_search(graph, order, alignment_bytes=config.alignment_bytes, floor_bytes=floor,
                      max_evaluations=config.search_evaluations, window=0, deadline=deadline,
                      cancel=cancel)
    status = SolveStatus.FEASIBLE if res.peak_bytes < res.start_peak_bytes else SolveStatus.HINT
    records.append(SolveRecord("search", "global", status, res.peak_bytes + prof.resident_bytes,
                               None, res.wall_time_s, res.evaluations))
    work = SearchWork(res.evaluations, config.search_evaluations, SEARCH_STOPS[res.stopped])
    if res.peak_bytes >= res.start_peak_bytes:
        return order, prof, work
    new_prof = simulate(graph, res.order, alignment_bytes=config.alignment_bytes)
    assert new_prof.peak_bytes < prof.peak_bytes
    assert not check_order(graph, res.order)
    return tuple(res.order), new_prof, work


#: The bounds :func:`tighter_bound` computes, cheapest first.
TIGHTER_BOUNDS = ("forward_values", "peak_window", "chain_group")


def tighter_bound(graph: Graph, lower: int, peak: int, config: PlannerConfig,
                  records: list[SolveRecord], notes: list[str],
                  order: Sequence[OpId] | None = None,
                  bounds: Sequence[str] = TIGHTER_BOUNDS) -> int:
    """The forward-value choice, peak-window chain and chain-group bounds (those named in
    ``bounds``) when they beat ``lower``.

    Each is recorded as a ``"bound"`` record (``forward_values``, ``peak_window``,
    ``chain_group``), in that order (cheapest first); each is skipped once one meets
    ``peak``.  The forward-value bound is
    :func:`~roam_core.oracle.bounds.choice.choice_lower_bound` over
    :func:`~roam_core.oracle.bounds.op_groups.forward_value_groups` (backward products of
    forward values: run early and hold the product, or late and hold the inputs); the
    peak-window one (:func:`~roam_core.oracle.bounds.chain.peak_window_chain_bound`, only
    with ``order``, the plan's order) solves the ops around ``order``'s peak against the
    order's greedy chain.  A bound above ``peak`` (the simulated peak of a valid order)
    would be a bug; it is then not used, and the plan says so.
    """
    from roam_core.model.reach import reachability
    from roam_core.oracle.bounds import (
        chain_group_lower_bound,
        choice_lower_bound,
        forward_value_groups,
        peak_window_chain_bound,
    )

    a = config.alignment_bytes
    reach = reachability(graph)

    def use(name: str, b: int) -> None:
        nonlocal lower
        if b > peak:
            notes.append(f"{name} bound {b} above a valid order's peak {peak}: "
                         "not used (please report)")
        else:
            lower = max(lower, b)

    # the forward-value bound first (cheap); the chain-group bound only if a gap is left
    t0 = time.perf_counter()
    groups = forward_value_groups(graph, reach=reach) if "forward_values" in bounds else ()
    if groups:
        fv = choice_lower_bound(graph, a, groups=groups, reach=reach)
        records.append(SolveRecord("bound", "forward_values", SolveStatus.OPTIMAL, None,
                                   fv.bound_bytes, time.perf_counter() - t0, len(groups)))
        use("forward-value", fv.bound_bytes)
    if lower < peak and order and "peak_window" in bounds:
        t0 = time.perf_counter()
        pw = peak_window_chain_bound(graph, order, a, reach=reach)
        records.append(SolveRecord("bound", "peak_window", SolveStatus.OPTIMAL, None,
                                   pw.bound_bytes, time.perf_counter() - t0, pw.groups_used))
        use("peak-window", pw.bound_bytes)
    if lower < peak and "chain_group" in bounds:
        t0 = time.perf_counter()
        cb = chain_group_lower_bound(graph, None, a, reach=reach)  # masks streamed
        records.append(SolveRecord("bound", "chain_group", SolveStatus.OPTIMAL, None,
                                   cb.bound_bytes, time.perf_counter() - t0, cb.chain_ops))
        use("chain-group", cb.bound_bytes)
    return lower
