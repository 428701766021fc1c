"""Measured memory beside the plan: drop a PyTorch memory snapshot.

The pickle (``torch.cuda.memory._dump_snapshot``) is read by
:func:`roam_core.formats.snapshot_analysis.analyze_snapshot` (the restricted unpickler: no
class is resolved; the upload is size-capped).  The view overlays its allocated and
reserved curves on the simulated before/planned curves, draws its segments at the peak
beside the planned arena, and states its fragmentation (reserved - allocated) at the peak.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import Any

import dash
import numpy as np
import plotly.graph_objects as go
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate

from app import ids, lazy, services, state
from app.analysis import fmt_bytes
from app.budget import byte_unit
from roam_core.base.errors import RoamError

__all__ = ["MAX_SNAPSHOT_UPLOAD_BYTES", "card", "measured_record", "register",
           "segments_figure", "snapshot_curves_figure", "snapshot_from_upload", "summary_lines"]

_logger = logging.getLogger(__name__)

SNAP_UPLOAD = "snapshot-upload"
SNAP_STATUS = "snapshot-status"
SNAP_KEY = "snapshot-key"  # store: {"key": cache key, "name": file name}
SNAP_CURVES = "snapshot-curves"
SNAP_SEGMENTS = "snapshot-segments"
SNAP_SUMMARY = "snapshot-summary"
#: Largest snapshot accepted by the upload.
MAX_SNAPSHOT_UPLOAD_BYTES = 64 * 2**20
#: Points kept per measured curve (max-preserving decimation).
MAX_POINTS = 4000
#: Blocks drawn per segment column.
MAX_BLOCKS = 5000


def _decimate(x: list[float], y: list[int]) -> tuple[list[float], list[int]]:
    n = len(y)
    if n <= MAX_POINTS:
        return x, y
    k = -(-n // MAX_POINTS)
    idx = [i * k + int(np.argmax(y[i * k:(i + 1) * k])) for i in range(-(-n // k))]
    return [x[i] for i in idx], [y[i] for i in idx]


def measured_record(data: bytes, name: str = "snapshot") -> dict[str, Any]:
    """The JSON record the view stores for a snapshot (curves decimated, segments at the peak).

    Raises
    ------
    PlanFormatError
        From the restricted reader (not a snapshot, a class reference, too big, no events).
    """
    from roam_core.formats.snapshot_analysis import analyze_snapshot

    m = analyze_snapshot(data, max_bytes=MAX_SNAPSHOT_UPLOAD_BYTES)
    idx = list(range(m.n_events))
    return {
        "name": name, "device": m.device, "n_events": m.n_events,
        "event_steps": list(m.event_steps) if m.event_steps is not None else None,
        "allocated": list(m.allocated_bytes), "reserved": list(m.reserved_bytes),
        "index": idx, "peak_index": m.peak_index,
        "peak_allocated_bytes": m.peak_allocated_bytes,
        "peak_reserved_bytes": m.peak_reserved_bytes,
        "fragmentation_bytes": m.fragmentation_bytes,
        "segments": [{"addr": s.addr, "size": s.size_bytes,
                      "blocks": [[b.addr - s.addr, b.size_bytes, b.name]
                                 for b in s.blocks[:MAX_BLOCKS]]} for s in m.segments],
    }


def snapshot_from_upload(contents: str, filename: str | None) -> str:
    """Read an uploaded snapshot and store its record; returns the cache key."""
    raw = services.decode_upload(contents, MAX_SNAPSHOT_UPLOAD_BYTES)
    try:
        rec = measured_record(raw, filename or "snapshot")
    except RoamError as e:
        raise type(e)(f"{filename or 'snapshot'}: {e}") from e
    key = "snap-" + hashlib.sha256(raw).hexdigest()[:32]
    state.put_json(key, rec)
    return key


def _x_on(rec: Mapping[str, Any], n_steps: int) -> list[float]:
    steps = rec.get("event_steps")
    n = rec["n_events"]
    if steps is not None and all(0 <= s < max(n_steps, 1) for s in steps):
        return [float(s) for s in steps]
    return [i * (max(n_steps, 1) - 1) / max(n - 1, 1) for i in range(n)]


def snapshot_curves_figure(rec: Mapping[str, Any], before: np.ndarray | None,
                           planned: np.ndarray | None, planned_label: str = "planned",
                           before_label: str = "before") -> go.Figure:
    """The measured allocated/reserved curves over the simulated ones (MiB, step axis)."""
    fig = go.Figure()
    n_steps = max(len(before) if before is not None else 0,
                  len(planned) if planned is not None else 0, 1)
    x = _x_on(rec, n_steps)
    top = max([max(rec["reserved"], default=0)] + [int(np.max(c)) for c in (before, planned)
                                                    if c is not None and len(c)])
    div, unit = byte_unit(top)
    for curve, label, color in ((before, f"simulated: {before_label}", "#4c72b0"),
                                (planned, f"simulated: {planned_label}", "#c44e52")):
        if curve is not None and len(curve):
            fig.add_trace(go.Scatter(x=list(range(len(curve))), y=np.asarray(curve) / div,
                                     mode="lines", name=label, line={"color": color}))
    for key, label, color, dash_ in (("reserved", "measured reserved", "#555", "dot"),
                                     ("allocated", "measured allocated", "#000", "solid")):
        xs, ys = _decimate(x, list(rec[key]))
        fig.add_trace(go.Scatter(x=xs, y=[v / div for v in ys], mode="lines",
                                 name=label, line={"color": color, "dash": dash_, "width": 2}))
    p = rec["peak_index"]
    fig.add_trace(go.Scatter(
        x=[x[p]], y=[rec["peak_allocated_bytes"] / div], mode="markers+text",
        name="measured peak", text=[f"peak {fmt_bytes(rec['peak_allocated_bytes'])}"],
        textposition="top center", marker={"size": 10, "color": "#000", "symbol": "x"}))
    how = ("events at their steps" if rec.get("event_steps") is not None
           and x and x[-1] < n_steps else f"{rec['n_events']} events spread over the steps")
    fig.update_layout(title={"text": f"Measured vs simulated<br><sup>{rec.get('name', '')}: "
                                     f"{how}</sup>", "font": {"size": 14}},
                      xaxis_title="step", yaxis_title=unit, height=380,
                      margin={"l": 70, "r": 20, "t": 50, "b": 50}, template="plotly_white")
    return fig


def _rects(x0: float, x1: float, spans: list[tuple[float, float]]) -> tuple[list, list]:
    xs: list[float | None] = []
    ys: list[float | None] = []
    for y0, y1 in spans:
        xs += [x0, x1, x1, x0, x0, None]
        ys += [y0, y0, y1, y1, y0, None]
    return xs, ys


def segments_figure(rec: Mapping[str, Any], arena_bytes: int | None,
                    planned_blocks: list[tuple[int, int, str]] | None) -> go.Figure:
    """Columns: the planned arena (its storages live at the planned peak) and each measured
    segment at the measured peak (live blocks filled, the rest is reserved but free)."""
    fig = go.Figure()
    cols: list[tuple[str, int, list[tuple[int, int, str]], str]] = []
    if arena_bytes:
        cols.append(("planned arena", int(arena_bytes), planned_blocks or [], "#c44e52"))
    for i, s in enumerate(rec.get("segments") or []):
        cols.append((f"segment {i + 1}", int(s["size"]),
                     [(int(a), int(b), str(n)) for a, b, n in s["blocks"]], "#333333"))
    names = []
    div, unit = byte_unit(max((c[1] for c in cols), default=0))
    legend_measured = True
    for c, (name, size, blocks, color) in enumerate(cols):
        names.append(name)
        xs, ys = _rects(c - 0.4, c + 0.4, [(0, size / div)])
        fig.add_trace(go.Scatter(x=xs, y=ys, fill="toself", fillcolor="rgba(200,200,200,0.35)",
                                 line={"color": "#888", "width": 1}, mode="lines",
                                 hoverinfo="text", text=f"{name}: {fmt_bytes(size)}",
                                 showlegend=c == 0, name="reserved, free"))
        spans = [(a / div, (a + b) / div) for a, b, _ in blocks]
        planned_col = c == 0 and bool(arena_bytes)
        show = planned_col or (bool(blocks) and legend_measured)
        if show and not planned_col:
            legend_measured = False
        xs, ys = _rects(c - 0.38, c + 0.38, spans)
        used = sum(b for _, b, _ in blocks)
        fig.add_trace(go.Scatter(x=xs, y=ys, fill="toself", fillcolor=color, mode="lines",
                                 line={"color": "#fff", "width": 0.5}, hoverinfo="text",
                                 text=f"{name}: {fmt_bytes(used)} live in {len(blocks)} blocks",
                                 name="live at the peak (planned)" if planned_col
                                 else "live at the measured peak", showlegend=show))
    fig.update_xaxes(tickvals=list(range(len(names))), ticktext=names)
    fig.update_layout(title={"text": "Segments at the measured peak beside the planned arena",
                             "font": {"size": 14}},
                      yaxis_title=f"{unit} (offset inside the segment)", height=380,
                      margin={"l": 70, "r": 20, "t": 50, "b": 60}, template="plotly_white")
    return fig


def summary_lines(rec: Mapping[str, Any], arena_bytes: int | None,
                  planned_peak_bytes: int | None) -> list[str]:
    """The fragmentation at the measured peak, and the plan's, in words."""
    a, r = rec["peak_allocated_bytes"], rec["peak_reserved_bytes"]
    f = rec["fragmentation_bytes"]
    lines = [f"{rec.get('name', 'snapshot')}: {rec['n_events']} allocator events, "
             f"{len(rec.get('segments') or [])} segments at the peak",
             f"measured peak: {fmt_bytes(a)} allocated, {fmt_bytes(r)} reserved "
             f"(event {rec['peak_index']})",
             f"fragmentation at the peak (reserved − allocated): {fmt_bytes(f)}"
             f" ({100 * f / max(r, 1):.1f}% of reserved)"]
    if arena_bytes and planned_peak_bytes is not None:
        pf = max(int(arena_bytes) - int(planned_peak_bytes), 0)
        lines.append(f"the plan: arena {fmt_bytes(arena_bytes)} for a peak of "
                     f"{fmt_bytes(planned_peak_bytes)} (fragmentation {fmt_bytes(pf)}); "
                     f"measured reserved − planned arena: {fmt_bytes(r - int(arena_bytes))}"
                     if r >= int(arena_bytes) else
                     f"the plan: arena {fmt_bytes(arena_bytes)} for a peak of "
                     f"{fmt_bytes(planned_peak_bytes)} (fragmentation {fmt_bytes(pf)}); "
                     f"the measured run reserved {fmt_bytes(int(arena_bytes) - r)} less")
    return lines


def _planned_blocks(graph_key: str, plan_key: str) -> tuple[int, int, list]:
    a = services.after_data(graph_key, plan_key)
    peak = int(np.argmax(a.curve)) if len(a.curve) else 0
    v = a.view
    live = np.nonzero((v.start <= peak) & (v.end > peak))[0]
    blocks = [(int(v.offset[i]), int(v.size[i]), str(v.ids[i])) for i in live]
    return int(a.plan.arena_bytes), int(a.curve[peak]) if len(a.curve) else 0, blocks


# ------------------------------------------------------------------ Dash pieces
CARD = "snapshot-card"


def card() -> html.Div:
    """The measured-memory card: closed until opened (its body is :func:`body`)."""
    return lazy.lazy_card(CARD, "Measured memory (PyTorch snapshot)",
                          "open: drop a torch.cuda.memory snapshot to compare it with the plan")


def body(max_bytes: int = MAX_SNAPSHOT_UPLOAD_BYTES) -> list[Any]:
    """The snapshot upload, summary and charts (mounted when opened)."""
    return [
        html.Details([html.Summary("How to read this"), html.Div(
            "Drop the pickle written by torch.cuda.memory._dump_snapshot (or by "
            "scripts/gpu_check.sh): its measured allocated and reserved bytes sit over the "
            "simulated curves; its segments at the measured peak sit beside the planned arena. "
            "Reserved − allocated is memory the caching allocator holds but no tensor uses.",
            className="muted")]),
        dcc.Upload(id=SNAP_UPLOAD, className="upload", children=html.Div([
            f"Drop a memory snapshot (.pickle, ≤ {max_bytes // 2**20} MiB) or ",
            html.A("browse")])),
        html.Div(id=SNAP_STATUS, className="status"),
        html.Ul(id=SNAP_SUMMARY),
        html.Div([dcc.Graph(id=SNAP_CURVES, config={"displaylogo": False},
                            style={"height": "380px"}),
                  dcc.Graph(id=SNAP_SEGMENTS, config={"displaylogo": False},
                            style={"height": "380px"})], className="row2"),
    ]


def stores() -> list[Any]:
    """The view's stores."""
    return [lazy.store(SNAP_KEY)]


def on_snapshot_upload(contents: str | None, filename: str | None
                       ) -> tuple[Any, str, None]:
    """Read a dropped snapshot (restricted unpickler); clear the upload for a re-drop."""
    if not contents:
        raise PreventUpdate
    try:
        key = snapshot_from_upload(contents, filename)
    except RoamError as e:
        return dash.no_update, f"Snapshot not loaded: {e}", None
    return {"key": key, "name": filename}, f"loaded snapshot {filename}", None


def render_snapshot(snap: dict | None, graph: dict | None, plan: str | None, base: str
                    ) -> tuple[Any, Any, list[Any]]:
    """Curves, segments and fragmentation of the loaded snapshot against the current plan."""
    from app.figures import empty_figure

    rec = state.get_json(snap["key"]) if snap else None
    if rec is None or not graph:
        msg = "drop a memory snapshot to compare it with the plan"
        return empty_figure(msg), empty_figure(msg), []
    b = services.before_data(graph["key"], base or "eager")
    arena = peak = None
    blocks: list = []
    planned = None
    label = "planned"
    if plan:
        arena, peak, blocks = _planned_blocks(graph["key"], plan)
        a = services.after_data(graph["key"], plan)
        planned, label = a.curve, f"planned ({a.plan.method})"
    curves = snapshot_curves_figure(rec, b.curve, planned, label, b.label)
    segs = segments_figure(rec, arena, blocks)
    return curves, segs, [html.Li(x) for x in summary_lines(rec, arena, peak)]


def register(app: dash.Dash) -> None:
    """Register the measured-memory callbacks."""
    lazy.register_lazy(app, CARD, body)
    app.callback(Output(SNAP_KEY, "data"), Output(SNAP_STATUS, "children"),
                 Output(SNAP_UPLOAD, "contents"), Input(SNAP_UPLOAD, "contents"),
                 State(SNAP_UPLOAD, "filename"), prevent_initial_call=True)(on_snapshot_upload)
    app.callback(Output(SNAP_CURVES, "figure"), Output(SNAP_SEGMENTS, "figure"),
                 Output(SNAP_SUMMARY, "children"), Input(SNAP_KEY, "data"),
                 Input(ids.GRAPH_KEY, "data"), Input(ids.PLAN_KEY, "data"),
                 Input(ids.BASELINE, "value"))(render_snapshot)
