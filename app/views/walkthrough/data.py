"""The walkthrough of a stored graph and plan (memoised, frozen)."""

from __future__ import annotations

from app.core import state
from app.core.memo import memoised
from app.services.plan_data import after_data, before_data
from app.services.view_graph import without_reruns
from app.views.walkthrough.model import TEACHING_GRAPHS, walkthrough

__all__ = ["FrozenStep", "walkthrough_steps"]

#: A walkthrough step with tuples only (safe to share from a memo).
FrozenStep = tuple[str, str, tuple[tuple[str, str], ...]]


@memoised(8)
def walkthrough_steps(graph_key: str, plan_key: str | None, base: str
                      ) -> tuple[bool, tuple[FrozenStep, ...]]:
    """The guided walkthrough of this plan: ``(open by default, steps)`` (memoised, frozen)."""
    if not plan_key:
        return False, ()
    graph = state.get_graph(graph_key)
    a, b = after_data(graph_key, plan_key), before_data(graph_key, base)
    teach = graph.name.startswith(TEACHING_GRAPHS)
    steps = walkthrough(graph, without_reruns(a.plan), b.order, b.label, b.curve, b.view,
                        a.view, b.reserved_bytes)
    return teach, tuple((t, x, tuple(links)) for t, x, links in steps)
