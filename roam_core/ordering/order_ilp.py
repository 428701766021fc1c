"""CP-SAT ordering of one sub-task: the exact minimum-peak order of its ops, surroundings fixed.

A sub-task's ops occupy runs of consecutive positions of a valid base order (*ranges*); any
permutation of a range that respects its precedences keeps the whole order valid.  The pieces:

* :mod:`roam_core.ordering.order_problem`: the plain-data problem (:class:`OrderProblem`:
  ranges, storage terms, the constant bytes), :func:`build_order_problem`, the range
  profile (the same sum as the simulator at those steps) and the merge back into the order;
* :mod:`roam_core.ordering.order_hint_check`: when the base order is provably optimal
  already (no model needed);
* :mod:`roam_core.ordering.order_model`: the time-indexed CP-SAT model (build / extract);
* here: :func:`solve_order_problem` (build, solve, extract, never worse than the hint; top
  level and picklable, so it can run in a worker process) and :func:`solve_order` (the
  whole round trip on a graph and an order).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from roam_core.base.cancel import CancelFlag, CancelToken, as_cancel_flag
from roam_core.base.status import SolveStatus
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId
from roam_core.ordering.config import OrderSolverConfig
from roam_core.ordering.order_hint_check import hint_is_optimal
from roam_core.ordering.order_model import (
    ModelCancelled,
    OrderModel,
    build_order_model,
    extract_order,
)
from roam_core.ordering.order_problem import (
    OrderProblem,
    OrderResult,
    RangeProblem,
    build_order_problem,
    identity_orders,
    merge_orders,
    problem_peak,
)

if TYPE_CHECKING:  # OR-Tools is imported when a model is solved
    from roam_core.base.cpsat import SolveOutcome

__all__ = ["solve_order", "solve_order_problem"]

_logger = logging.getLogger(__name__)


def solve_order_problem(problem: OrderProblem, cancel: CancelToken = None) -> OrderResult:
    """Solve one sub-task (top-level and picklable, for worker processes).

    Steps: answer without a model when that is possible (:func:`_without_model`), else
    build the model (:func:`~roam_core.ordering.order_model.build_order_model`), solve it
    and read the orders back (:func:`_solve_model`).  The result is never worse than the
    base order: if the solver returns nothing better, the hint is kept (status ``HINT``).
    """
    flag = as_cancel_flag(cancel)
    t0 = time.perf_counter()
    identity = identity_orders(problem)
    hint_peak = problem_peak(problem, identity)
    early = _without_model(problem, hint_peak, flag)
    if early is not None:
        return _result(problem, identity, *early, hint_peak, t0,
                       _EARLY_STOP.get(early[0], "done"))
    try:
        om = build_order_model(problem, flag)
    except ModelCancelled:  # cancelled while the model was built
        return _result(problem, identity, SolveStatus.CANCELLED, None, hint_peak, t0,
                       "cancelled")
    orders, status, bound, outcome = _solve_model(problem, om, hint_peak, flag)
    return _result(problem, orders, status, bound, hint_peak, t0, outcome.stopped,
                   outcome.deterministic_time_s)


#: Why a solve without a model stopped, by its status (otherwise ``"done"``).
_EARLY_STOP = {SolveStatus.BOUND: "at_bound", SolveStatus.CANCELLED: "cancelled"}


def _without_model(problem: OrderProblem, hint_peak: int, cancel: CancelFlag | None,
                   ) -> tuple[SolveStatus, int | None] | None:
    """``(status, bound)`` when the hint is the answer without a model: nothing to
    permute, already at the floor, cancelled, or proved optimal
    (:func:`~roam_core.ordering.order_hint_check.hint_is_optimal`: CP-SAT would keep it)."""
    if not any(len(r.ops) > 1 for r in problem.ranges):
        return SolveStatus.TRIVIAL, hint_peak
    if problem.config.stop_at_lower_bound and hint_peak <= problem.floor_bytes:
        return SolveStatus.BOUND, None
    if cancel is not None and cancel():
        return SolveStatus.CANCELLED, None
    if hint_is_optimal(problem):
        return SolveStatus.OPTIMAL, hint_peak
    return None


def _solve_model(problem: OrderProblem, om: OrderModel, hint_peak: int,
                 cancel: CancelFlag | None,
                 ) -> tuple[list[list[int]], SolveStatus, int | None, SolveOutcome]:
    """Solve ``om`` and extract its orders: ``(local orders, status, proven bound, what the
    solver observed)``, the base orders unless the solution is strictly better."""
    from roam_core.base.cpsat import make_solver, solve_with_stop  # loads OR-Tools

    cfg = problem.config
    identity = identity_orders(problem)
    solver = make_solver(
        time_limit_s=cfg.time_limit_s, num_workers=cfg.num_search_workers,
        random_seed=cfg.random_seed, deterministic=cfg.deterministic,
        wall_slack=cfg.wall_slack, relative_gap=cfg.relative_gap, log_search=cfg.log_search,
        linearization_level=cfg.linearization_level, cpu_guard=True)
    target = problem.floor_bytes // om.scale if cfg.stop_at_lower_bound else None
    outcome = solve_with_stop(solver, om.model, target=target, cancel=cancel)
    bound = None
    if outcome.best_bound is not None and not outcome.reached_target:
        bound = math.ceil(outcome.best_bound - 1e-6) * om.scale
    if outcome.objective is None:
        status = SolveStatus.CANCELLED if outcome.cancelled else outcome.status
        return identity, status, None, outcome
    orders = extract_order(problem, om, solver)
    for r, o in zip(problem.ranges, orders, strict=True):
        assert _valid_local(r, o), f"solver returned an invalid order for {problem.task_id}"
    found = problem_peak(problem, orders)
    assert found <= round(outcome.objective) * om.scale, (
        f"{problem.task_id}: simulated peak {found} above the model objective")
    if outcome.reached_target:
        status = SolveStatus.BOUND
    elif outcome.cancelled:
        status = SolveStatus.CANCELLED
    elif outcome.status == SolveStatus.OPTIMAL:
        status = SolveStatus.OPTIMAL
    else:
        status = SolveStatus.FEASIBLE if found < hint_peak else SolveStatus.HINT
    return (orders if found < hint_peak else identity), status, bound, outcome


def _valid_local(rng: RangeProblem, local_order: Sequence[int]) -> bool:
    pos = {i: k for k, i in enumerate(local_order)}
    if sorted(pos) != list(range(len(rng.ops))):
        return False
    return all(pos[p] < pos[i] for i, ps in enumerate(rng.preds) for p in ps)


def _result(problem: OrderProblem, orders: list[list[int]], status: SolveStatus,
            bound: int | None, hint_peak: int, t0: float, stopped: str,
            deterministic_time_s: float = 0.0) -> OrderResult:
    return OrderResult(
        task_id=problem.task_id,
        orders=tuple(tuple(r.ops[i] for i in o) for r, o in zip(problem.ranges, orders,
                                                                strict=True)),
        peak_bytes=problem_peak(problem, orders),
        hint_peak_bytes=hint_peak,
        status=status,
        best_bound_bytes=bound,
        wall_time_s=time.perf_counter() - t0,
        num_ops=problem.num_ops,
        stopped=stopped,
        deterministic_time_s=deterministic_time_s,
    )


def solve_order(
    graph: Graph,
    order: Sequence[OpId],
    op_ids: Sequence[OpId] | None = None,
    *,
    config: OrderSolverConfig | None = None,
    floor_bytes: int = 0,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    cancel: CancelToken = None,
) -> tuple[tuple[OpId, ...], OrderResult]:
    """Re-order ``op_ids`` (default: every op) inside ``order`` for the least peak.

    Parameters
    ----------
    graph : Graph
        The graph.
    order : sequence of OpId
        A valid order (base and hint).
    op_ids : sequence of OpId, optional
        The ops to re-order; default all (then the result is the exact minimum-peak order
        when the solve is optimal).
    config : OrderSolverConfig, optional
        Solver settings.
    floor_bytes : int
        Stop early once the peak (non-resident) is at or below this.
    alignment_bytes : int
        Storage rounding.
    cancel : CancelToken, optional
        An Event or a callable returning True to stop.

    Returns
    -------
    (order, OrderResult)
        The full new order and the solve record (``peak_bytes`` excludes resident bytes).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> from roam_core.oracle.simulate import simulate
    >>> g = diamond()
    >>> new, res = solve_order(g, g.op_ids, alignment_bytes=1)
    >>> res.status, res.peak_bytes, simulate(g, new, alignment_bytes=1).peak_bytes
    (<SolveStatus.OPTIMAL: 'optimal'>, 350, 350)
    """
    ops = list(order) if op_ids is None else list(op_ids)
    problem = build_order_problem(graph, order, ops, config=config, floor_bytes=floor_bytes,
                                  alignment_bytes=alignment_bytes)
    res = solve_order_problem(problem, cancel)
    return merge_orders(order, problem, res), res

