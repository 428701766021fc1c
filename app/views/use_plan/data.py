"""The "Use this plan" card of a stored graph and plan."""

from __future__ import annotations

from app.core import state
from app.services.plan_data import after_data
from app.views.use_plan.model import UsePlan, use_plan

__all__ = ["use_plan_for"]


def use_plan_for(graph_key: str, plan_key: str) -> UsePlan:
    """The code and commands for the plan ``plan_key`` of graph ``graph_key``."""
    graph = state.get_graph(graph_key)
    plan = after_data(graph_key, plan_key).plan
    return use_plan(graph.name, graph.origin, plan.method, plan.settings,
                    bool(plan.recompute))
