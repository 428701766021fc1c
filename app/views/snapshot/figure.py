"""The measured curves over the simulated ones, and the segments at the measured peak beside
the planned arena (pure: a snapshot record in, figures out)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from app.core.formatting import byte_unit, fmt_bytes
from app.views.snapshot.model import SnapshotRecord, source_word

__all__ = ["MAX_POINTS", "segments_figure", "snapshot_curves_figure"]

#: Points kept per measured curve (max-preserving decimation).
MAX_POINTS = 4000


def _decimate(x: list[float], y: list[int]) -> tuple[list[float], list[int]]:
    n = len(y)
    if n <= MAX_POINTS:
        return x, y
    k = -(-n // MAX_POINTS)
    idx = [i * k + int(np.argmax(y[i * k:(i + 1) * k])) for i in range(-(-n // k))]
    return [x[i] for i in idx], [y[i] for i in idx]


def _x_on(rec: SnapshotRecord, n_steps: int) -> list[float]:
    steps = rec.get("event_steps")
    n = rec["n_events"]
    if steps is not None and all(0 <= s < max(n_steps, 1) for s in steps):
        return [float(s) for s in steps]
    return [i * (max(n_steps, 1) - 1) / max(n - 1, 1) for i in range(n)]


def snapshot_curves_figure(rec: SnapshotRecord, before: np.ndarray | None,
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
    src = source_word(rec)  # a snapshot roam exported from a plan is not a measurement
    for key, label, color, dash_ in (("reserved", f"{src} reserved", "#555", "dot"),
                                     ("allocated", f"{src} allocated", "#000", "solid")):
        xs, ys = _decimate(x, list(rec[key]))
        fig.add_trace(go.Scatter(x=xs, y=[v / div for v in ys], mode="lines",
                                 name=label, line={"color": color, "dash": dash_, "width": 2}))
    p = rec["peak_index"]
    fig.add_trace(go.Scatter(
        x=[x[p]], y=[rec["peak_allocated_bytes"] / div], mode="markers+text",
        name=f"{src} peak", text=[f"peak {fmt_bytes(rec['peak_allocated_bytes'])}"],
        textposition="top center", marker={"size": 10, "color": "#000", "symbol": "x"}))
    how = ("events at their steps" if rec.get("event_steps") is not None
           and x and x[-1] < n_steps else f"{rec['n_events']} events spread over the steps")
    head = ("Measured vs simulated" if src == "measured" else
            "Exported by roam (the plan, simulated) vs simulated")
    fig.update_layout(title={"text": f"{head}<br><sup>{rec.get('name', '')}: "
                                     f"{how}</sup>", "font": {"size": 14}},
                      xaxis_title="step", yaxis_title=unit, height=380,
                      margin={"l": 70, "r": 20, "t": 50, "b": 50}, template="plotly_white")
    return fig


def _rects(x0: float, x1: float, spans: list[tuple[float, float]]
           ) -> tuple[list[float | None], list[float | None]]:
    xs: list[float | None] = []
    ys: list[float | None] = []
    for y0, y1 in spans:
        xs += [x0, x1, x1, x0, x0, None]
        ys += [y0, y0, y1, y1, y0, None]
    return xs, ys


def segments_figure(rec: SnapshotRecord, arena_bytes: int | None,
                    planned_blocks: list[tuple[int, int, str]] | None) -> go.Figure:
    """Columns: the planned arena (its storages live at the planned peak) and each measured
    segment at the measured peak (live blocks filled, the rest is reserved but free)."""
    fig = go.Figure()
    src = source_word(rec)
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
                                 else f"live at the {src} peak", showlegend=show))
    fig.update_xaxes(tickvals=list(range(len(names))), ticktext=names)
    fig.update_layout(title={"text": f"Segments at the {src} peak beside the planned arena",
                             "font": {"size": 14}},
                      yaxis_title=f"{unit} (offset inside the segment)", height=380,
                      margin={"l": 70, "r": 20, "t": 50, "b": 60}, template="plotly_white")
    return fig
