"""Settings of the ordering layer: one CP-SAT ordering solve, and the update policies.

Examples
--------
>>> OrderSolverConfig(time_limit_s=2.0).time_limit_s
2.0
"""

from __future__ import annotations

from dataclasses import dataclass

from roam_core.base.checks import at_least as _at_least

__all__ = ["UPDATE_POLICIES", "OrderSolverConfig"]

#: Weight-update placement policies understood by :mod:`roam_core.ordering.rewrites`.
UPDATE_POLICIES = ("cost_aware", "asap", "none")


@dataclass(frozen=True, slots=True)
class OrderSolverConfig:
    """Settings of one CP-SAT ordering solve (one sub-task)."""

    # Wall-clock limit per sub-task solve, seconds.
    time_limit_s: float = 5.0
    # CP-SAT search workers per sub-task.  1 keeps the search deterministic; sub-tasks are
    # parallelised by the planner's executor instead.
    num_search_workers: int = 1
    # CP-SAT random seed (with ``deterministic`` and one worker, same seed -> same plan).
    random_seed: int = 0
    # Bound each solve by CP-SAT *deterministic* time (= ``time_limit_s``) so that results do
    # not depend on machine speed; the wall limit then becomes ``wall_slack`` x the limit.
    deterministic: bool = True
    # Safety factor when ``deterministic`` is set: a solve whose thread has spent
    # ``wall_slack`` x the limit in CPU seconds is stopped (CPU time does not grow with the
    # machine's load; the deterministic limit binds first), and the wall limit, ``wall_slack``
    # times that again, only catches a solve the machine starves.
    wall_slack: float = 4.0
    # CP-SAT's ``linearization_level``: 0 keeps the LP relaxation out of the search.  On the
    # time-indexed model the LP's bound is weak (a 120-op window: 588 against an optimum of
    # 679) and its work is under-counted by CP-SAT's deterministic time (about 3 CPU s per
    # deterministic second, against 1.5 without it), so with it a solve ran into the wall
    # safety limit under load and the plan depended on the load (docs/planning_time.md).
    linearization_level: int = 0
    # Stop a solve early once the sub-task peak is at or below the global lower bound (no
    # order can do better for the whole graph, so further search is wasted).
    stop_at_lower_bound: bool = True
    # Relative gap at which CP-SAT stops (0 = prove optimality).
    relative_gap: float = 0.0
    # Largest range (ops) modelled exactly; longer ranges keep the hint order.
    max_range_ops: int = 400
    # Log CP-SAT search progress (debugging only).
    log_search: bool = False

    def __post_init__(self) -> None:
        _at_least("order.time_limit_s", self.time_limit_s, 0.0)
        _at_least("order.num_search_workers", self.num_search_workers, 1)
        _at_least("order.wall_slack", self.wall_slack, 1.0)
        _at_least("order.relative_gap", self.relative_gap, 0.0)
        _at_least("order.max_range_ops", self.max_range_ops, 1)
        _at_least("order.linearization_level", self.linearization_level, 0)
