"""The Tensor layout card: the planned arena above the caching allocator's layout."""

from __future__ import annotations

import dash
from dash import Input, Output
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import FigureJSON, GraphRef, Selection
from app.views.components import card, fixed_graph, how_to_read
from app.views.layouts.data import layout_dicts
from app.views.spec import PageDefaults, View

__all__ = ["HOW_TO_READ", "VIEW", "render_layouts"]

HOW_TO_READ = ("Every tensor is a rectangle: x is when it is alive, y where it sits in memory. "
               "The planned arena (top) packs them with no gaps that matter; the caching "
               "allocator (bottom) leaves holes. Hover anywhere on a rectangle; click it to "
               "ask why it sits there.")


def render_layouts(graph: GraphRef | None, plan: str | None, base: str,
                   rng: list[float] | None, sel: Selection | None
                   ) -> tuple[FigureJSON, FigureJSON]:
    """View 4 (planned and baseline layouts)."""
    if not graph:
        raise PreventUpdate
    return layout_dicts(graph["key"], plan, base, rng, sel)


def register(app: dash.Dash, config: AppConfig) -> None:
    """The layouts' callback."""
    app.callback(Output(ids.LAYOUT, "figure"), Output(ids.BASE_LAYOUT, "figure"),
                 Input(ids.GRAPH_KEY, "data"), Input(ids.PLAN_KEY, "data"),
                 Input(ids.BASELINE, "value"), Input(ids.VIEW_RANGE, "data"),
                 Input(ids.SELECTION, "data"))(render_layouts)


def _components(_: PageDefaults) -> list[Component]:
    return [card("Tensor layout (x: lifetime steps, y: byte offset)",
                 how_to_read("layout", HOW_TO_READ), fixed_graph(ids.LAYOUT, 460),
                 fixed_graph(ids.BASE_LAYOUT, 460))]


def _warm(graph_key: str, plan_key: str | None) -> None:
    layout_dicts(graph_key, plan_key, "eager", None, None)


VIEW = View("layouts", "main", _components, register, warm=_warm)
