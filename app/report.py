"""The app's offline HTML report without a server: what ``roam report`` writes."""

from __future__ import annotations

import tempfile

from app.core import state
from app.services.planning import validate_plan
from app.views.export.data import export_payload
from roam_core.model.graph import Graph
from roam_core.model.plan import Plan

__all__ = ["build_report"]


def build_report(graph: Graph, plan: Plan, base: str = "eager") -> str:
    """The app's offline HTML report of ``plan`` (what "HTML report" downloads), built
    without a server: the figures are made in a private, temporary app cache.

    Parameters
    ----------
    graph, plan : Graph, Plan
        The plan must fit the graph (checked by the validator first).
    base : str
        The "before" method the report compares with (default eager).

    Returns
    -------
    str
        The HTML text.

    Raises
    ------
    PlanFormatError, PlanInvalidError
        When the plan was made for another graph or fails the validator.
    """
    validate_plan(graph, plan)
    # a private cache for this thread only: a serving app's other requests keep theirs
    with tempfile.TemporaryDirectory(prefix="roam-report-") as d, state.private_cache(d):
        gk = state.put_graph(graph)
        pk = state.put_plan(plan)
        return str(export_payload("html", gk, pk, base)["content"])
