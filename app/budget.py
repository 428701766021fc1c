"""Budget view: peak memory against extra compute, roam's budget plans and the baselines.

``frontier`` runs :func:`roam_core.planner.budget_frontier.recompute_frontier` (roam at ``budgets``
budgets plus every checkpointing baseline and, for a zoo model's trace, torch's own min-cut
partitioner at several ``activation_memory_budget`` values) as a background job, stores
every plan in the cache and returns one JSON record (cached by graph + settings).  Clicking a
point loads its plan into every view.  Service and figure functions take plain values
(unit-tested); the Dash pieces are :func:`card` and :func:`register`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, dash_table, dcc, html
from dash.exceptions import PreventUpdate

from app import ids, lazy, state
from app.analysis import fmt_bytes
from app.planning import PlanSettings
from roam_core.base.errors import RoamError
from roam_core.recompute.baselines import BASELINES

__all__ = ["BASELINE_LABELS", "card", "frontier", "frontier_figure", "frontier_key",
           "frontier_rows", "method_label", "register"]

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
MIN_CUT = "torch_min_cut_"  # method prefix of torch's partitioner points
MIN_CUT_COLOR = "#ff7f0e"

#: Words for the baseline policies (the registry of :mod:`roam_core.recompute.baselines`).
BASELINE_LABELS = {name: b.description for name, b in BASELINES.items()}
_SYMBOLS = {"none": "circle-open", "checkpoint_blocks": "square", "checkpoint_every_2": "diamond",
            "sqrt_segments": "triangle-up", "checkpoint_sequential": "cross",
            "selective_attention": "star"}
_COLORS = {"none": "#7f7f7f", "checkpoint_blocks": "#1f77b4", "checkpoint_every_2": "#2ca02c",
           "sqrt_segments": "#9467bd", "checkpoint_sequential": "#8c564b",
           "selective_attention": "#bcbd22"}
ROAM_COLOR = "#d62728"


def method_label(method: str) -> str:
    """A frontier method in words (``torch_min_cut_0.3`` -> ``torch min-cut, budget 0.3``)."""
    if method.startswith(MIN_CUT):
        return f"torch min-cut, budget {method[len(MIN_CUT):]}"
    return BASELINE_LABELS.get(method, method)


def byte_unit(max_bytes: float) -> tuple[float, str]:
    """``(divisor, name)`` of the binary unit that shows ``max_bytes`` best (B .. TiB)."""
    names = ("B", "KiB", "MiB", "GiB", "TiB")
    i = 0
    while max_bytes >= 1024 ** (i + 1) and i < len(names) - 1:
        i += 1
    return float(1024**i), names[i]


def flops_text(flops: float) -> str:
    """``1.2 GFLOP`` style."""
    for div, name in ((1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP")):
        if flops >= div:
            return f"{flops / div:,.2f} {name}"
    return f"{flops:,.0f} FLOP"


# ------------------------------------------------------------------ service (no Dash)
def frontier_key(graph_key: str, settings: PlanSettings, budgets: int,
                 min_cut: bool = True) -> str:
    """Cache key of a frontier: graph, planner settings, the number of budgets and whether
    torch's min-cut baseline was asked for."""
    blob = json.dumps([graph_key, settings.as_dict(), int(budgets)]
                      + ([] if min_cut else ["no-min-cut"]), sort_keys=True).encode()
    return "fr-" + hashlib.sha256(blob).hexdigest()[:32]


def _min_cut_baselines(graph: Any, progress: Callable[[int, int, str], None] | None,
                       total: int) -> tuple[dict[str, Any], list[str]]:
    """torch's min-cut drop sets for a zoo model's trace (else none, with the reason)."""
    if (graph.origin or {}).get("source") != "zoo":
        return {}, ["baseline torch_min_cut: not applicable (the graph is not a zoo model's "
                    "trace: torch's partitioner needs the model)"]
    try:
        from roam_core.trace.min_cut import MIN_CUT_BUDGETS
        from roam_core.zoo.min_cut import min_cut_baselines
    except ImportError as e:
        return {}, [f"baseline torch_min_cut: not applicable (torch is not installed: {e})"]
    if progress is not None:
        progress(0, total, "torch's min-cut partitioner: tracing the model again with AOT "
                           "autograd")
    _, extra, notes = min_cut_baselines(graph, MIN_CUT_BUDGETS)
    return extra, notes


def frontier(graph_key: str, settings: PlanSettings, budgets: int = 8,
             progress: Callable[[int, int, str], None] | None = None,
             min_cut: bool = True) -> str:
    """Plan the frontier of a stored graph (or find it cached); returns its cache key.

    With ``min_cut`` and a graph traced from the zoo, torch's min-cut partitioner
    (:mod:`roam_core.zoo.min_cut`) adds one baseline per ``activation_memory_budget``.
    The stored record is ``{"graph", "graph_name", "step_flops", "points": [{"method",
    "label", "peak_bytes", "extra_flops", "extra_pct", "budget_bytes", "recomputed_ops",
    "extra_bytes_moved", "kept", "plan_key"}], "notes"}``; every plan is stored under its
    ``plan_key``.
    """
    from roam_core.planner.budget_frontier import recompute_frontier
    from roam_core.planner.config import PlannerConfig

    key = frontier_key(graph_key, settings, budgets, min_cut)
    if state.get_json(key) is not None:
        return key
    graph = state.get_graph(graph_key)
    cfg = PlannerConfig(time_limit_s=settings.time_limit_s, node_limit=settings.node_limit,
                        workers=settings.workers, alignment_bytes=settings.alignment_bytes)
    # one plain plan, one per baseline, one per budget (plus a roam point at each baseline's
    # memory): the count of planner calls is the progress bar
    total = 1 + 2 * len(BASELINES) + int(budgets)
    extra: dict[str, Any] = {}
    mc_notes: list[str] = []
    if min_cut:
        extra, mc_notes = _min_cut_baselines(graph, progress, total)
        total += 2 * len(extra)
    calls = [0]

    def counted(_graph: Any) -> None:
        calls[0] += 1
        if progress is not None:
            what = "plan without recomputation" if calls[0] == 1 else (
                f"plan {calls[0]} (baselines, then roam at each budget)")
            progress(min(calls[0], total - 1), total, f"{what}: {calls[0]}/~{total}")

    plans: dict[str, Any] = {}
    sf, points, notes = recompute_frontier(graph, cfg, budgets=int(budgets), plans=plans,
                                           extra_baselines=extra, on_plan=counted)
    keys = {label: state.put_plan(p) for label, p in plans.items()}
    out = []
    for p in points:
        label = p.method if p.method != "roam" else (
            f"roam-flops@{p.budget_bytes}" if p.kept.endswith(", fewest FLOPs")
            else f"roam@{p.budget_bytes}")  # the fewest-FLOPs point beside the objective's
        out.append({"method": p.method, "label": label, "peak_bytes": int(p.peak_bytes),
                    "extra_flops": int(p.extra_flops),
                    "extra_pct": 100.0 * p.extra_flops / max(sf, 1),
                    "budget_bytes": p.budget_bytes, "recomputed_ops": int(p.recomputed_ops),
                    "extra_bytes_moved": int(p.extra_bytes_moved), "kept": p.kept,
                    "plan_key": keys.get(label)})
    state.put_json(key, {"graph": graph_key, "graph_name": graph.name, "step_flops": int(sf),
                         "points": out, "notes": list(notes) + mc_notes})
    if progress is not None:
        progress(total, total, f"done: {len(out)} points")
    return key


def frontier_rows(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Table rows of a frontier record (roam first, by peak; then the baselines)."""
    pts = sorted(record.get("points") or [],
                 key=lambda p: (p["method"] != "roam", -p["peak_bytes"]))
    return [{"method": "roam" if p["method"] == "roam" else method_label(p["method"]),
             "budget": fmt_bytes(p["budget_bytes"]) if p["budget_bytes"] is not None else "",
             "peak": fmt_bytes(p["peak_bytes"]), "extra_pct": round(p["extra_pct"], 3),
             "recomputed_ops": p["recomputed_ops"],
             "moved": fmt_bytes(p.get("extra_bytes_moved") or 0),
             "kept": "" if p["method"] != "roam" or p.get("kept") in (None, "roam") else
             f"from {method_label(p['kept'])}",
             "plan_key": p["plan_key"]} for p in pts]


def _coincident_labels(points: list[Mapping[str, Any]]) -> list[str]:
    """Each min-cut point's budget; points on the same spot share one label (``0.5, 0.7``)."""
    spots: dict[tuple[int, int], list[str]] = {}
    for p in points:
        spots.setdefault((p["peak_bytes"], p["extra_flops"]), []).append(
            p["method"][len(MIN_CUT):])
    seen: set[tuple[int, int]] = set()
    out = []
    for p in points:
        spot = (p["peak_bytes"], p["extra_flops"])
        out.append("" if spot in seen else ", ".join(spots[spot]))
        seen.add(spot)
    return out


def frontier_figure(record: Mapping[str, Any] | None, selected_plan: str | None = None
                    ) -> go.Figure:
    """Peak memory against extra FLOPs (% of the step): roam's budget plans as a line,
    each baseline as its own marker; ``customdata`` is the plan key (a click loads it)."""
    fig = go.Figure()
    if not record or not record.get("points"):
        fig.update_layout(title="No frontier yet: press “Compute frontier”",
                          xaxis={"visible": False}, yaxis={"visible": False}, height=380)
        return fig
    pts = record["points"]
    sf = record.get("step_flops") or 0
    div, unit = byte_unit(max(p["peak_bytes"] for p in pts))
    roam = sorted((p for p in pts if p["method"] == "roam"), key=lambda p: p["peak_bytes"])
    if roam:
        fig.add_trace(go.Scatter(
            x=[p["extra_pct"] for p in roam], y=[p["peak_bytes"] / div for p in roam],
            mode="lines+markers", name="roam (budget plans)", customdata=[
                p["plan_key"] for p in roam],
            marker={"color": ROAM_COLOR, "size": 10}, line={"color": ROAM_COLOR},
            text=[f"roam, budget {fmt_bytes(p['budget_bytes'])}"
                  f"<br>peak {fmt_bytes(p['peak_bytes'])}"
                  f"<br>+{p['extra_pct']:.2f}% FLOPs, {p['recomputed_ops']} re-runs"
                  for p in roam], hovertemplate="%{text}<extra></extra>"))
    cut = sorted((p for p in pts if p["method"].startswith(MIN_CUT)),
                 key=lambda p: p["method"])
    if cut:  # one series, each point labelled by its activation_memory_budget
        fig.add_trace(go.Scatter(
            x=[p["extra_pct"] for p in cut], y=[p["peak_bytes"] / div for p in cut],
            mode="markers+text", name="torch min-cut (activation_memory_budget)",
            customdata=[p["plan_key"] for p in cut],
            text=_coincident_labels(cut), textposition="top right",
            textfont={"size": 10, "color": MIN_CUT_COLOR},
            marker={"symbol": "hexagon", "size": 12, "color": MIN_CUT_COLOR,
                    "line": {"width": 1, "color": "#222"}},
            hovertext=[f"{method_label(p['method'])}<br>peak {fmt_bytes(p['peak_bytes'])}"
                       f"<br>+{p['extra_pct']:.2f}% FLOPs, {p['recomputed_ops']} re-runs"
                       for p in cut], hovertemplate="%{hovertext}<extra></extra>"))
    for p in pts:
        if p["method"] == "roam" or p["method"].startswith(MIN_CUT):
            continue
        m = p["method"]
        fig.add_trace(go.Scatter(
            x=[p["extra_pct"]], y=[p["peak_bytes"] / div], mode="markers",
            name=BASELINE_LABELS.get(m, m), customdata=[p["plan_key"]],
            marker={"symbol": _SYMBOLS.get(m, "x"), "size": 13, "color": _COLORS.get(m, "#333"),
                    "line": {"width": 1, "color": "#222"}},
            text=[f"{BASELINE_LABELS.get(m, m)}<br>peak {fmt_bytes(p['peak_bytes'])}"
                  f"<br>+{p['extra_pct']:.2f}% FLOPs, {p['recomputed_ops']} re-runs"],
            hovertemplate="%{text}<extra></extra>"))
    sel = [p for p in pts if selected_plan and p["plan_key"] == selected_plan]
    if sel:
        fig.add_trace(go.Scatter(
            x=[sel[0]["extra_pct"]], y=[sel[0]["peak_bytes"] / div], mode="markers",
            name="shown in the views", hoverinfo="skip",
            marker={"size": 22, "color": "rgba(0,0,0,0)", "line": {"width": 3, "color": "#000"}}))
    fig.update_layout(
        title=f"{record.get('graph_name', '')}: peak memory vs extra compute "
              f"(step {flops_text(sf)}); click a point to load its plan",
        xaxis_title="extra FLOPs (% of the step)",
        yaxis_title=f"peak ({unit}, arena incl. resident)",
        height=420, margin={"l": 70, "r": 20, "t": 50, "b": 50}, clickmode="event",
        legend={"font": {"size": 11}}, template="plotly_white")
    return fig


# ------------------------------------------------------------------ Dash pieces
CARD = "budget-card"


def card() -> html.Div:
    """The Budget view card: closed until opened (its body is :func:`body`)."""
    return lazy.lazy_card(CARD, "Budget: memory vs recomputation",
                          "open: peak against recomputed FLOPs, roam's budget plans and the "
                          "checkpointing recipes")


def body() -> list[Any]:
    """The Budget view's controls, frontier chart and table (mounted when opened)."""
    cols = [{"name": n, "id": i} for n, i in (
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
        dash_table.DataTable(id=FRONTIER_TABLE, columns=cols, page_size=20,
                             sort_action="native",
                             style_cell={"fontFamily": "monospace", "fontSize": 12},
                             style_table={"overflowX": "auto"}),
    ]


def stores() -> list[Any]:
    """The view's stores."""
    return [lazy.store(FRONTIER_RESULT)]


def _settings(method: Any, tl: Any, nl: Any, w: Any, al: Any) -> PlanSettings:
    return PlanSettings("roam", float(tl or 1), int(nl or 1), int(w or 1), int(al or 1))


def frontier_job(set_progress: Any, n: int | None, graph: dict | None, budgets: Any,
                 min_cut: Any, method: Any, tl: Any, nl: Any, w: Any, al: Any
                 ) -> tuple[Any, str]:
    """Background: the frontier of the loaded graph, with progress."""
    if not n or not graph:
        raise PreventUpdate
    try:
        b = int(budgets or 8)
        if not 2 <= b <= 24:
            return dash.no_update, "budgets: give a number from 2 to 24"
        key = frontier(graph["key"], _settings(method, tl, nl, w, al), b,
                       lambda d, t, msg: set_progress((d, t, msg)), bool(min_cut))
    except RoamError as e:
        return dash.no_update, f"Frontier failed: {e}"
    except Exception as e:  # a planner bug must reach the user, not only the log
        _logger.exception("frontier failed")
        return dash.no_update, f"Frontier failed: {type(e).__name__}: {e}"
    rec = state.get_json(key) or {}
    return ({"key": key, "graph": graph["key"]},
            f"frontier of {rec.get('graph_name', '')}: {len(rec.get('points') or [])} plans")


def render_frontier(result: dict | None, graph: dict | None, plan: str | None, budgets: Any,
                    min_cut: Any, method: Any, tl: Any, nl: Any, w: Any, al: Any
                    ) -> tuple[go.Figure, list[dict[str, Any]], list[Any]]:
    """The frontier of the loaded graph: the job's, or one cached for these settings
    (figure, table rows, the planner's notes)."""
    if not graph:
        raise PreventUpdate
    key = result["key"] if result and result.get("graph") == graph["key"] else frontier_key(
        graph["key"], _settings(method, tl, nl, w, al), int(budgets or 8), bool(min_cut))
    rec = state.get_json(key)
    if rec is None:
        return frontier_figure(None), [], []
    return (frontier_figure(rec, plan), frontier_rows(rec),
            [html.Li(n) for n in rec.get("notes") or []])


def on_frontier_click(click: Any, cell: Any, rows: Any) -> Any:
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


def register(app: dash.Dash) -> None:
    """Register the Budget view's callbacks."""
    lazy.register_lazy(app, CARD, body)
    settings = [State(i, "value") for i in (ids.METHOD, ids.TIME_LIMIT, ids.NODE_LIMIT,
                                            ids.WORKERS, ids.ALIGNMENT)]
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
