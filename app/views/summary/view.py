"""The summary card at the top of the page."""

from __future__ import annotations

from collections.abc import Sequence

import dash
from dash import Input, Output, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import GraphRef
from app.views.components import how_to_read
from app.views.spec import PageDefaults, View
from app.views.summary.data import summary_rows

__all__ = ["HOW_TO_READ", "VIEW", "render_panels", "summary_children"]

HOW_TO_READ = ("The peak is the most memory live at once: it decides what fits on the GPU. "
               "'before' is the order you compare with; 'planned' is roam's. The lower bound "
               "is a floor no order can beat.")


def summary_children(rows: Sequence[tuple[str, str]]) -> list[Component]:
    """The summary card body (rows labelled "why" are the plan's own explanations)."""
    table = [r for r in rows if r[0] != "why"]
    why = [v for k, v in rows if k == "why"]
    return [html.H3("Summary"), how_to_read("summary", HOW_TO_READ),
            html.Table([html.Tr([html.Td(k), html.Td(v)]) for k, v in table]),
            *([html.Ul([html.Li(w) for w in why], className="why")] if why else [])]


def render_panels(graph: GraphRef | None, plan: str | None, base: str) -> list[Component]:
    """View 7: summary."""
    if not graph:
        raise PreventUpdate
    return summary_children(summary_rows(graph["key"], plan, base))


def register(app: dash.Dash, config: AppConfig) -> None:
    """The summary card's callback."""
    app.callback(Output(ids.SUMMARY, "children"), Input(ids.GRAPH_KEY, "data"),
                 Input(ids.PLAN_KEY, "data"), Input(ids.BASELINE, "value"))(render_panels)


def _components(_: PageDefaults) -> list[Component]:
    return [html.Div(id=ids.SUMMARY, className="card summary")]


VIEW = View("summary", "main", _components, register)
