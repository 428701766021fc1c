"""One step window and one selection for every view (the range bar above the curves).

A zoom in any step-axis figure, a task-tree node, a search hit or a walkthrough tensor sets
the window (``VIEW_RANGE``); a click on a rectangle or an op, a search hit or a walkthrough
tensor sets the selection (``SELECTION``).  Every view listens to both.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import dash
from dash import ALL, Input, Output, State, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import GraphRef, PlotlyEvent, Selection
from app.views.callback_tools import triggered_value
from app.views.lazy import store
from app.views.linking.data import range_from_relayout, range_of
from app.views.spec import PageDefaults, View

__all__ = ["VIEW", "on_range", "on_select"]


def on_range(*args: Any) -> tuple[list[float] | None, str]:
    """One step window for every view: zoom events, tree clicks, search hits, reset.

    ``args``: the four figures' ``relayoutData``, the tree clicks, the search pick, the
    walkthrough clicks,
    Reset zoom, then the plan key, the graph and the "before" method (Dash passes them all;
    :func:`dash.ctx.triggered_id` says which fired).
    """
    *_, plan, graph, base = args
    trig = dash.ctx.triggered_id
    if trig in (ids.PLAN_KEY, ids.RESET_ZOOM):
        return None, "whole step axis"
    rng: list[float] | Literal["keep"] | None
    if trig == ids.SEARCH_PICK:
        rng = range_of(graph["key"], plan, base, *_picked(triggered_value()))
    elif isinstance(trig, dict):
        if not triggered_value():
            raise PreventUpdate
        kind, ident = ("node", trig["index"]) if trig["type"] == ids.TREE_NODE else \
            tuple(trig["index"].split(":", 1))
        rng = range_of(graph["key"], plan, base, kind, ident)
    else:
        rng = range_from_relayout(triggered_value())
    if rng == "keep":
        raise PreventUpdate
    if rng is None:
        return rng, "whole step axis"
    return rng, f"steps {max(math.ceil(rng[0]), 0)} – {math.floor(rng[1])}"


def _picked(pick: dict[str, Any] | None) -> tuple[str, str]:
    """``(kind, id)`` of the search hit in ``SEARCH_PICK`` (``{"index": "op:mm", "n": 3}``)."""
    index = (pick or {}).get("index")
    if not isinstance(index, str) or ":" not in index:
        raise PreventUpdate
    kind, ident = index.split(":", 1)
    return kind, ident


def on_select(layout_click: PlotlyEvent | None, base_click: PlotlyEvent | None,
              tl_click: PlotlyEvent | None, pick: dict[str, Any] | None,
              graph: GraphRef | None, tour_hits: list[int | None] | None = None
              ) -> Selection | None:
    """Selected op or tensor (from a click, a search hit or a walkthrough tensor)."""
    trig, value = dash.ctx.triggered_id, triggered_value()
    if trig == ids.GRAPH_KEY:
        return None
    if trig == ids.SEARCH_PICK:
        kind, ident = _picked(value)
        return {"kind": kind, "id": ident}
    if not value:
        raise PreventUpdate
    if isinstance(trig, dict):
        kind, ident = trig["index"].split(":", 1)
        return {"kind": kind, "id": ident}
    point = value["points"][0]
    if not point.get("text"):
        raise PreventUpdate
    return {"kind": "op" if trig == ids.TIMELINE else "tensor", "id": point["text"]}


def register(app: dash.Dash, config: AppConfig) -> None:
    """The window's and the selection's callbacks."""
    tour_hits = Input({"type": ids.TOUR_HIT, "index": ALL, "step": ALL}, "n_clicks")
    search_hits = Input(ids.SEARCH_PICK, "data")  # assets/search_hits.js: not n_clicks
    app.callback(Output(ids.VIEW_RANGE, "data"), Output(ids.RANGE_TEXT, "children"),
                 *[Input(g, "relayoutData") for g in (ids.CURVES, ids.TIMELINE, ids.LAYOUT,
                                                      ids.BASE_LAYOUT)],
                 Input({"type": ids.TREE_NODE, "index": ALL}, "n_clicks"), search_hits,
                 tour_hits, Input(ids.RESET_ZOOM, "n_clicks"), Input(ids.PLAN_KEY, "data"),
                 State(ids.GRAPH_KEY, "data"), State(ids.BASELINE, "value"),
                 prevent_initial_call=True)(on_range)
    app.callback(Output(ids.SELECTION, "data"), Input(ids.LAYOUT, "clickData"),
                 Input(ids.BASE_LAYOUT, "clickData"), Input(ids.TIMELINE, "clickData"),
                 search_hits, Input(ids.GRAPH_KEY, "data"), tour_hits,
                 prevent_initial_call=True)(on_select)


def _components(_: PageDefaults) -> list[Component]:
    return [html.Div([html.Span(id=ids.RANGE_TEXT),
                      html.Button("Reset zoom", id=ids.RESET_ZOOM)], className="rangebar")]


VIEW = View("linking", "main", _components, register,
            stores=lambda: [store(ids.VIEW_RANGE), store(ids.SELECTION)])
