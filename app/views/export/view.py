"""The Export / import card."""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.store_types import GraphRef, JobResult
from app.services.uploads import read_upload
from app.views.callback_tools import triggered_value
from app.views.compare.view import COMPARED
from app.views.components import card
from app.views.export.data import Payload, export_payload, import_plan
from app.views.lazy import store
from app.views.spec import PageDefaults, View
from app.views.uploads import (
    UploadRef,
    register_upload,
    result_id,
    upload_ref,
    upload_store,
    upload_zone,
)
from roam_core.base.errors import RoamError

__all__ = ["VIEW", "on_export", "on_plan_upload"]

#: What the PNG export can draw (keys of :func:`app.views.export.data.report_figures`).
PNG_FIGURES = ("curves", "timeline", "layout", "base_layout", "tree", "modules", "compare")


def _export_card(defaults: PageDefaults) -> list[Component]:
    max_bytes = defaults.max_upload_bytes
    return [card(
        "Export / import",
        html.Div([html.Button("Plan JSON", id=ids.EXPORT_JSON),
                  html.Button("MiniMalloc CSV", id=ids.EXPORT_CSV),
                  html.Button("HTML report", id=ids.EXPORT_HTML)], className="buttons"),
        html.Div([dcc.Dropdown(id=ids.PNG_FIGURE, clearable=False, value="curves",
                               options=list(PNG_FIGURES)),
                  html.Button("PNG", id=ids.EXPORT_PNG)], className="buttons png"),
        dcc.Download(id=ids.DOWNLOAD),
        html.Div(id=ids.EXPORT_STATUS, className="status"),
        upload_zone(ids.PLAN_UPLOAD, "plan", max_bytes, ids.IMPORT_STATUS,
                    ["Import a plan JSON: drop or ", html.A("browse")], accept=".json,.gz"),
        html.Div(id=ids.IMPORT_STATUS, className="status"),
    )]


def on_export(_j: int | None, _c: int | None, _h: int | None, _p: int | None,
              graph: GraphRef | None, plan: str | None, base: str, figure: str,
              compared: dict[str, str] | None = None) -> tuple[Payload | dash.NoUpdate, str]:
    """Plan JSON, MiniMalloc CSV, offline HTML report or PNG of one figure; ``compared``
    (the Compare card's last two plans) adds the compare section and figure."""
    kind = {ids.EXPORT_JSON: "json", ids.EXPORT_CSV: "csv", ids.EXPORT_HTML: "html",
            ids.EXPORT_PNG: "png"}.get(dash.ctx.triggered_id)
    if not kind or not graph or not triggered_value():
        raise PreventUpdate
    try:
        payload = export_payload(kind, graph["key"], plan, base, figure, compared)
    except Exception as e:  # kaleido/chromium failures are shown, not raised
        return dash.no_update, f"Export failed: {type(e).__name__}: {e}"
    return payload, f"exported {payload['filename']}"


def on_plan_upload(upload: UploadRef | None, graph: GraphRef | None
                   ) -> tuple[JobResult | dash.NoUpdate, str, str | dash.NoUpdate]:
    """Import a plan file (streamed to the server, :mod:`app.views.uploads`): fingerprint
    and validator checks before it is shown; the Plan card's status then says which plan
    the views show."""
    if not graph:
        raise PreventUpdate
    token, filename = upload_ref(upload)
    try:
        key = import_plan(read_upload(token), filename, graph["key"])
    except RoamError as e:
        return dash.no_update, f"Import failed: {e}", dash.no_update
    msg = f"imported {filename}: valid for this graph"
    return ({"key": key, "graph": graph["key"]}, msg,
            f"showing the imported plan {filename} (key {key[:10]})")


def register(app: dash.Dash, config: AppConfig) -> None:
    """The Export / import card's callbacks."""
    app.callback(Output(ids.DOWNLOAD, "data"), Output(ids.EXPORT_STATUS, "children"),
                 *[Input(i, "n_clicks") for i in (ids.EXPORT_JSON, ids.EXPORT_CSV,
                                                  ids.EXPORT_HTML, ids.EXPORT_PNG)],
                 State(ids.GRAPH_KEY, "data"), State(ids.PLAN_KEY, "data"),
                 State(ids.BASELINE, "value"), State(ids.PNG_FIGURE, "value"),
                 State(COMPARED, "data"), prevent_initial_call=True)(on_export)
    register_upload(app, "plan", config.max_upload_bytes)
    app.callback(Output(ids.IMPORT_RESULT, "data"), Output(ids.IMPORT_STATUS, "children"),
                 Output(ids.PLAN_STATUS, "children", allow_duplicate=True),
                 Input(result_id(ids.PLAN_UPLOAD), "data"), State(ids.GRAPH_KEY, "data"),
                 prevent_initial_call=True)(on_plan_upload)


VIEW = View("export", "side", _export_card, register,
            stores=lambda: [store(ids.IMPORT_RESULT), upload_store(ids.PLAN_UPLOAD)])
