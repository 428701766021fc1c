"""The guided walkthrough card (open by itself on the teaching graphs); its tensors are
buttons that select them in every view."""

from __future__ import annotations

from collections.abc import Sequence

import dash
from dash import Input, Output, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import GraphRef
from app.views.spec import PageDefaults, View
from app.views.walkthrough.data import FrozenStep, walkthrough_steps

__all__ = ["VIEW", "render_walkthrough", "walkthrough_children"]


def walkthrough_children(open_: bool, steps: Sequence[FrozenStep]) -> list[Component]:
    """The guided walkthrough card: numbered steps, each with clickable tensors."""
    if not steps:
        return []
    items = [html.Li([html.Div(text), html.Div(  # "step" keeps ids unique across steps
        [html.Button(label, id={"type": ids.TOUR_HIT, "index": f"tensor:{tid}", "step": i},
                     className="hit") for tid, label in links], className="tour-links")])
        for i, (_, text, links) in enumerate(steps)]
    return [html.Details([html.Summary("Guided walkthrough: what the planner did, step by "
                                       "step"), html.Ol(items, className="tour")],
                         open=open_, className="card walkthrough")]


def render_walkthrough(graph: GraphRef | None, plan: str | None, base: str
                       ) -> list[Component]:
    """The guided walkthrough (open by itself on the teaching graphs)."""
    if not graph:
        raise PreventUpdate
    return walkthrough_children(*walkthrough_steps(graph["key"], plan, base))


def register(app: dash.Dash, config: AppConfig) -> None:
    """The walkthrough's callback."""
    app.callback(Output(ids.TOUR, "children"), Input(ids.GRAPH_KEY, "data"),
                 Input(ids.PLAN_KEY, "data"), Input(ids.BASELINE, "value"))(render_walkthrough)


def _components(_: PageDefaults) -> list[Component]:
    return [html.Div(id=ids.TOUR)]


VIEW = View("walkthrough", "main", _components, register)
