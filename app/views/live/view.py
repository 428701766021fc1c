"""The Live tensors card: the storages live at the clicked step, largest first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dash
from dash import Input, Output, html

# (mypy skips dash_table's __init__, which opts out of checking: the class's module)
from dash.dash_table.DataTable import DataTable
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import GraphRef, StepRef
from app.views.components import card, how_to_read
from app.views.live import data
from app.views.spec import PageDefaults, View

__all__ = ["HOW_TO_READ", "VIEW", "live_tooltips", "render_live"]

HOW_TO_READ = ("The tensors live at the step clicked on the memory curves (the planned peak "
               "by default), in the order of the curve clicked, largest first. Hover a size or "
               "offset for the exact bytes; source: the user-code line of the op that made "
               "the tensor.")
_COLUMNS = ("id", "name", "module", "kind", "size", "offset", "lifetime", "producer",
            "source")
_TEXT_COLUMNS = ("id", "name", "module", "kind", "producer", "source")


def render_live(graph: GraphRef | None, plan: str | None, base: str, step: StepRef | None
                ) -> tuple[list[dict[str, str | int]], str]:
    """View 5: live tensors at the clicked step (the peak by default)."""
    if not graph:
        raise PreventUpdate
    at, side = (step.get("step"), step.get("side", "after")) if step else (None, "after")
    return data.live_table(graph["key"], plan, base, at, side)


def live_tooltips(rows: Sequence[Mapping[str, object]] | None
                  ) -> list[dict[str, dict[str, str]]]:
    """Exact bytes of the live table's sizes and offsets, on hover."""
    return data.live_tooltips(rows or [])


def register(app: dash.Dash, config: AppConfig) -> None:
    """The live table's callbacks."""
    app.callback(Output(ids.LIVE_TABLE, "data"), Output(ids.LIVE_TITLE, "children"),
                 Input(ids.GRAPH_KEY, "data"), Input(ids.PLAN_KEY, "data"),
                 Input(ids.BASELINE, "value"), Input(ids.STEP, "data"))(render_live)
    app.callback(Output(ids.LIVE_TABLE, "tooltip_data"),
                 Input(ids.LIVE_TABLE, "data"))(live_tooltips)


def _components(_: PageDefaults) -> list[Component]:
    return [card("Live tensors", how_to_read("live", HOW_TO_READ),
                 html.Div(id=ids.LIVE_TITLE, className="muted"),
                 DataTable(
                     id=ids.LIVE_TABLE, page_size=15, sort_action="native",
                     columns=[{"name": c, "id": c} for c in _COLUMNS],
                     style_cell={"fontFamily": "monospace", "fontSize": 12},
                     # names read from the left; sizes and steps stay right-aligned
                     style_cell_conditional=[{"if": {"column_id": c}, "textAlign": "left"}
                                             for c in _TEXT_COLUMNS],
                     tooltip_delay=300, tooltip_duration=None,
                     style_table={"overflowX": "auto"}))]


VIEW = View("live", "main", _components, register)
