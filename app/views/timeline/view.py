"""The Operator timeline card (a zoom is sent as a patch of the x range, not a new figure)."""

from __future__ import annotations

import dash
from dash import Input, Output
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import FigureJSON, GraphRef, Selection
from app.views.components import card, fixed_graph, how_to_read
from app.views.spec import PageDefaults, View
from app.views.timeline.data import timeline_dict

__all__ = ["HOW_TO_READ", "VIEW", "render_timeline"]

HOW_TO_READ = ("One cell per operator, coloured by phase (forward, loss, backward, "
               "optimizer): the planned order on top, the compared order ('before') under it. "
               "Hover for the op, its module and the bytes it allocates; click an op to see "
               "what pins it in place.")


def _only_range_changed() -> bool:
    return list(dash.ctx.triggered_prop_ids) == [f"{ids.VIEW_RANGE}.data"]


def _range_patch(rng: list[float] | None) -> dash.Patch:
    """Only the x range changes: send a patch, not the figure."""
    patch = dash.Patch()
    patch["layout"]["xaxis"]["autorange"] = rng is None
    if rng is not None:
        patch["layout"]["xaxis"]["range"] = rng
    return patch


def render_timeline(graph: GraphRef | None, plan: str | None, base: str,
                    rng: list[float] | None, sel: Selection | None
                    ) -> FigureJSON | dash.Patch:
    """View 3 (a range change is a patch)."""
    if not graph:
        raise PreventUpdate
    if _only_range_changed():
        return _range_patch(rng)
    return timeline_dict(graph["key"], plan, base, rng, sel)


def register(app: dash.Dash, config: AppConfig) -> None:
    """The timeline's callback."""
    app.callback(Output(ids.TIMELINE, "figure"), Input(ids.GRAPH_KEY, "data"),
                 Input(ids.PLAN_KEY, "data"), Input(ids.BASELINE, "value"),
                 Input(ids.VIEW_RANGE, "data"), Input(ids.SELECTION, "data"))(render_timeline)


def _components(_: PageDefaults) -> list[Component]:
    return [card("Operator timeline", how_to_read("timeline", HOW_TO_READ),
                 fixed_graph(ids.TIMELINE, 230))]


def _warm(graph_key: str, plan_key: str | None) -> None:
    timeline_dict(graph_key, plan_key, "eager", None, None)


VIEW = View("timeline", "main", _components, register, warm=_warm)
