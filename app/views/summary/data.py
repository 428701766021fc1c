"""The summary card of a stored graph and plan, against the chosen "before" order."""

from __future__ import annotations

from app.core import state
from app.core.formatting import fmt_bytes
from app.services.plan_data import after_data, before_data
from app.services.view_graph import without_reruns
from app.views.summary.model import parallel_rows, summary_table, why_notes

__all__ = ["summary_rows"]


def summary_rows(graph_key: str, plan_key: str | None, base: str) -> list[tuple[str, str]]:
    """View 7: the summary card (rows labelled ``"why"`` are the plan's own explanations)."""
    graph = state.get_graph(graph_key)
    b = before_data(graph_key, base)
    head = [("graph", f"{graph.name}: {len(graph.ops)} ops, {len(graph.tensors)} storages"),
            *parallel_rows(graph)]
    if not plan_key:
        return [*head, (f"{b.label} peak", fmt_bytes(int(b.curve.max(initial=0)))),
                (f"{b.label} reserved", fmt_bytes(b.reserved_bytes)),
                ("plan", "not planned yet: press Plan")]
    a = after_data(graph_key, plan_key)
    # op by op against the baseline: the plan's re-runs left out of its order
    why = [("why", w) for w in why_notes(graph, without_reruns(a.plan), b.order, b.label,
                                         b.curve, a.curve)]
    return head + summary_table(a.plan, int(b.curve.max(initial=0)), b.label,
                                b.reserved_bytes, show_eager=base != "eager") + why
