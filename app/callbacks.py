"""Thin callbacks: read the stores, ask :mod:`app.services`, write components.

Each callback is a plain module-level function (unit-testable by calling it) registered by
:func:`register`.  Only callbacks raise ``PreventUpdate``.  Background jobs receive and
return keys and JSON only (they run in another process).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dash
from dash import ALL, Input, Output, State
from dash.exceptions import PreventUpdate

from app import analysis, extra_views, ids, layout, lazy, services, verify
from app.analysis import expand_node, search
from app.planning import PlanSettings, settings_from_form
from app.state import get_graph, get_plan
from roam_core.base.errors import ConfigError, RoamError

__all__ = ["AppConfig", "register"]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppConfig:
    """Per-app settings the callbacks read (bound at :func:`register`; also kept as
    ``app.server.config["ROAM"]``).  No module-level state: two apps in one process keep
    their own limits."""

    max_upload_bytes: int = 200 * 2**20
    auto_plan_max_ops: int = 300


DEFAULT_CONFIG = AppConfig()
_PLAN_RESULT, _IMPORT_RESULT = ids.PLAN_RESULT, ids.IMPORT_RESULT


def _settings(method: str, tl: float, nl: int, w: int, al: int) -> PlanSettings:
    """The settings from the form (:func:`app.planning.settings_from_form`)."""
    return settings_from_form(method, tl, nl, w, al)


def settings_message(method: str, tl: float, nl: int, w: int, al: int) -> str:
    """Says at once what is wrong with the plan settings (empty when fine)."""
    try:
        _settings(method, tl, nl, w, al)
    except ConfigError as e:
        return f"Settings: {e}"
    return ""


def _triggered_value() -> Any:
    trig = dash.ctx.triggered
    return trig[0].get("value") if trig else None


# ------------------------------------------------------------------ loading
def load_graph(sample: str | None, contents: str | None, trace: dict | None,
               filename: str | None, *, config: AppConfig = DEFAULT_CONFIG
               ) -> tuple[Any, str, None]:
    """Sample pick, upload or finished zoo trace -> graph key (the upload is cleared so
    the same file can be dropped again)."""
    trig = dash.ctx.triggered_id
    try:
        if trig == ids.UPLOAD and contents:
            key = services.graph_from_upload(contents, filename, config.max_upload_bytes)
        elif trig == ids.TRACE_RESULT and trace and trace.get("key"):
            key = trace["key"]
        elif trig == ids.SAMPLE_PICK and sample:
            key = services.load_choice(sample)
        else:
            raise PreventUpdate
    except RoamError as e:
        return dash.no_update, f"Error: {e}", None
    g = get_graph(key)
    return {"key": key, "name": g.name}, f"loaded {g.name}: {len(g.ops)} ops", None


def sample_pick_for(graph: dict | None, current: str | None, options: list | None
                    ) -> tuple[Any, str]:
    """The sample dropdown follows the loaded graph: it keeps a sample's value, and clears
    (naming the graph in its placeholder) once an upload or a trace replaced it."""
    if not graph:
        raise PreventUpdate
    name = graph.get("name", "")
    values = {o["value"] for o in options or ()}
    if current in values and current is not None and _choice_name(current) == name:
        return dash.no_update, "pick a sample graph"
    return None, f"{name} (loaded; not a sample)"


def _choice_name(value: str) -> str:
    """Graph name of a dropdown value (``file:mlp-b8-steady.json.gz`` -> ``mlp-b8-steady``)."""
    return value.partition(":")[2].split(".")[0]


def clear_plan_status(graph: dict | None) -> tuple[str, str, int]:
    """A new graph: the previous graph's plan status and progress go away."""
    if not graph:
        raise PreventUpdate
    return "", "", 0


def resolve_plan(graph: dict | None, result: dict | None, imported: dict | None,
                 method: str, tl: float, nl: int, w: int, al: int, *,
                 config: AppConfig = DEFAULT_CONFIG) -> Any:
    """Which plan the views show: a fresh job result, an import, or the cached one."""
    if not graph:
        raise PreventUpdate
    trig = dash.ctx.triggered_id
    for src, data in ((_PLAN_RESULT, result), (_IMPORT_RESULT, imported)):
        if trig == src:
            ok = data and data.get("graph") == graph["key"]
            return data["key"] if ok else dash.no_update  # type: ignore[index]
    try:
        s = _settings(method, tl, nl, w, al)
    except ConfigError:
        return dash.no_update  # the settings message says why
    key = services.cached_plan_key(graph["key"], s)
    if key is None and len(get_graph(graph["key"]).ops) <= config.auto_plan_max_ops:
        try:  # small graphs are planned on load; a failure leaves them unplanned
            key = services.plan_graph(graph["key"], s)
        except Exception:
            _logger.exception("planning %s on load failed", graph["key"])
    return key


def plan_job(set_progress: Any, n: int | None, graph: dict | None, method: str, tl: float,
             nl: int, w: int, al: int, session: str | None = None) -> tuple[Any, str]:
    """Background: run the planner with progress; returns the plan key as JSON.

    Cancel is cooperative (:func:`cancel_plan` writes a request that the planner polls):
    the planner stops and the best valid plan found so far is shown, marked cancelled.
    """
    if not n or not graph:
        raise PreventUpdate
    try:
        s = _settings(method, tl, nl, w, al)
    except ConfigError as e:
        return dash.no_update, f"Planning not started: {e}"
    cancel = services.cancel_flag(session, n) if session else None
    track = services.PlanProgressTracker(s.time_limit_s)
    t0 = time.monotonic()

    def report(p: Any) -> None:
        if cancel is None or not cancel():  # after a cancel the text says "cancelling"
            set_progress(track(p))

    try:
        key, cancelled = services.plan_graph_job(graph["key"], s, report, cancel)
    except RoamError as e:
        return dash.no_update, f"Planning failed: {e}"
    except Exception as e:  # a planner bug must reach the user, not only the log
        _logger.exception("planner failed")
        return dash.no_update, f"Planning failed: {type(e).__name__}: {e}"
    if cancelled:
        peak = analysis.fmt_bytes(get_plan(key).planned_peak_bytes)
        set_progress((0, 1, f"cancelled after {time.monotonic() - t0:.1f} s"))
        return ({"key": key, "graph": graph["key"], "cancelled": True},
                f"cancelled: showing the best plan found so far (peak {peak})")
    return {"key": key, "graph": graph["key"]}, f"planned with {s.method} (key {key[:10]})"


def cancel_plan(n: int | None, session: str | None, run: int | None) -> tuple[str, str]:
    """Cancel pressed: ask this page's running planner job to stop."""
    if not n or not session or not run:
        raise PreventUpdate
    services.request_cancel(session, run)
    return ("cancelling: the planner stops at its next check and keeps the best plan "
            "found so far…", "cancelled: stopping the planner…")


def cancelled(n: int | None) -> str:
    """Cancel of a job that has no partial result (trace, verify): it is stopped."""
    if not n:
        raise PreventUpdate
    return "cancelled"


def buttons(running: dict | None, verify_off: bool | None, zoo: list | None
            ) -> tuple[bool, bool, bool, bool, bool, bool]:
    """Every job button from the one ``RUNNING`` store: ``disabled`` of (Plan, Cancel, Trace,
    Cancel trace, Verify, Cancel verify)."""
    r = running or {}
    plan, trace, ver = bool(r.get("plan")), bool(r.get("trace")), bool(r.get("verify"))
    return (plan, not plan, trace or not zoo, not trace, ver or verify_off is not False,
            not ver)


def plan_buttons(running: dict | None) -> tuple[bool, bool]:
    """Plan / Cancel ``disabled`` from the ``RUNNING`` store."""
    return buttons(running, None, None)[:2]


def trace_buttons(running: dict | None, zoo: list | None) -> tuple[bool, bool]:
    """Trace / Cancel ``disabled`` from the ``RUNNING`` store (Trace off without a zoo)."""
    return buttons(running, None, zoo)[2:4]


def verify_buttons(running: dict | None, verify_off: bool | None) -> tuple[bool, bool]:
    """Verify / Cancel ``disabled`` from the ``RUNNING`` store and the device check."""
    return buttons(running, verify_off, None)[4:]


def _running(job: str, on: bool) -> dash.Patch:
    patch = dash.Patch()
    patch[job] = on
    return patch


def trace_job(set_progress: Any, n: int | None, model: str, batch: int, seq: int,
              optimizer: str, setting: str) -> tuple[Any, str]:
    """Background: trace a zoo model server-side (a status line ticks while it runs)."""
    if not n or not model:
        raise PreventUpdate
    what = f"tracing {model} (batch {int(batch or 1)})"
    done = threading.Event()
    t0 = time.monotonic()

    def tick() -> None:
        while not done.wait(1.0):
            set_progress((f"{what}: {time.monotonic() - t0:.0f} s (large models take a "
                          "minute or more)",))

    set_progress((f"{what}…",))
    threading.Thread(target=tick, name="roam-trace-status", daemon=True).start()
    try:
        key = services.trace_zoo_graph(model, int(batch or 1), int(seq or 0) or None,
                                       optimizer, setting)
    except Exception as e:  # a trace failure must not kill the app
        return dash.no_update, f"Trace failed: {type(e).__name__}: {e}"
    finally:
        done.set()
    set_progress((f"traced in {time.monotonic() - t0:.1f} s",))
    return {"key": key}, f"traced {model}"


# ------------------------------------------------------------------ views
def _only_range_changed() -> bool:
    return list(dash.ctx.triggered_prop_ids) == [f"{ids.VIEW_RANGE}.data"]


def _range_patch(rng: list[float] | None) -> dash.Patch:
    """Only the x range changes: send a patch, not the figure."""
    patch = dash.Patch()
    patch["layout"]["xaxis"]["autorange"] = rng is None
    if rng is not None:
        patch["layout"]["xaxis"]["range"] = rng
    return patch


def render_curves(graph: dict | None, plan: str | None, base: str, rng: Any, step: Any,
                  sel: Any = None) -> Any:
    """View 1 (re-rendered on zoom: long curves are decimated outside the window)."""
    if not graph:
        raise PreventUpdate
    return services.curves_dict(graph["key"], plan, base, rng, (step or {}).get("step"), sel)


def render_timeline(graph: dict | None, plan: str | None, base: str, rng: Any, sel: Any) -> Any:
    """View 3 (a range change is a patch)."""
    if not graph:
        raise PreventUpdate
    if _only_range_changed():
        return _range_patch(rng)
    return services.timeline_dict(graph["key"], plan, base, rng, sel)


def render_layouts(graph: dict | None, plan: str | None, base: str, rng: Any, sel: Any) -> Any:
    """View 4 (planned and baseline layouts)."""
    if not graph:
        raise PreventUpdate
    return services.layout_dicts(graph["key"], plan, base, rng, sel)


def render_panels(graph: dict | None, plan: str | None, base: str) -> Any:
    """View 7: summary."""
    if not graph:
        raise PreventUpdate
    return layout.summary_children(services.summary_rows(graph["key"], plan, base))


def render_walkthrough(graph: dict | None, plan: str | None, base: str) -> Any:
    """The guided walkthrough (open by itself on the teaching graphs)."""
    if not graph:
        raise PreventUpdate
    return layout.walkthrough_children(*services.walkthrough_steps(graph["key"], plan, base))


def render_tree(plan: str | None, shown: dict | None) -> Any:
    """View 2: the task tree, with the user's expansions mounted."""
    return layout.tree_children(services.tree_of(plan), shown)


def on_tree_more(clicks: Any, plan: str | None, shown: dict | None) -> dict:
    """"+ N more sub-tasks": mount one more page of that node (a new plan folds all)."""
    trig = dash.ctx.triggered_id
    if trig == ids.PLAN_KEY:
        return {}
    if not isinstance(trig, dict) or not _triggered_value():
        raise PreventUpdate  # a re-rendered tree mounts unclicked buttons
    return expand_node(services.tree_of(plan), shown or {}, trig["index"])


def render_live(graph: dict | None, plan: str | None, base: str, step: Any) -> tuple[Any, str]:
    """View 5: live tensors at the clicked step (the peak by default)."""
    if not graph:
        raise PreventUpdate
    return services.live_table(graph["key"], plan, base, (step or {}).get("step"))


def live_tooltips(rows: list | None) -> list:
    """Exact bytes of the live table's sizes and offsets, on hover."""
    return services.live_tooltips(rows or [])


def render_explain(graph: dict | None, plan: str | None, base: str, sel: Any) -> Any:
    """View 8."""
    if not graph:
        raise PreventUpdate
    return layout.explain_children(services.explain_sections(graph["key"], plan, base, sel))


# ------------------------------------------------------------------ linking
def on_range(*args: Any) -> tuple[Any, str]:
    """One step window for every view: zoom events, tree clicks, search hits, reset."""
    *_, plan, graph, base = args
    trig = dash.ctx.triggered_id
    if trig in (ids.PLAN_KEY, ids.RESET_ZOOM):
        return None, "whole step axis"
    if isinstance(trig, dict):
        if not _triggered_value():
            raise PreventUpdate
        kind, ident = ("node", trig["index"]) if trig["type"] == ids.TREE_NODE else \
            tuple(trig["index"].split(":", 1))
        rng = services.range_of(graph["key"], plan, base, kind, ident)
    else:
        rng = services.range_from_relayout(_triggered_value())
    if rng == "keep":
        raise PreventUpdate
    if rng is None:
        return rng, "whole step axis"
    return rng, f"steps {max(math.ceil(rng[0]), 0)} – {math.floor(rng[1])}"


def on_select(layout_click: Any, base_click: Any, tl_click: Any, hits: Any, graph: Any,
              tour_hits: Any = None) -> Any:
    """Selected op or tensor (from a click or a search hit)."""
    trig, value = dash.ctx.triggered_id, _triggered_value()
    if trig == ids.GRAPH_KEY:
        return None
    if not value:
        raise PreventUpdate
    if isinstance(trig, dict):
        kind, ident = trig["index"].split(":", 1)
        return {"kind": kind, "id": ident}
    point = value["points"][0]
    if not point.get("text"):
        raise PreventUpdate
    return {"kind": "op" if trig == ids.TIMELINE else "tensor", "id": point["text"]}


def on_step(click: Any, plan: Any) -> Any:
    """Clicked step on the memory curves (reset to the peak on a new plan)."""
    if dash.ctx.triggered_id == ids.PLAN_KEY:
        return None
    if not click:
        raise PreventUpdate
    return {"step": math.floor(click["points"][0]["x"])}  # step s spans [s, s + 1)


def on_search(query: str | None, graph: dict | None) -> Any:
    """View 6: search by op or tensor name."""
    if not graph or not query:
        return []
    return layout.search_children(search(get_graph(graph["key"]), query))


# ------------------------------------------------------------------ memory by module
def render_modules(graph: dict | None, plan: str | None, base: str, depth: Any, side: str,
                   sel: Any, seen: Any = True) -> tuple[Any, Any, str]:
    """Per-module table, icicle and title (the selected module outlined); nothing until the
    card has been scrolled into view (``seen``)."""
    if not graph or not seen:
        raise PreventUpdate
    return services.module_view_dict(graph["key"], plan, base, depth, side, sel)


def on_module_pick(cell: Any) -> Any:
    """A module table row selects that module."""
    label = (cell or {}).get("row_id")
    if label is None:
        raise PreventUpdate
    return {"kind": "module", "id": analysis.module_path(str(label))}


#: An icicle click (``assets/module_icicle.js`` turns it into clickData without plotly's
#: zoom) selects its module; the root clears the selection.
ICICLE_PICK_JS = """
function(click) {
    const p = click && click.points && click.points[0];
    if (!p || p.id === undefined) { return window.dash_clientside.no_update; }
    if (p.id === "all") { return null; }
    return {kind: "module", id: p.id === "TOP_LEVEL" ? "" : p.id};
}
""".replace("TOP_LEVEL", analysis.TOP_LEVEL)


def module_styles(sel: Any) -> tuple[Any, Any]:
    """Rows of the selected module highlighted in the live and module tables."""
    style = services.module_highlight_style(sel)
    return style, style


# ------------------------------------------------------------------ export / import
def on_export(_j: Any, _c: Any, _h: Any, _p: Any, graph: dict | None, plan: str | None,
              base: str, figure: str) -> tuple[Any, str]:
    """Plan JSON, MiniMalloc CSV, offline HTML report or PNG of one figure."""
    kind = {ids.EXPORT_JSON: "json", ids.EXPORT_CSV: "csv", ids.EXPORT_HTML: "html",
            ids.EXPORT_PNG: "png"}.get(dash.ctx.triggered_id)
    if not kind or not graph or not _triggered_value():
        raise PreventUpdate
    try:
        payload = services.export_payload(kind, graph["key"], plan, base, figure)
    except Exception as e:  # kaleido/chromium failures are shown, not raised
        return dash.no_update, f"Export failed: {type(e).__name__}: {e}"
    return payload, f"exported {payload['filename']}"


def on_plan_upload(contents: str | None, filename: str | None, graph: dict | None, *,
                   config: AppConfig = DEFAULT_CONFIG) -> tuple[Any, str, None]:
    """Import a plan file: fingerprint and validator checks before it is shown."""
    if not contents or not graph:
        raise PreventUpdate
    try:
        key = services.import_plan(contents, filename, graph["key"], config.max_upload_bytes)
    except RoamError as e:
        return dash.no_update, f"Import failed: {e}", None
    msg = f"imported {filename}: valid for this graph"
    return {"key": key, "graph": graph["key"]}, msg, None


# ------------------------------------------------------------------ verify
def verify_options(graph: dict | None, plan: str | None, current: str | None
                   ) -> tuple[Any, Any, str, bool]:
    """Devices that may verify this plan (disabled ones with the reason shown)."""
    o = verify.verify_options((graph or {}).get("key"), plan, current)
    return o["options"], o["value"], o["note"], o["disabled"]


def verify_label(device: str | None) -> str:
    """The button says where it runs."""
    return layout.verify_label_text(device)


def verify_job(n: int | None, graph: dict | None, plan: str | None, device: str | None
               ) -> tuple[Any, str]:
    """Background: run the plan for real (torch is imported in the job process only)."""
    if not n or not graph or not plan or not device:
        raise PreventUpdate
    try:
        res = verify.run_verify(graph["key"], plan, device)
    except Exception as e:  # an executor failure must reach the user, not kill the app
        _logger.exception("verify failed")
        return dash.no_update, f"Verify failed: {type(e).__name__}: {e}"
    ok = res["report"]["numerics_ok"]
    msg = (f"verified {graph.get('name', '')} on {device}: {'pass' if ok else 'FAIL'} "
           f"({res['wall_time_s']:.1f} s)")
    return {"key": res["key"], "device": device}, msg


def render_verify(_done: Any, graph: dict | None, plan: str | None, device: str | None
                  ) -> Any:
    """The stored report of this plan on this device, next to the plan."""
    res = verify.cached_result((graph or {}).get("key"), plan, device)
    if res is None:
        return layout.verify_children(None, [])
    return layout.verify_children(*verify.report_rows(res["report"]))


# ------------------------------------------------------------------ wiring
def _bind(fn: Callable[..., Any], config: AppConfig) -> Callable[..., Any]:
    """``fn`` with this app's ``config`` (Dash passes only the dependencies)."""
    @functools.wraps(fn)
    def bound(*args: Any) -> Any:
        return fn(*args, config=config)

    return bound


def register(app: dash.Dash, config: AppConfig = DEFAULT_CONFIG) -> None:
    """Register every callback on ``app``, bound to ``config``."""
    app.server.config["ROAM"] = config
    extra_views.register(app)  # Budget, What fits, Measured memory (app.extra_views)
    verify.cuda_status()  # probed once at start-up, in a subprocess (no torch in the server)
    gk, pk, base = (Input(ids.GRAPH_KEY, "data"), Input(ids.PLAN_KEY, "data"),
                    Input(ids.BASELINE, "value"))
    settings = [State(i, "value") for i in (ids.METHOD, ids.TIME_LIMIT, ids.NODE_LIMIT,
                                            ids.WORKERS, ids.ALIGNMENT)]
    cb = app.callback
    cb(Output(ids.GRAPH_KEY, "data"), Output(ids.LOAD_STATUS, "children"),
       Output(ids.UPLOAD, "contents"), Input(ids.SAMPLE_PICK, "value"),
       Input(ids.UPLOAD, "contents"),
       Input(ids.TRACE_RESULT, "data"), State(ids.UPLOAD, "filename"),
       prevent_initial_call=True)(_bind(load_graph, config))
    cb(Output(ids.PLAN_KEY, "data"), gk, Input(_PLAN_RESULT, "data"),
       Input(_IMPORT_RESULT, "data"), *settings,
       prevent_initial_call=True)(_bind(resolve_plan, config))
    cb(Output(_PLAN_RESULT, "data"), Output(ids.PLAN_STATUS, "children"),
       Input(ids.PLAN_BTN, "n_clicks"), State(ids.GRAPH_KEY, "data"), *settings,
       State(ids.SESSION, "data"),
       background=True, prevent_initial_call=True, interval=300,
       running=[(Output(ids.RUNNING, "data"), _running("plan", True),
                 _running("plan", False))],
       progress=[Output(ids.PROGRESS, "value"), Output(ids.PROGRESS, "max"),
                 Output(ids.PROGRESS_TEXT, "children")])(plan_job)
    cb(Output(ids.PLAN_STATUS, "children", allow_duplicate=True),
       Output(ids.PROGRESS_TEXT, "children", allow_duplicate=True),
       Input(ids.CANCEL_BTN, "n_clicks"), State(ids.SESSION, "data"),
       State(ids.PLAN_BTN, "n_clicks"), prevent_initial_call=True)(cancel_plan)
    cb(Output(ids.PLAN_STATUS, "children", allow_duplicate=True),
       Output(ids.PROGRESS_TEXT, "children", allow_duplicate=True),
       Output(ids.PROGRESS, "value", allow_duplicate=True), gk,
       prevent_initial_call=True)(clear_plan_status)
    cb(Output(ids.SAMPLE_PICK, "value", allow_duplicate=True),
       Output(ids.SAMPLE_PICK, "placeholder"), gk, State(ids.SAMPLE_PICK, "value"),
       State(ids.SAMPLE_PICK, "options"), prevent_initial_call=True)(sample_pick_for)
    cb(Output(ids.SETTINGS_MSG, "children"), *[Input(i, "value") for i in (
        ids.METHOD, ids.TIME_LIMIT, ids.NODE_LIMIT, ids.WORKERS, ids.ALIGNMENT)],
       prevent_initial_call=True)(settings_message)  # the start-up settings are valid
    cb(Output(ids.TRACE_RESULT, "data"), Output(ids.ZOO_STATUS, "children"),
       Input(ids.ZOO_TRACE_BTN, "n_clicks"),
       *[State(i, "value") for i in (ids.ZOO_MODEL, ids.ZOO_BATCH, ids.ZOO_SEQ,
                                     ids.ZOO_OPTIMIZER, ids.ZOO_SETTING)],
       background=True, prevent_initial_call=True, interval=500,
       running=[(Output(ids.RUNNING, "data"), _running("trace", True),
                 _running("trace", False))],
       progress=[Output(ids.ZOO_PROGRESS, "children")],
       cancel=[Input(ids.ZOO_CANCEL_BTN, "n_clicks")])(trace_job)
    cb(Output(ids.ZOO_STATUS, "children", allow_duplicate=True),
       Input(ids.ZOO_CANCEL_BTN, "n_clicks"), prevent_initial_call=True)(cancelled)
    # one callback per job: Dash holds a callback back while any of its inputs may still be
    # changed by a running chain, so the Plan buttons must not wait on the verify inputs.
    # None fires on load: the layout starts with the buttons of "nothing running".
    cb(Output(ids.PLAN_BTN, "disabled"), Output(ids.CANCEL_BTN, "disabled"),
       Input(ids.RUNNING, "data"), prevent_initial_call=True)(plan_buttons)
    cb(Output(ids.ZOO_TRACE_BTN, "disabled"), Output(ids.ZOO_CANCEL_BTN, "disabled"),
       Input(ids.RUNNING, "data"), State(ids.ZOO_MODEL, "options"),
       prevent_initial_call=True)(trace_buttons)
    cb(Output(ids.VERIFY_BTN, "disabled"), Output(ids.VERIFY_CANCEL_BTN, "disabled"),
       Input(ids.RUNNING, "data"), Input(ids.VERIFY_OFF, "data"),
       prevent_initial_call=True)(verify_buttons)
    rng, sel, step = (Input(ids.VIEW_RANGE, "data"), Input(ids.SELECTION, "data"),
                      Input(ids.STEP, "data"))
    cb(Output(ids.CURVES, "figure"), gk, pk, base, rng, step, sel)(render_curves)
    cb(Output(ids.TIMELINE, "figure"), gk, pk, base, rng, sel)(render_timeline)
    cb(Output(ids.LAYOUT, "figure"), Output(ids.BASE_LAYOUT, "figure"), gk, pk, base, rng,
       sel)(render_layouts)
    cb(Output(ids.SUMMARY, "children"), gk, pk, base)(render_panels)
    cb(Output(ids.TOUR, "children"), gk, pk, base)(render_walkthrough)
    cb(Output(ids.TREE_OPEN, "data"), Input({"type": ids.TREE_MORE, "index": ALL}, "n_clicks"),
       pk, State(ids.TREE_OPEN, "data"), prevent_initial_call=True)(on_tree_more)
    cb(Output(ids.TREE, "children"), pk, Input(ids.TREE_OPEN, "data"))(render_tree)
    cb(Output(ids.LIVE_TABLE, "data"), Output(ids.LIVE_TITLE, "children"), gk, pk, base,
       step)(render_live)
    cb(Output(ids.LIVE_TABLE, "tooltip_data"), Input(ids.LIVE_TABLE, "data"))(live_tooltips)
    cb(Output(ids.EXPLAIN, "children"), gk, pk, base, sel)(render_explain)
    cb(Output(ids.VIEW_RANGE, "data"), Output(ids.RANGE_TEXT, "children"),
       *[Input(g, "relayoutData") for g in (ids.CURVES, ids.TIMELINE, ids.LAYOUT,
                                            ids.BASE_LAYOUT)],
       Input({"type": ids.TREE_NODE, "index": ALL}, "n_clicks"),
       Input({"type": ids.SEARCH_HIT, "index": ALL}, "n_clicks"),
       Input({"type": ids.TOUR_HIT, "index": ALL, "step": ALL}, "n_clicks"),
       Input(ids.RESET_ZOOM, "n_clicks"), pk, State(ids.GRAPH_KEY, "data"),
       State(ids.BASELINE, "value"), prevent_initial_call=True)(on_range)
    cb(Output(ids.SELECTION, "data"), Input(ids.LAYOUT, "clickData"),
       Input(ids.BASE_LAYOUT, "clickData"), Input(ids.TIMELINE, "clickData"),
       Input({"type": ids.SEARCH_HIT, "index": ALL}, "n_clicks"), gk,
       Input({"type": ids.TOUR_HIT, "index": ALL, "step": ALL}, "n_clicks"),
       prevent_initial_call=True)(on_select)
    cb(Output(ids.STEP, "data"), Input(ids.CURVES, "clickData"), pk,
       prevent_initial_call=True)(on_step)
    cb(Output(ids.SEARCH_RESULTS, "children"), Input(ids.SEARCH_INPUT, "value"),
       gk, prevent_initial_call=True)(on_search)  # no query at start: no hits
    cb(Output(ids.MODULE_TABLE, "data"), Output(ids.MODULE_ICICLE, "figure"),
       Output(ids.MODULE_TITLE, "children"), gk, pk, base, Input(ids.MODULE_DEPTH, "value"),
       Input(ids.MODULE_SIDE, "value"), sel, Input(ids.MODULE_SEEN, "data"))(render_modules)
    lazy.register_seen(app, ids.MODULE_CARD, ids.MODULE_SEEN)  # below the fold: drawn when seen
    cb(Output(ids.SELECTION, "data", allow_duplicate=True),
       Input(ids.MODULE_TABLE, "active_cell"), prevent_initial_call=True)(on_module_pick)
    app.clientside_callback(ICICLE_PICK_JS, Output(ids.SELECTION, "data", allow_duplicate=True),
                            Input(ids.MODULE_ICICLE, "clickData"), prevent_initial_call=True)
    cb(Output(ids.LIVE_TABLE, "style_data_conditional"),
       Output(ids.MODULE_TABLE, "style_data_conditional"), sel,
       prevent_initial_call=True)(module_styles)  # nothing selected at start
    cb(Output(ids.DOWNLOAD, "data"), Output(ids.EXPORT_STATUS, "children"),
       *[Input(i, "n_clicks") for i in (ids.EXPORT_JSON, ids.EXPORT_CSV, ids.EXPORT_HTML,
                                        ids.EXPORT_PNG)],
       State(ids.GRAPH_KEY, "data"), State(ids.PLAN_KEY, "data"), State(ids.BASELINE, "value"),
       State(ids.PNG_FIGURE, "value"), prevent_initial_call=True)(on_export)
    cb(Output(_IMPORT_RESULT, "data"), Output(ids.IMPORT_STATUS, "children"),
       Output(ids.PLAN_UPLOAD, "contents"), Input(ids.PLAN_UPLOAD, "contents"),
       State(ids.PLAN_UPLOAD, "filename"),
       State(ids.GRAPH_KEY, "data"), prevent_initial_call=True)(_bind(on_plan_upload, config))
    cb(Output(ids.VERIFY_DEVICE, "options"), Output(ids.VERIFY_DEVICE, "value"),
       Output(ids.VERIFY_NOTE, "children"), Output(ids.VERIFY_OFF, "data"), gk, pk,
       State(ids.VERIFY_DEVICE, "value"))(verify_options)
    cb(Output(ids.VERIFY_BTN, "children"), Input(ids.VERIFY_DEVICE, "value"),
       prevent_initial_call=True)(verify_label)  # verify_options sets the device
    cb(Output(ids.VERIFY_DONE, "data"), Output(ids.VERIFY_STATUS, "children"),
       Input(ids.VERIFY_BTN, "n_clicks"), State(ids.GRAPH_KEY, "data"),
       State(ids.PLAN_KEY, "data"), State(ids.VERIFY_DEVICE, "value"),
       background=True, prevent_initial_call=True, interval=500,
       running=[(Output(ids.RUNNING, "data"), _running("verify", True),
                 _running("verify", False))],
       cancel=[Input(ids.VERIFY_CANCEL_BTN, "n_clicks")])(verify_job)
    cb(Output(ids.VERIFY_STATUS, "children", allow_duplicate=True),
       Input(ids.VERIFY_CANCEL_BTN, "n_clicks"), prevent_initial_call=True)(cancelled)
    cb(Output(ids.VERIFY_RESULT, "children"), Input(ids.VERIFY_DONE, "data"), gk, pk,
       Input(ids.VERIFY_DEVICE, "value"),
       prevent_initial_call=True)(render_verify)  # verify_options sets the device
