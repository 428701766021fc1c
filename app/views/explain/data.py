"""The Explain panel's sections for the selection, on a stored graph and plan."""

from __future__ import annotations

from app.core import state
from app.core.store_types import Selection
from app.services.plan_data import after_data, before_data
from app.services.view_graph import view_graph
from app.views.explain.model import (
    Section,
    explain_module,
    explain_op,
    explain_recompute,
    explain_tensor,
)
from app.views.memory_by_module.data import module_attribution
from roam_core.base.errors import RoamError

__all__ = ["explain_sections"]


def explain_sections(graph_key: str, plan_key: str | None, base: str,
                     selection: Selection | None) -> list[Section]:
    """View 8: why the selected op or tensor sits where it does."""
    if not selection or not plan_key:
        # the card is titled "Explain" already: the empty state says what to do
        return [Section("nothing selected yet", ("click an op (timeline), a tensor (layout) or a "
                                    "search hit to see why it sits where it does",))]
    graph = state.get_graph(graph_key)
    plan = after_data(graph_key, plan_key).plan
    before = before_data(graph_key, base)
    if selection.get("kind") == "module":
        return explain_module(
            graph, selection["id"], module_attribution(graph_key, plan_key, base),
            module_attribution(graph_key, None, base), f"planned ({plan.method})",
            before.label)
    extra = explain_recompute(graph, plan, selection.get("kind", ""), selection["id"])
    g_plan = view_graph(graph_key, plan_key)
    try:
        if selection.get("kind") == "op":
            return explain_op(g_plan, plan, before.order, selection["id"]) + extra
        return explain_tensor(g_plan, plan, before.order, selection["id"],
                              input_graph=graph) + extra
    except RoamError as e:
        return [Section("cannot explain this", (str(e),))]
