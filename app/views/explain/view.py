"""The Explain panel beside the task tree."""

from __future__ import annotations

from collections.abc import Sequence

import dash
from dash import Input, Output, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import GraphRef, Selection
from app.views.components import card, how_to_read
from app.views.explain.data import explain_sections
from app.views.explain.model import Section
from app.views.spec import PageDefaults, View

__all__ = ["HOW_TO_READ", "VIEW", "explain_children", "render_explain"]

HOW_TO_READ = ("Why the selected op or tensor is where it is: what it depends on, how its "
               "lifetime changed and what is live with it at the peak.")


def explain_children(sections: Sequence[Section]) -> list[Component]:
    """The Explain panel body."""
    return [html.Div([html.H4(s.title), html.Ul([html.Li(x) for x in s.lines])])
            for s in sections]


def render_explain(graph: GraphRef | None, plan: str | None, base: str,
                   sel: Selection | None) -> list[Component]:
    """View 8."""
    if not graph:
        raise PreventUpdate
    return explain_children(explain_sections(graph["key"], plan, base, sel))


def register(app: dash.Dash, config: AppConfig) -> None:
    """The Explain panel's callback."""
    app.callback(Output(ids.EXPLAIN, "children"), Input(ids.GRAPH_KEY, "data"),
                 Input(ids.PLAN_KEY, "data"), Input(ids.BASELINE, "value"),
                 Input(ids.SELECTION, "data"))(render_explain)


def _components(_: PageDefaults) -> list[Component]:
    return [card("Explain", how_to_read("explain", HOW_TO_READ),
                 html.Div(id=ids.EXPLAIN, className="explain"))]


VIEW = View("explain", "main", _components, register, row="tree-explain")
