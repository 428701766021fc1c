"""The "Memory: before vs after" card: re-rendered on zoom (long curves are decimated
outside the window); a click on a step lists what is live there (``STEP``)."""

from __future__ import annotations

import math

import dash
from dash import Input, Output
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import FigureJSON, GraphRef, PlotlyEvent, Selection, StepRef
from app.views.components import card, fixed_graph, how_to_read
from app.views.curves.data import curves_dict
from app.views.lazy import store
from app.views.spec import PageDefaults, View

__all__ = ["HOW_TO_READ", "VIEW", "on_step", "render_curves"]

HOW_TO_READ = ("Bytes live at every step of the training step, before (blue) and after "
               "planning (red). Only the highest point matters; the labels at each peak name "
               "the largest tensors live there. Click a step to list what is live.")


def render_curves(graph: GraphRef | None, plan: str | None, base: str,
                  rng: list[float] | None, step: StepRef | None,
                  sel: Selection | None = None) -> FigureJSON:
    """View 1 (re-rendered on zoom: long curves are decimated outside the window)."""
    if not graph:
        raise PreventUpdate
    return curves_dict(graph["key"], plan, base, rng, step.get("step") if step else None, sel)


def on_step(click: PlotlyEvent | None, plan: str | None) -> StepRef | None:
    """Clicked step on the memory curves (reset to the peak on a new plan)."""
    if dash.ctx.triggered_id == ids.PLAN_KEY:
        return None
    if not click:
        raise PreventUpdate
    return {"step": math.floor(click["points"][0]["x"])}  # step s spans [s, s + 1)


def register(app: dash.Dash, config: AppConfig) -> None:
    """The curves' callbacks."""
    app.callback(Output(ids.CURVES, "figure"), Input(ids.GRAPH_KEY, "data"),
                 Input(ids.PLAN_KEY, "data"), Input(ids.BASELINE, "value"),
                 Input(ids.VIEW_RANGE, "data"), Input(ids.STEP, "data"),
                 Input(ids.SELECTION, "data"))(render_curves)
    app.callback(Output(ids.STEP, "data"), Input(ids.CURVES, "clickData"),
                 Input(ids.PLAN_KEY, "data"), prevent_initial_call=True)(on_step)


def _components(_: PageDefaults) -> list[Component]:
    return [card("Memory: before vs after", how_to_read("curves", HOW_TO_READ),
                 fixed_graph(ids.CURVES, 380))]


def _warm(graph_key: str, plan_key: str | None) -> None:
    curves_dict(graph_key, plan_key, "eager", None, None)


VIEW = View("curves", "main", _components, register, stores=lambda: [store(ids.STEP)],
            warm=_warm)
