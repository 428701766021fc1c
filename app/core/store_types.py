"""What the app-level ``dcc.Store`` components hold (small JSON: keys and view state only),
and the JSON that figures and click events are exchanged as."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

__all__ = ["FigureJSON", "GraphRef", "JobResult", "PlotlyEvent", "Selection", "StepRef"]

#: A plotly figure as the page is sent it (its JSON: ``{"data": [...], "layout": {...}}``).
FigureJSON = dict[str, Any]
#: What a graph or table reports on a click (``clickData``, ``active_cell``): plotly's JSON.
PlotlyEvent = dict[str, Any]


class GraphRef(TypedDict):
    """``GRAPH_KEY``: the loaded graph."""

    key: str  # content hash in the cache
    name: str


class Selection(TypedDict):
    """``SELECTION``: the selected op, tensor or module."""

    kind: str  # "op", "tensor" or "module"
    id: str  # op id, storage id or module path ("" is the top level)


class StepRef(TypedDict):
    """``STEP``: the step clicked on the memory curves, and on whose curve."""

    step: int
    side: NotRequired[str]  # "before" (the compared order) or "after" (the plan; default)


class JobResult(TypedDict):
    """``PLAN_RESULT`` / ``IMPORT_RESULT``: a plan made (or imported) for a graph."""

    key: str  # plan key
    graph: str  # graph key it was made for
    cancelled: NotRequired[bool]
