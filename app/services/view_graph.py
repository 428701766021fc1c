"""The graph a plan's views are drawn over: expanded with the plan's re-runs, if any.

A plan made under a budget carries ``recompute`` ops whose ids (``<op>@r``) are in its order
but not in the graph; the views draw it over
:func:`roam_core.model.recompute_ops.expand_graph` of the graph (:func:`view_graph`).
"""

from __future__ import annotations

from dataclasses import replace

from app.core import state
from app.core.memo import memoised
from roam_core.model.graph import Graph
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import expand_graph

__all__ = ["view_graph", "without_reruns"]


@memoised(8, max_bytes=state.VIEW_MEMO_BYTES, weigh=state.graph_bytes)
def _expanded(graph_key: str, plan_key: str) -> Graph:
    plan = state.get_plan(plan_key)
    return expand_graph(state.get_graph(graph_key), plan.recompute, order=plan.order)


def view_graph(graph_key: str, plan_key: str | None) -> Graph:
    """The graph a plan's views are drawn over: expanded with its recompute ops, if any."""
    if plan_key and state.get_plan(plan_key).recompute:
        return _expanded(graph_key, plan_key)
    return state.get_graph(graph_key)


def without_reruns(plan: Plan) -> Plan:
    """``plan`` with its re-runs left out of the order: an order of the *input* graph, for
    views that compare it op by op with a baseline order (the walkthrough, the why notes).
    Dropped values then look kept until their late readers (those views say so)."""
    if not plan.recompute:
        return plan
    ids = {r.id for r in plan.recompute}
    return replace(plan, order=tuple(o for o in plan.order if o not in ids))
