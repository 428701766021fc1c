"""Whether a plan fits a traced step, and the step it replays (recompute ops added).

Every entry point that runs a plan (:func:`~roam_core.runtime.execution.execute_traced`,
:class:`~roam_core.runtime.planned_step.PlannedStep`, ``roam execute``) checks the same
things in the same order before any tensor is touched: the fingerprint, then the whole
independent validator (:func:`~roam_core.oracle.validate.check_plan`: order, recompute ops,
arena, stated figures), then the order of the replayed step.  A plan ``roam check``
rejects is never run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roam_core.base.checks import require_type
from roam_core.base.errors import PlanFormatError, PlanInvalidError
from roam_core.model.graph import Graph
from roam_core.model.plan import Plan
from roam_core.oracle.validate import check_order, check_plan
from roam_core.runtime.recompute_replay import expand_traced

if TYPE_CHECKING:
    from roam_core.trace.traced_step import TracedStep

__all__ = ["check_fingerprint", "replayed_step", "require_valid"]


def check_fingerprint(graph: Graph, plan: Plan) -> None:
    """Refuse a plan made for another graph (:class:`PlanFormatError`), or an argument that
    is not a plan."""
    require_type(plan, Plan, "plan", PlanFormatError)
    require_type(graph, Graph, "graph", PlanFormatError)
    fp = graph.fingerprint()
    if plan.graph_fingerprint != fp:
        raise PlanFormatError(
            f"the plan was made for graph {plan.graph_fingerprint[:12]} "
            f"({plan.graph_name!r}) but the traced step is graph {fp[:12]}: the model, batch, "
            "optimizer, setting or device differ (a step traced on another device records "
            "other kernels: trace on the device you execute on, e.g. `roam trace ... --device "
            "cuda` on the GPU machine, and plan that graph)")


def require_valid(graph: Graph, plan: Plan) -> None:
    """The fingerprint (:func:`check_fingerprint`), then the whole validator.

    Raises
    ------
    PlanFormatError
        The plan was made for another graph.
    PlanInvalidError
        Any rule broken: order, recompute ops, arena, a stated figure.
    """
    check_fingerprint(graph, plan)
    bad = check_plan(graph, plan)
    if bad:
        raise PlanInvalidError(bad)


def replayed_step(traced: TracedStep, plan: Plan) -> TracedStep:
    """The traced step ``plan`` replays: with its recompute ops as FX nodes, order checked.

    The fingerprint is checked first (:func:`check_fingerprint`, by the caller); then the
    whole validator runs.

    Raises
    ------
    PlanInvalidError
        The plan breaks a rule of the graph (order, recompute ops, arena, figures).
    """
    bad = check_plan(traced.graph, plan)
    if bad:
        raise PlanInvalidError(bad)
    if getattr(plan, "recompute", ()):
        traced = expand_traced(traced, plan.recompute)
    bad = check_order(traced.graph, plan.order)
    if bad:
        raise PlanInvalidError(bad)
    return traced
