"""Thin callbacks: read the stores, ask :mod:`app.services`, write components.

Each callback is a plain module-level function (unit-testable by calling it) registered by
:func:`register`.  Only callbacks raise ``PreventUpdate``.  Background jobs receive and
return keys and JSON only (they run in another process).
"""

from __future__ import annotations

import logging
from typing import Any

import dash
from dash import ALL, Input, Output, State
from dash.exceptions import PreventUpdate

from app import analysis, ids, layout, services, verify
from app.analysis import expand_node, search
from app.planning import PlanSettings
from app.state import get_graph
from roam_core.base.errors import RoamError

__all__ = ["CONFIG", "register"]

_logger = logging.getLogger(__name__)
#: Set by :func:`register`: ``max_upload_bytes``, ``auto_plan_max_ops``.
CONFIG: dict[str, Any] = {"max_upload_bytes": 200 * 2**20, "auto_plan_max_ops": 300}
_PLAN_RESULT, _IMPORT_RESULT = ids.PLAN_RESULT, ids.IMPORT_RESULT


def _settings(method: str, tl: float, nl: int, w: int, al: int) -> PlanSettings:
    return PlanSettings(method or "roam", float(tl or 1), int(nl or 1), int(w or 1),
                        int(al or 1))


def _triggered_value() -> Any:
    trig = dash.ctx.triggered
    return trig[0].get("value") if trig else None


# ------------------------------------------------------------------ loading
def load_graph(sample: str | None, contents: str | None, trace: dict | None,
               filename: str | None) -> tuple[Any, str, None]:
    """Sample pick, upload or finished zoo trace -> graph key (the upload is cleared so
    the same file can be dropped again)."""
    trig = dash.ctx.triggered_id
    try:
        if trig == ids.UPLOAD and contents:
            key = services.graph_from_upload(contents, filename, CONFIG["max_upload_bytes"])
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


def resolve_plan(graph: dict | None, result: dict | None, imported: dict | None,
                 method: str, tl: float, nl: int, w: int, al: int) -> Any:
    """Which plan the views show: a fresh job result, an import, or the cached one."""
    if not graph:
        raise PreventUpdate
    trig = dash.ctx.triggered_id
    for src, data in ((_PLAN_RESULT, result), (_IMPORT_RESULT, imported)):
        if trig == src:
            ok = data and data.get("graph") == graph["key"]
            return data["key"] if ok else dash.no_update  # type: ignore[index]
    s = _settings(method, tl, nl, w, al)
    key = services.cached_plan_key(graph["key"], s)
    if key is None and len(get_graph(graph["key"]).ops) <= CONFIG["auto_plan_max_ops"]:
        try:  # small graphs are planned on load; a failure leaves them unplanned
            key = services.plan_graph(graph["key"], s)
        except Exception:
            _logger.exception("planning %s on load failed", graph["key"])
    return key


def plan_job(set_progress: Any, n: int | None, graph: dict | None, method: str, tl: float,
             nl: int, w: int, al: int) -> tuple[Any, str]:
    """Background: run the planner with progress; returns the plan key as JSON."""
    if not n or not graph:
        raise PreventUpdate
    s = _settings(method, tl, nl, w, al)
    try:
        key = services.plan_graph(graph["key"], s,
                                  lambda p: set_progress(services.progress_values(p)))
    except RoamError as e:
        return dash.no_update, f"Planning failed: {e}"
    except Exception as e:  # a planner bug must reach the user, not only the log
        _logger.exception("planner failed")
        return dash.no_update, f"Planning failed: {type(e).__name__}: {e}"
    return {"key": key, "graph": graph["key"]}, f"planned with {s.method} (key {key[:10]})"


def trace_job(n: int | None, model: str, batch: int, seq: int, optimizer: str,
              setting: str) -> tuple[Any, str]:
    """Background: trace a zoo model server-side."""
    if not n or not model:
        raise PreventUpdate
    try:
        key = services.trace_zoo_graph(model, int(batch or 1), int(seq or 0) or None,
                                       optimizer, setting)
    except Exception as e:  # a trace failure must not kill the app
        return dash.no_update, f"Trace failed: {type(e).__name__}: {e}"
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
    return services.curves_figure(graph["key"], plan, base, rng, (step or {}).get("step"),
                                  sel)


def render_timeline(graph: dict | None, plan: str | None, base: str, rng: Any, sel: Any) -> Any:
    """View 3 (a range change is a patch)."""
    if not graph:
        raise PreventUpdate
    if _only_range_changed():
        return _range_patch(rng)
    return services.timeline_fig(graph["key"], plan, base, rng, sel)


def render_layouts(graph: dict | None, plan: str | None, base: str, rng: Any, sel: Any) -> Any:
    """View 4 (planned and baseline layouts)."""
    if not graph:
        raise PreventUpdate
    return services.layout_figures(graph["key"], plan, base, rng, sel)


def render_panels(graph: dict | None, plan: str | None, base: str) -> Any:
    """View 7: summary."""
    if not graph:
        raise PreventUpdate
    return layout.summary_children(services.summary_rows(graph["key"], plan, base))


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
    return rng, "whole step axis" if rng is None else f"steps {rng[0]:.0f} – {rng[1]:.0f}"


def on_select(layout_click: Any, base_click: Any, tl_click: Any, hits: Any, graph: Any) -> Any:
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
    return {"step": round(click["points"][0]["x"])}


def on_search(query: str | None, graph: dict | None) -> Any:
    """View 6: search by op or tensor name."""
    if not graph or not query:
        return []
    return layout.search_children(search(get_graph(graph["key"]), query))


# ------------------------------------------------------------------ memory by module
def render_modules(graph: dict | None, plan: str | None, base: str, depth: Any, side: str,
                   sel: Any) -> tuple[Any, Any, str]:
    """Per-module table, icicle and title (the selected module outlined)."""
    if not graph:
        raise PreventUpdate
    return services.module_view(graph["key"], plan, base, depth, side, sel)


def on_module_pick(cell: Any, click: Any) -> Any:
    """A module table row or an icicle node selects that module (the root clears it)."""
    value = _triggered_value()
    if not value:
        raise PreventUpdate
    if dash.ctx.triggered_id == ids.MODULE_TABLE:
        label = value.get("row_id")
    else:
        label = value["points"][0].get("id")
    if label is None:
        raise PreventUpdate
    if label == "all":
        return None
    return {"kind": "module", "id": analysis.module_path(str(label))}


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


def on_plan_upload(contents: str | None, filename: str | None, graph: dict | None
                   ) -> tuple[Any, str, None]:
    """Import a plan file: fingerprint and validator checks before it is shown."""
    if not contents or not graph:
        raise PreventUpdate
    try:
        key = services.import_plan(contents, filename, graph["key"], CONFIG["max_upload_bytes"])
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
    return f"Verify on {'GPU' if device == 'cuda' else 'CPU'}"


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
def register(app: dash.Dash, **config: Any) -> None:
    """Register every callback on ``app``."""
    CONFIG.update(config)
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
       prevent_initial_call=True)(load_graph)
    cb(Output(ids.PLAN_KEY, "data"), gk, Input(_PLAN_RESULT, "data"),
       Input(_IMPORT_RESULT, "data"), *settings, prevent_initial_call=True)(resolve_plan)
    cb(Output(_PLAN_RESULT, "data"), Output(ids.PLAN_STATUS, "children"),
       Input(ids.PLAN_BTN, "n_clicks"), State(ids.GRAPH_KEY, "data"), *settings,
       background=True, prevent_initial_call=True, interval=300,
       running=[(Output(ids.PLAN_BTN, "disabled"), True, False),
                (Output(ids.CANCEL_BTN, "disabled"), False, True)],
       progress=[Output(ids.PROGRESS, "value"), Output(ids.PROGRESS, "max"),
                 Output(ids.PROGRESS_TEXT, "children")],
       cancel=[Input(ids.CANCEL_BTN, "n_clicks")])(plan_job)
    cb(Output(ids.TRACE_RESULT, "data"), Output(ids.ZOO_STATUS, "children"),
       Input(ids.ZOO_TRACE_BTN, "n_clicks"),
       *[State(i, "value") for i in (ids.ZOO_MODEL, ids.ZOO_BATCH, ids.ZOO_SEQ,
                                     ids.ZOO_OPTIMIZER, ids.ZOO_SETTING)],
       background=True, prevent_initial_call=True, interval=500,
       running=[(Output(ids.ZOO_TRACE_BTN, "disabled"), True, False),
                (Output(ids.ZOO_CANCEL_BTN, "disabled"), False, True)],
       cancel=[Input(ids.ZOO_CANCEL_BTN, "n_clicks")])(trace_job)
    rng, sel, step = (Input(ids.VIEW_RANGE, "data"), Input(ids.SELECTION, "data"),
                      Input(ids.STEP, "data"))
    cb(Output(ids.CURVES, "figure"), gk, pk, base, rng, step, sel)(render_curves)
    cb(Output(ids.TIMELINE, "figure"), gk, pk, base, rng, sel)(render_timeline)
    cb(Output(ids.LAYOUT, "figure"), Output(ids.BASE_LAYOUT, "figure"), gk, pk, base, rng,
       sel)(render_layouts)
    cb(Output(ids.SUMMARY, "children"), gk, pk, base)(render_panels)
    cb(Output(ids.TREE_OPEN, "data"), Input({"type": ids.TREE_MORE, "index": ALL}, "n_clicks"),
       pk, State(ids.TREE_OPEN, "data"), prevent_initial_call=True)(on_tree_more)
    cb(Output(ids.TREE, "children"), pk, Input(ids.TREE_OPEN, "data"))(render_tree)
    cb(Output(ids.LIVE_TABLE, "data"), Output(ids.LIVE_TITLE, "children"), gk, pk, base,
       step)(render_live)
    cb(Output(ids.EXPLAIN, "children"), gk, pk, base, sel)(render_explain)
    cb(Output(ids.VIEW_RANGE, "data"), Output(ids.RANGE_TEXT, "children"),
       *[Input(g, "relayoutData") for g in (ids.CURVES, ids.TIMELINE, ids.LAYOUT,
                                            ids.BASE_LAYOUT)],
       Input({"type": ids.TREE_NODE, "index": ALL}, "n_clicks"),
       Input({"type": ids.SEARCH_HIT, "index": ALL}, "n_clicks"),
       Input(ids.RESET_ZOOM, "n_clicks"), pk, State(ids.GRAPH_KEY, "data"),
       State(ids.BASELINE, "value"), prevent_initial_call=True)(on_range)
    cb(Output(ids.SELECTION, "data"), Input(ids.LAYOUT, "clickData"),
       Input(ids.BASE_LAYOUT, "clickData"), Input(ids.TIMELINE, "clickData"),
       Input({"type": ids.SEARCH_HIT, "index": ALL}, "n_clicks"), gk,
       prevent_initial_call=True)(on_select)
    cb(Output(ids.STEP, "data"), Input(ids.CURVES, "clickData"), pk,
       prevent_initial_call=True)(on_step)
    cb(Output(ids.SEARCH_RESULTS, "children"), Input(ids.SEARCH_INPUT, "value"),
       gk)(on_search)
    cb(Output(ids.MODULE_TABLE, "data"), Output(ids.MODULE_ICICLE, "figure"),
       Output(ids.MODULE_TITLE, "children"), gk, pk, base, Input(ids.MODULE_DEPTH, "value"),
       Input(ids.MODULE_SIDE, "value"), sel)(render_modules)
    cb(Output(ids.SELECTION, "data", allow_duplicate=True),
       Input(ids.MODULE_TABLE, "active_cell"), Input(ids.MODULE_ICICLE, "clickData"),
       prevent_initial_call=True)(on_module_pick)
    cb(Output(ids.LIVE_TABLE, "style_data_conditional"),
       Output(ids.MODULE_TABLE, "style_data_conditional"), sel)(module_styles)
    cb(Output(ids.DOWNLOAD, "data"), Output(ids.EXPORT_STATUS, "children"),
       *[Input(i, "n_clicks") for i in (ids.EXPORT_JSON, ids.EXPORT_CSV, ids.EXPORT_HTML,
                                        ids.EXPORT_PNG)],
       State(ids.GRAPH_KEY, "data"), State(ids.PLAN_KEY, "data"), State(ids.BASELINE, "value"),
       State(ids.PNG_FIGURE, "value"), prevent_initial_call=True)(on_export)
    cb(Output(_IMPORT_RESULT, "data"), Output(ids.IMPORT_STATUS, "children"),
       Output(ids.PLAN_UPLOAD, "contents"), Input(ids.PLAN_UPLOAD, "contents"),
       State(ids.PLAN_UPLOAD, "filename"),
       State(ids.GRAPH_KEY, "data"), prevent_initial_call=True)(on_plan_upload)
    cb(Output(ids.VERIFY_DEVICE, "options"), Output(ids.VERIFY_DEVICE, "value"),
       Output(ids.VERIFY_NOTE, "children"), Output(ids.VERIFY_BTN, "disabled"), gk, pk,
       State(ids.VERIFY_DEVICE, "value"))(verify_options)
    cb(Output(ids.VERIFY_BTN, "children"), Input(ids.VERIFY_DEVICE, "value"))(verify_label)
    cb(Output(ids.VERIFY_DONE, "data"), Output(ids.VERIFY_STATUS, "children"),
       Input(ids.VERIFY_BTN, "n_clicks"), State(ids.GRAPH_KEY, "data"),
       State(ids.PLAN_KEY, "data"), State(ids.VERIFY_DEVICE, "value"),
       background=True, prevent_initial_call=True, interval=500,
       running=[(Output(ids.VERIFY_BTN, "disabled"), True, False),
                (Output(ids.VERIFY_CANCEL_BTN, "disabled"), False, True)],
       cancel=[Input(ids.VERIFY_CANCEL_BTN, "n_clicks")])(verify_job)
    cb(Output(ids.VERIFY_RESULT, "children"), Input(ids.VERIFY_DONE, "data"), gk, pk,
       Input(ids.VERIFY_DEVICE, "value"))(render_verify)
