"""The summary card at the top of the page."""

from __future__ import annotations

import dash
from dash import Input, Output, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import GraphRef
from app.views.components import how_to_read
from app.views.spec import PageDefaults, View
from app.views.summary.data import summary
from app.views.summary.model import Summary

__all__ = ["HEADLINE", "HOW_TO_READ", "VIEW", "render_panels", "summary_children"]

#: The headline line (peak before -> after, the saving).
HEADLINE = "headline"

HOW_TO_READ = ("The peak is the most memory live at once: it decides what fits on the GPU. "
               "'before' is the order you compare with (eager, program order, by default); "
               "'planned' is roam's. The lower bound is a floor no order can go below.")


def summary_children(s: Summary) -> list[Component]:
    """The summary card body: the headline, a warning for a cancelled plan, the table, the
    solver's record (folded) and the why notes."""
    out: list[Component] = [html.Div(s.headline, className="headline", id=HEADLINE),
                            html.Div(s.subline, className="muted subline")]
    if s.warning:
        out.append(html.Div(s.warning, className="warning"))
    out += [how_to_read("summary", HOW_TO_READ),
            html.Table([html.Tr([html.Td(k), html.Td(v)]) for k, v in s.rows],
                       className="facts")]
    if s.details:
        out.append(html.Details([
            html.Summary("How the planner spent its time"),
            html.Table([html.Tr([html.Td(k), html.Td(v)]) for k, v in s.details])],
            className="details"))
    if s.why:
        out.append(html.Ul([html.Li(w) for w in s.why], className="why"))
    return out


def render_panels(graph: GraphRef | None, plan: str | None, base: str) -> list[Component]:
    """View 7: summary."""
    if not graph:
        raise PreventUpdate
    return summary_children(summary(graph["key"], plan, base))


def register(app: dash.Dash, config: AppConfig) -> None:
    """The summary card's callback."""
    app.callback(Output(ids.SUMMARY, "children"), Input(ids.GRAPH_KEY, "data"),
                 Input(ids.PLAN_KEY, "data"), Input(ids.BASELINE, "value"))(render_panels)


def _components(_: PageDefaults) -> list[Component]:
    return [html.Div(id=ids.SUMMARY, className="card summary")]


VIEW = View("summary", "main", _components, register)
