"""Which parts of a link this server can still show (graph and plan keys are cache keys)."""

from __future__ import annotations

from app.core import state
from app.views.share.model import UrlState
from roam_core.base.errors import GraphError, PlanFormatError

__all__ = ["graph_name", "restorable"]


def restorable(link: UrlState) -> tuple[UrlState, str]:
    """``link`` without what this server cannot show, and a one-line note for the page.

    A graph no longer in the cache drops the whole link (its plan, zoom and selection are
    about that graph); a plan that is gone, or made for another graph, drops the plan; a
    selection naming nothing in the graph is dropped.
    """
    if link.graph_key is None:
        return UrlState(), ""
    try:
        graph = state.get_graph(link.graph_key)
    except GraphError:  # evicted, or a key this server never had
        return UrlState(), "the link's graph is no longer on this server: load it again"
    plan, note = link.plan_key, f"opened {graph.name} from the link"
    if plan is not None and not _plan_of(plan, graph.fingerprint()):
        plan, note = None, f"opened {graph.name} from the link; its plan is gone: plan again"
    sel = link.selection
    if sel is not None and not (
            (sel[0] == "op" and any(o.id == sel[1] for o in graph.ops))
            or (sel[0] == "tensor" and sel[1] in graph.tensors) or sel[0] == "module"):
        sel = None
    return UrlState(link.graph_key, plan, link.view_range, sel), note


def _plan_of(plan_key: str, fingerprint: str) -> bool:
    """Whether ``plan_key`` is stored and was made for the graph of ``fingerprint``."""
    try:
        return state.has_plan(plan_key) and \
            state.get_plan(plan_key).graph_fingerprint == fingerprint
    except PlanFormatError:
        return False


def graph_name(graph_key: str) -> str:
    """The stored graph's name (for the page's ``GRAPH_KEY`` store)."""
    return state.get_graph(graph_key).name
