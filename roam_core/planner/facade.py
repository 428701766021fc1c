"""The planner's one door: :func:`make_plan`, graph in, validated plan out.

Without a budget it runs the pipeline (:func:`~roam_core.planner.pipeline.plan_without_budget`:
order, then layout); with ``PlannerConfig.budget_bytes`` it runs the budget planner
(:func:`~roam_core.planner.budget.plan_with_budget`: the same pipeline on the graph, then on
the graph expanded with the recompute ops it chooses).  Both import the pipeline; only this
module knows both.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable

from roam_core.base.cancel import CancelToken
from roam_core.base.checks import require_type
from roam_core.base.collector import gc_paused
from roam_core.base.errors import ConfigError
from roam_core.model.graph import Graph
from roam_core.model.plan import Plan
from roam_core.ordering.registry import ORDER_METHODS
from roam_core.planner.budget import plan_with_budget
from roam_core.planner.config import PlannerConfig
from roam_core.planner.pipeline import PlanProgress, plan_without_budget

__all__ = ["make_plan", "order_methods"]


def order_methods() -> tuple[str, ...]:
    """Names accepted by ``make_plan(method=...)``: ``"roam"`` then the baselines."""
    return ("roam", *ORDER_METHODS)


def make_plan(
    graph: Graph,
    config: PlannerConfig = PlannerConfig(),  # noqa: B008 - frozen, never mutated
    *,
    method: str = "roam",
    progress: Callable[[PlanProgress], None] | None = None,
    cancel: CancelToken = None,
    executor: cf.Executor | None = None,
) -> Plan:
    """Plan ``graph``: an operator order and an arena layout with a low peak.

    Parameters
    ----------
    graph : Graph
        The training-step graph.
    config : PlannerConfig
        Settings; with ``budget_bytes`` (and ``method="roam"``), recomputation is chosen so
        that the arena fits (:mod:`roam_core.planner.budget`).
    method : str
        ``"roam"`` or the name of a baseline ordering method (:func:`order_methods`); a
        baseline gets its order plus the layout.
    progress : callable, optional
        Called with a :class:`~roam_core.planner.pipeline.PlanProgress` after each stage and
        each sub-task.
    cancel : threading.Event or callable, optional
        Cooperative cancellation; the best valid plan so far is returned.
    executor : concurrent.futures.Executor, optional
        Where sub-tasks are solved (default: a local process pool of ``config.workers``;
        ``workers=1`` solves in-process).

    Returns
    -------
    Plan

    Raises
    ------
    ConfigError
        For an argument of the wrong type (``make_plan(None)``), an unknown method name (or
        baseline in ``config.baselines``).
    BudgetInfeasibleError
        ``config.budget_bytes`` is below every plan's arena, recomputation included (the
        message gives the smallest reachable peak).
    PlanInvalidError
        If the plan fails the independent validator (a bug, never expected).

    Notes
    -----
    Python's cyclic garbage collector is paused while planning
    (:func:`~roam_core.base.collector.gc_paused`): the planner keeps almost everything it
    allocates, and the collector's full collections cost ~20 % of the CPU time at 100k ops.
    What the plan keeps afterwards (the plan, the per-graph caches) is moved to the oldest
    generation, so the next young collection does not walk it.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> from roam_core.planner.config import PlannerConfig
    >>> p = make_plan(tiny_train_step(), PlannerConfig(workers=1, solve_layout=False))
    >>> p.method, p.planned_peak_bytes <= p.baseline_peak_bytes, len(p.order)
    ('roam', True, 8)
    """
    require_type(graph, Graph, "make_plan: graph")
    require_type(config, PlannerConfig, "make_plan: config")
    require_type(method, str, "make_plan: method")
    if progress is not None and not callable(progress):
        raise ConfigError("make_plan: progress must be a callable or None")
    with gc_paused(promote_survivors=True):
        if config.budget_bytes is not None and method == "roam":
            return plan_with_budget(graph, config, progress=progress, cancel=cancel,
                                    executor=executor)
        return plan_without_budget(graph, config, method=method, progress=progress,
                                   cancel=cancel, executor=executor)
