"""The Plan card: the settings form (checked as it is typed), the Plan job with its progress
bar and Cancel, and which plan the views show (``PLAN_KEY``)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import dash
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from app.analysis.settings import (
    BASELINE_METHODS,
    PLAN_METHODS,
    FormNumber,
    PlanSettings,
    settings_from_form,
)
from app.core import ids
from app.core.config import DEFAULT_CONFIG, AppConfig
from app.core.formatting import fmt_bytes
from app.core.state import get_graph, get_plan
from app.core.store_types import GraphRef, JobResult
from app.services import cancel_requests, planning
from app.views import running
from app.views.callback_tools import bind_config
from app.views.components import card, number_field
from app.views.lazy import store
from app.views.planning.model import PlanProgressTracker
from app.views.spec import View
from roam_core.base.errors import ConfigError, RoamError

if TYPE_CHECKING:
    from roam_core.planner import PlanProgress

__all__ = ["VIEW", "cancel_plan", "clear_plan_status", "plan_buttons", "plan_job",
           "resolve_plan", "settings_message"]

_logger = logging.getLogger(__name__)


def _plan_card(s: PlanSettings) -> html.Div:
    return card(
        "Plan",
        html.Label(["method", dcc.Dropdown(id=ids.METHOD, clearable=False, value=s.method,
                                           options=[{"label": lbl, "value": v}
                                                    for v, lbl in PLAN_METHODS])],
                   className="field"),
        html.Label(["compare with (before)", dcc.Dropdown(
            id=ids.BASELINE, clearable=False, value="eager",
            options=[{"label": lbl, "value": v} for v, lbl in BASELINE_METHODS])],
            className="field"),
        html.Div([number_field(ids.TIME_LIMIT, "time limit (s)", s.time_limit_s, step="any",
                               min_=None),
                  number_field(ids.NODE_LIMIT, "node limit", s.node_limit, min_=None),
                  number_field(ids.WORKERS, "workers", s.workers, min_=None),
                  number_field(ids.ALIGNMENT, "alignment (B)", s.alignment_bytes, min_=None)],
                 className="grid2"),
        html.Div(id=ids.SETTINGS_MSG, className="status error"),
        html.Div([html.Button("Plan", id=ids.PLAN_BTN, className="primary"),
                  html.Button("Cancel", id=ids.CANCEL_BTN, disabled=True)],
                 className="buttons"),
        html.Progress(id=ids.PROGRESS, value="0", max="1000"),
        html.Div(id=ids.PROGRESS_TEXT, className="status"),
        html.Div(id=ids.PLAN_STATUS, className="status"),
    )


def settings_message(method: str | None, tl: FormNumber, nl: FormNumber, w: FormNumber,
                     al: FormNumber) -> str:
    """Says at once what is wrong with the plan settings (empty when fine)."""
    try:
        settings_from_form(method, tl, nl, w, al)
    except ConfigError as e:
        return f"Settings: {e}"
    return ""


def clear_plan_status(graph: GraphRef | None) -> tuple[str, str, int]:
    """A new graph: the previous graph's plan status and progress go away."""
    if not graph:
        raise PreventUpdate
    return "", "", 0


def resolve_plan(graph: GraphRef | None, result: JobResult | None, imported: JobResult | None,
                 method: str | None, tl: FormNumber, nl: FormNumber, w: FormNumber,
                 al: FormNumber, *, config: AppConfig = DEFAULT_CONFIG
                 ) -> str | dash.NoUpdate | None:
    """Which plan the views show: a fresh job result, an import, or the cached one."""
    if not graph:
        raise PreventUpdate
    trig = dash.ctx.triggered_id
    for src, done in ((ids.PLAN_RESULT, result), (ids.IMPORT_RESULT, imported)):
        if trig == src:
            return done["key"] if done and done.get("graph") == graph["key"] else dash.no_update
    try:
        s = settings_from_form(method, tl, nl, w, al)
    except ConfigError:
        return dash.no_update  # the settings message says why
    key = planning.cached_plan_key(graph["key"], s)
    if key is None and len(get_graph(graph["key"]).ops) <= config.auto_plan_max_ops:
        try:  # small graphs are planned on load; a failure leaves them unplanned
            key = planning.plan_graph(graph["key"], s)
        except Exception:
            _logger.exception("planning %s on load failed", graph["key"])
    return key


def plan_job(set_progress: Callable[[tuple[int, int, str]], None], n: int | None,
             graph: GraphRef | None, method: str | None, tl: FormNumber, nl: FormNumber,
             w: FormNumber, al: FormNumber, session: str | None = None
             ) -> tuple[JobResult | dash.NoUpdate, str]:
    """Background: run the planner with progress; returns the plan key as JSON.

    Cancel is cooperative (:func:`cancel_plan` writes a request that the planner polls):
    the planner stops and the best valid plan found so far is shown, marked cancelled.
    """
    if not n or not graph:
        raise PreventUpdate
    try:
        s = settings_from_form(method, tl, nl, w, al)
    except ConfigError as e:
        return dash.no_update, f"Planning not started: {e}"
    cancel = cancel_requests.cancel_flag(session, n) if session else None
    track = PlanProgressTracker(s.time_limit_s)
    t0 = time.monotonic()

    def report(p: PlanProgress) -> None:
        if cancel is None or not cancel():  # after a cancel the text says "cancelling"
            set_progress(track(p))

    try:
        key, cancelled = planning.plan_graph_job(graph["key"], s, report, cancel)
    except RoamError as e:
        return dash.no_update, f"Planning failed: {e}"
    except Exception as e:  # a planner bug must reach the user, not only the log
        _logger.exception("planner failed")
        return dash.no_update, f"Planning failed: {type(e).__name__}: {e}"
    if cancelled:
        peak = fmt_bytes(get_plan(key).planned_peak_bytes)
        set_progress((0, 1, f"cancelled after {time.monotonic() - t0:.1f} s"))
        return ({"key": key, "graph": graph["key"], "cancelled": True},
                f"cancelled: showing the best plan found so far (peak {peak})")
    return {"key": key, "graph": graph["key"]}, f"planned with {s.method} (key {key[:10]})"


def cancel_plan(n: int | None, session: str | None, run: int | None) -> tuple[str, str]:
    """Cancel pressed: ask this page's running planner job to stop."""
    if not n or not session or not run:
        raise PreventUpdate
    cancel_requests.request_cancel(session, run)
    return ("cancelling: the planner stops at its next check and keeps the best plan "
            "found so far…", "cancelled: stopping the planner…")


def plan_buttons(running_jobs: dict[str, bool] | None) -> tuple[bool, bool]:
    """Plan / Cancel ``disabled`` from the ``RUNNING`` store."""
    return running.buttons(running_jobs, None, None)[:2]


def register(app: dash.Dash, config: AppConfig) -> None:
    """The Plan card's callbacks."""
    form = [State(i, "value") for i in ids.PLAN_FORM]
    app.callback(Output(ids.PLAN_KEY, "data"), Input(ids.GRAPH_KEY, "data"),
                 Input(ids.PLAN_RESULT, "data"), Input(ids.IMPORT_RESULT, "data"), *form,
                 prevent_initial_call=True)(bind_config(resolve_plan, config))
    app.callback(
        Output(ids.PLAN_RESULT, "data"), Output(ids.PLAN_STATUS, "children"),
        Input(ids.PLAN_BTN, "n_clicks"), State(ids.GRAPH_KEY, "data"), *form,
        State(ids.SESSION, "data"),
        background=True, prevent_initial_call=True, interval=300,
        running=[(Output(ids.RUNNING, "data"), running.running_patch("plan", True),
                  running.running_patch("plan", False))],
        progress=[Output(ids.PROGRESS, "value"), Output(ids.PROGRESS, "max"),
                  Output(ids.PROGRESS_TEXT, "children")])(plan_job)
    app.callback(Output(ids.PLAN_STATUS, "children", allow_duplicate=True),
                 Output(ids.PROGRESS_TEXT, "children", allow_duplicate=True),
                 Input(ids.CANCEL_BTN, "n_clicks"), State(ids.SESSION, "data"),
                 State(ids.PLAN_BTN, "n_clicks"), prevent_initial_call=True)(cancel_plan)
    app.callback(Output(ids.PLAN_STATUS, "children", allow_duplicate=True),
                 Output(ids.PROGRESS_TEXT, "children", allow_duplicate=True),
                 Output(ids.PROGRESS, "value", allow_duplicate=True),
                 Input(ids.GRAPH_KEY, "data"), prevent_initial_call=True)(clear_plan_status)
    app.callback(Output(ids.SETTINGS_MSG, "children"),
                 *[Input(i, "value") for i in ids.PLAN_FORM],
                 prevent_initial_call=True)(settings_message)  # the start-up settings are valid
    # None fires on load: the layout starts with the buttons of "nothing running"
    app.callback(Output(ids.PLAN_BTN, "disabled"), Output(ids.CANCEL_BTN, "disabled"),
                 Input(ids.RUNNING, "data"), prevent_initial_call=True)(plan_buttons)


def _stores() -> list[dcc.Store]:
    return [store(ids.PLAN_RESULT), store(ids.SESSION, uuid.uuid4().hex)]


VIEW = View("planning", "side", lambda defaults: [_plan_card(defaults.settings)], register,
            stores=_stores)
