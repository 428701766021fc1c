"""The Budget view's card: closed until opened; then the frontier's controls, chart and table.

"Compute frontier" runs :func:`app.views.budget.data.frontier` as a background job; a point
(or a table row) loads its plan into every view (``PLAN_KEY``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html

# (mypy skips dash_table's __init__, which opts out of checking: the class's module)
from dash.dash_table.DataTable import DataTable
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.analysis.settings import FormNumber, settings_from_form
from app.core import ids, state
from app.core.config import AppConfig
from app.core.store_types import GraphRef, PlotlyEvent
from app.views import lazy
from app.views.budget.data import frontier, frontier_key, frontier_rows
from app.views.budget.figure import frontier_figure
from app.views.spec import View
from roam_core.base.errors import ConfigError, RoamError

__all__ = ["CARD", "VIEW", "body", "card", "frontier_job", "on_frontier_click",
           "render_frontier"]

_logger = logging.getLogger(__name__)

FRONTIER_BTN = "frontier-btn"
FRONTIER_CANCEL = "frontier-cancel-btn"
FRONTIER_BUDGETS = "frontier-budgets"
FRONTIER_PROGRESS = "frontier-progress"
FRONTIER_PROGRESS_TEXT = "frontier-progress-text"
FRONTIER_STATUS = "frontier-status"
FRONTIER_RESULT = "frontier-result"  # store: {"key": frontier cache key, "graph": graph key}
FRONTIER_GRAPH = "frontier-graph"
FRONTIER_TABLE = "frontier-table"
FRONTIER_NOTES = "frontier-notes"
FRONTIER_MIN_CUT = "frontier-min-cut"  # checklist: ["on"] runs torch's min-cut baseline

CARD = "budget-card"


def card() -> html.Div:
    """The Budget view card: closed until opened (its body is :func:`body`)."""
    return lazy.lazy_card(CARD, "Budget: memory vs recomputation",
                          "open: peak against recomputed FLOPs, roam's budget plans and the "
                          "checkpointing recipes")


def body() -> list[Component]:
    """The Budget view's controls, frontier chart and table (mounted when opened)."""
    cols: list[DataTable.Columns] = [{"name": n, "id": i} for n, i in (
        ("method", "method"), ("budget", "budget"), ("peak", "peak"),
        ("extra FLOPs %", "extra_pct"), ("re-runs", "recomputed_ops"),
        ("re-run bytes moved", "moved"), ("roam's pick", "kept"))]
    return [
        html.Details([html.Summary("How to read this"), html.Div(
            "Each point is a plan of this graph: its peak (y) and the FLOPs its recomputation "
            "adds (x, % of one step). The red line is roam planned at several budgets; the "
            "markers are the usual checkpointing recipes applied to the same graph, and, for a "
            "model of the zoo, torch's own min-cut partitioner (the one torch.compile uses) at "
            "several activation_memory_budget values, labelled by that value. Lower and "
            "further left is better. Click a point to load its plan into every view; "
            "recomputed ops are pink in the timeline and Explain says why.",
            className="muted")]),
        html.Div([html.Label(["budgets", dcc.Input(id=FRONTIER_BUDGETS, type="number",
                                                   value=8, min=2, max=24, step=1,
                                                   debounce=True)], className="field"),
                  dcc.Checklist(id=FRONTIER_MIN_CUT, value=["on"], className="field",
                                options=[{"label": " torch min-cut baseline (zoo models; "
                                                   "traces the model again)",
                                          "value": "on"}]),
                  html.Button("Compute frontier", id=FRONTIER_BTN, className="primary"),
                  html.Button("Cancel", id=FRONTIER_CANCEL, disabled=True)],
                 className="buttons"),
        html.Progress(id=FRONTIER_PROGRESS, value="0", max="1"),
        html.Div(id=FRONTIER_PROGRESS_TEXT, className="status"),
        html.Div(id=FRONTIER_STATUS, className="status"),
        dcc.Graph(id=FRONTIER_GRAPH, figure=frontier_figure(None),
                  config={"displaylogo": False}, style={"height": "420px"}),
        html.Ul(id=FRONTIER_NOTES, className="muted"),
        DataTable(id=FRONTIER_TABLE, columns=cols, page_size=20,
                             sort_action="native",
                             style_cell={"fontFamily": "monospace", "fontSize": 12},
                             style_table={"overflowX": "auto"}),
    ]


def stores() -> list[dcc.Store]:
    """The view's stores."""
    return [lazy.store(FRONTIER_RESULT)]


def frontier_job(set_progress: Callable[[tuple[int, int, str]], None], n: int | None,
                 graph: GraphRef | None, budgets: int | None, min_cut: Sequence[str] | None,
                 method: str | None, tl: FormNumber, nl: FormNumber, w: FormNumber,
                 al: FormNumber) -> tuple[dict[str, str] | dash.NoUpdate, str]:
    """Background: the frontier of the loaded graph, with progress."""
    if not n or not graph:
        raise PreventUpdate
    try:
        b = int(budgets or 8)
        if not 2 <= b <= 24:
            return dash.no_update, "budgets: give a number from 2 to 24"
        # the frontier is roam's, whatever the Plan card's method
        key = frontier(graph["key"], settings_from_form("roam", tl, nl, w, al), b,
                       lambda d, t, msg: set_progress((d, t, msg)), bool(min_cut))
    except RoamError as e:
        return dash.no_update, f"Frontier failed: {e}"
    except Exception as e:  # a planner bug must reach the user, not only the log
        _logger.exception("frontier failed")
        return dash.no_update, f"Frontier failed: {type(e).__name__}: {e}"
    rec = state.get_json(key) or {}
    return ({"key": key, "graph": graph["key"]},
            f"frontier of {rec.get('graph_name', '')}: {len(rec.get('points') or [])} plans")


def render_frontier(result: dict[str, str] | None, graph: GraphRef | None, plan: str | None,
                    budgets: int | None, min_cut: Sequence[str] | None, method: str | None,
                    tl: FormNumber, nl: FormNumber, w: FormNumber, al: FormNumber
                    ) -> tuple[go.Figure, list[dict[str, Any]], list[Component]]:
    """The frontier of the loaded graph: the job's, or one cached for these settings
    (figure, table rows, the planner's notes)."""
    if not graph:
        raise PreventUpdate
    if result and result.get("graph") == graph["key"]:
        key = result["key"]
    else:
        try:
            key = frontier_key(graph["key"], settings_from_form("roam", tl, nl, w, al),
                               int(budgets or 8), bool(min_cut))
        except ConfigError:  # the settings message says why; no frontier has these settings
            return frontier_figure(None), [], []
    rec = state.get_json(key)
    if rec is None:
        return frontier_figure(None), [], []
    return (frontier_figure(rec, plan), frontier_rows(rec),
            [html.Li(n) for n in rec.get("notes") or []])


def on_frontier_click(click: PlotlyEvent | None, cell: PlotlyEvent | None,
                      rows: Sequence[dict[str, Any]] | None) -> str:
    """A point (or a table row) of the frontier loads its plan into every view."""
    trig = dash.ctx.triggered_id
    if trig == FRONTIER_TABLE:
        if not cell or not rows:
            raise PreventUpdate
        key = rows[cell["row"]].get("plan_key") if cell["row"] < len(rows) else None
    else:
        pts = (click or {}).get("points") or []
        key = pts[0].get("customdata") if pts else None
    if not key or not state.has_plan(key):
        raise PreventUpdate
    return key


def register(app: dash.Dash, config: AppConfig) -> None:
    """Register the Budget view's callbacks."""
    lazy.register_lazy(app, CARD, body)
    settings = [State(i, "value") for i in ids.PLAN_FORM]
    app.callback(
        Output(FRONTIER_RESULT, "data"), Output(FRONTIER_STATUS, "children"),
        Input(FRONTIER_BTN, "n_clicks"), State(ids.GRAPH_KEY, "data"),
        State(FRONTIER_BUDGETS, "value"), State(FRONTIER_MIN_CUT, "value"), *settings,
        background=True, prevent_initial_call=True, interval=400,
        running=[(Output(FRONTIER_BTN, "disabled"), True, False),
                 (Output(FRONTIER_CANCEL, "disabled"), False, True)],
        progress=[Output(FRONTIER_PROGRESS, "value"), Output(FRONTIER_PROGRESS, "max"),
                  Output(FRONTIER_PROGRESS_TEXT, "children")],
        cancel=[Input(FRONTIER_CANCEL, "n_clicks")])(frontier_job)
    app.callback(Output(FRONTIER_GRAPH, "figure"), Output(FRONTIER_TABLE, "data"),
                 Output(FRONTIER_NOTES, "children"),
                 Input(FRONTIER_RESULT, "data"), Input(ids.GRAPH_KEY, "data"),
                 Input(ids.PLAN_KEY, "data"), State(FRONTIER_BUDGETS, "value"),
                 State(FRONTIER_MIN_CUT, "value"), *settings)(render_frontier)
    app.callback(Output(ids.PLAN_KEY, "data", allow_duplicate=True),
                 Input(FRONTIER_GRAPH, "clickData"), Input(FRONTIER_TABLE, "active_cell"),
                 State(FRONTIER_TABLE, "derived_viewport_data"),
                 prevent_initial_call=True)(on_frontier_click)


VIEW = View("budget", "main", lambda _: [card()], register, stores=stores)
