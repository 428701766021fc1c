"""The Measured-memory card: closed until opened; then the snapshot upload, a summary and two
charts against the current plan.

The view overlays a snapshot's allocated and reserved curves on the simulated before/planned
curves, draws its segments at the peak beside the planned arena, and states its
fragmentation (reserved - allocated) at the peak.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import dash
import plotly.graph_objects as go
from dash import Input, Output, dcc, html
from dash.development.base_component import Component

from app.core import ids, state
from app.core.config import AppConfig
from app.core.store_types import GraphRef
from app.figures.style import empty_figure
from app.services.plan_data import after_data, before_data
from app.services.uploads import read_upload
from app.views import lazy
from app.views.snapshot.data import (
    MAX_SNAPSHOT_UPLOAD_BYTES,
    planned_blocks,
    snapshot_from_upload,
)
from app.views.snapshot.figure import segments_figure, snapshot_curves_figure
from app.views.snapshot.model import summary_lines
from app.views.spec import View
from app.views.uploads import (
    UploadRef,
    register_upload,
    result_id,
    upload_ref,
    upload_store,
    upload_zone,
)
from roam_core.base.errors import RoamError

__all__ = ["CARD", "MAX_SNAPSHOT_UPLOAD_BYTES", "VIEW", "body", "card", "on_snapshot_upload",
           "render_snapshot"]

_logger = logging.getLogger(__name__)

SNAP_UPLOAD = "snapshot-upload"
SNAP_STATUS = "snapshot-status"
SNAP_KEY = "snapshot-key"  # store: {"key": cache key, "name": file name}
SNAP_CURVES = "snapshot-curves"
SNAP_SEGMENTS = "snapshot-segments"
SNAP_SUMMARY = "snapshot-summary"
SNAP_CHARTS = "snapshot-charts"  # the two charts' row: hidden until a snapshot is loaded
_HIDDEN = {"display": "none"}

CARD = "snapshot-card"


def card() -> html.Div:
    """The measured-memory card: closed until opened (its body is :func:`body`)."""
    return lazy.lazy_card(CARD, "Measured memory (PyTorch snapshot)",
                          "open: drop a torch.cuda.memory snapshot to compare it with the plan")


def body(max_bytes: int = MAX_SNAPSHOT_UPLOAD_BYTES) -> list[Component]:
    """The snapshot upload, summary and charts (mounted when opened)."""
    return [
        html.Details([html.Summary("How to read this"), html.Div(
            "Drop the pickle written by torch.cuda.memory._dump_snapshot (or by "
            "scripts/gpu_check.sh): its measured allocated and reserved bytes sit over the "
            "simulated curves; its segments at the measured peak sit beside the planned arena. "
            "Reserved − allocated is memory the caching allocator holds but no tensor uses.",
            className="muted")]),
        upload_zone(SNAP_UPLOAD, "snapshot", max_bytes, SNAP_STATUS, [
            f"Drop a memory snapshot (.pickle, ≤ {max_bytes // 2**20} MiB) or ",
            html.A("browse")]),
        html.Div(id=SNAP_STATUS, className="status"),
        html.Ul(id=SNAP_SUMMARY),
        html.Div([dcc.Graph(id=SNAP_CURVES, config={"displaylogo": False},
                            style={"height": "380px"}),
                  dcc.Graph(id=SNAP_SEGMENTS, config={"displaylogo": False},
                            style={"height": "380px"})],
                 id=SNAP_CHARTS, className="row2", style=_HIDDEN),
    ]


def stores() -> list[dcc.Store]:
    """The view's stores."""
    return [lazy.store(SNAP_KEY), upload_store(SNAP_UPLOAD)]


def on_snapshot_upload(upload: UploadRef | None
                       ) -> tuple[dict[str, str | None] | dash.NoUpdate, str]:
    """Read a dropped snapshot (streamed to the server; the restricted unpickler)."""
    token, filename = upload_ref(upload)
    try:
        key = snapshot_from_upload(read_upload(token), filename)
    except RoamError as e:
        return dash.no_update, f"Snapshot not loaded: {e}"
    return {"key": key, "name": filename}, f"loaded snapshot {filename}"


def render_snapshot(snap: Mapping[str, str] | None, graph: GraphRef | None,
                    plan: str | None, base: str | None
                    ) -> tuple[go.Figure, go.Figure, list[Component], dict[str, str]]:
    """Curves, segments and fragmentation of the loaded snapshot against the current plan,
    and the charts' style: without a snapshot one line says what to do, and the two empty
    charts stay hidden (two blank panels read as a broken view)."""
    rec = state.get_json(snap["key"]) if snap else None
    if rec is None or not graph:
        msg = "drop a memory snapshot to compare it with the plan"
        return empty_figure(msg), empty_figure(msg), [html.Li(msg, className="muted")], _HIDDEN
    b = before_data(graph["key"], base or "eager")
    arena = peak = None
    blocks: list[tuple[int, int, str]] = []
    planned = None
    label = "planned"
    if plan:
        arena, peak, blocks = planned_blocks(graph["key"], plan)
        a = after_data(graph["key"], plan)
        planned, label = a.curve, f"planned ({a.plan.method})"
    curves = snapshot_curves_figure(rec, b.curve, planned, label, b.label)
    segs = segments_figure(rec, arena, blocks)
    return curves, segs, [html.Li(x) for x in summary_lines(rec, arena, peak)], {}


def register(app: dash.Dash, config: AppConfig) -> None:
    """Register the measured-memory callbacks."""
    lazy.register_lazy(app, CARD, body)
    register_upload(app, "snapshot", MAX_SNAPSHOT_UPLOAD_BYTES)
    app.callback(Output(SNAP_KEY, "data"), Output(SNAP_STATUS, "children"),
                 Input(result_id(SNAP_UPLOAD), "data"),
                 prevent_initial_call=True)(on_snapshot_upload)
    app.callback(Output(SNAP_CURVES, "figure"), Output(SNAP_SEGMENTS, "figure"),
                 Output(SNAP_SUMMARY, "children"), Output(SNAP_CHARTS, "style"),
                 Input(SNAP_KEY, "data"),
                 Input(ids.GRAPH_KEY, "data"), Input(ids.PLAN_KEY, "data"),
                 Input(ids.BASELINE, "value"))(render_snapshot)


VIEW = View("snapshot", "main", lambda _: [card()], register, stores=stores)
