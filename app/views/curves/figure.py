"""Live bytes per step before and after planning, as one figure (pure: arrays in, figure out).

Curves longer than a point budget are decimated (min and max per bucket, the window in
full), so the peaks never vanish and a GPT2-XL step stays a few thousand points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from app.core.formatting import byte_unit, fmt_bytes
from app.figures.axes import apply_range, step_axis
from app.figures.style import BASE_LAYOUT

__all__ = ["decimate", "memory_curves_figure"]


def _peak_text_position(k: int, n: int, placed: Sequence[int]) -> str:
    """Where a long peak label goes: towards the middle (never cut off at an edge), and
    under its marker when another peak label is already near it (no overlap).

    >>> _peak_text_position(90, 100, []), _peak_text_position(10, 100, [15])
    ('top left', 'bottom right')
    """
    side = "left" if k > 0.6 * n else "right"
    near = any(abs(k - j) < 0.35 * max(n, 1) for j in placed)
    return f"{'bottom' if near else 'top'} {side}"


def decimate(curve: np.ndarray, max_points: int,
             x_range: Sequence[float] | None = None) -> np.ndarray:
    """Sorted step indices that keep the shape of ``curve`` in about ``max_points`` points.

    The steps are split into ``max_points // 2`` buckets and each keeps its minimum and its
    maximum (so the peak survives).  With ``x_range``, the budget is spent on the window:
    the steps outside it keep only a coarse envelope.

    Examples
    --------
    >>> c = np.array([0, 5, 1, 9, 2, 3, 8, 0])
    >>> decimate(c, 4).tolist()
    [0, 3, 6, 7]
    >>> decimate(c, 100).tolist() == list(range(8))
    True
    """
    n = len(curve)
    if n <= max_points:
        return np.arange(n)
    lo, hi = 0, n
    if x_range is not None:
        lo = int(np.clip(np.floor(x_range[0]), 0, n))
        hi = int(np.clip(np.ceil(x_range[1]) + 1, lo, n))
    parts = [_envelope(curve, 0, lo, 64), _envelope(curve, lo, hi, max_points),
             _envelope(curve, hi, n, 64), np.array([0, n - 1])]
    return np.unique(np.concatenate(parts))


def _envelope(curve: np.ndarray, lo: int, hi: int, points: int) -> np.ndarray:
    if hi - lo <= points:
        return np.arange(lo, hi)
    edges = np.linspace(lo, hi, max(points // 2, 1) + 1).astype(np.int64)
    seg = curve[lo:hi]
    starts = edges[:-1] - lo
    mx = np.maximum.reduceat(seg, starts)
    mn = np.minimum.reduceat(seg, starts)
    out = []
    for s0, s1, a, b in zip(edges[:-1], edges[1:], mx, mn):
        window = curve[s0:s1]
        out += [s0 + int(np.argmax(window == a)), s0 + int(np.argmax(window == b))]
    return np.array(out, dtype=np.int64)


def memory_curves_figure(
    after: np.ndarray, before: np.ndarray | None = None, *, arena_bytes: int | None = None,
    lower_bound_bytes: int | None = None, after_label: str = "planned",
    before_label: str = "before", x_range: Sequence[float] | None = None,
    step: int | None = None, title: str | None = None, max_points: int = 4000,
    extra_curves: Sequence[tuple[str, np.ndarray | Sequence[int], str]] = (),
    peak_notes: Mapping[str, str] | None = None,
) -> go.Figure:
    """Live bytes per step before and after planning on one chart.

    ``extra_curves`` adds ``(name, curve, colour)`` lines (the selected module's bytes).

    Both peaks are annotated (value, step); the arena size and the lower bound are
    horizontal lines; the y axis uses binary units.  ``peak_notes`` (by curve label) adds a
    line under a peak's label, such as its largest contributors.  ``step`` draws a marker
    line.  Curves longer than ``max_points`` keep every step inside ``x_range`` up to that
    budget and the min and max of each bucket elsewhere (see :func:`decimate`), so peaks
    never vanish.
    """
    after = np.asarray(after, dtype=np.float64)
    curves = [(after_label, after, "#c44e52")]
    if before is not None:
        curves.insert(0, (before_label, np.asarray(before, dtype=np.float64), "#4c72b0"))
    curves += [(n, np.asarray(c, dtype=np.float64), col) for n, c, col in extra_curves]
    top = max([float(c.max()) for _, c, _ in curves if len(c)]
              + [float(arena_bytes or 0), float(lower_bound_bytes or 0), 1.0])
    div, unit = byte_unit(top)
    fig = go.Figure(layout=BASE_LAYOUT)
    n = max(len(c) for _, c, _ in curves)
    placed: list[int] = []  # steps of the peak labels drawn so far
    for (name, c, color), pos in zip(curves, ("top left", "top right", "top right",
                                              "bottom right", "bottom right")):
        if not len(c):
            continue
        k = int(np.argmax(c))
        xs = decimate(c, max_points, x_range)
        ys = c[xs] / div
        # one point at the end of the last step, so the "hv" line covers [s, s + 1)
        xs, ys = np.append(xs, len(c)), np.append(ys, ys[-1])
        fig.add_trace(go.Scatter(
            x=xs.astype(np.int32), y=ys.astype(np.float32), name=name,
            mode="lines", line={"color": color, "shape": "hv"},
            hovertemplate=f"{name}<br>step %{{x}}<br>%{{y:.3f}} {unit}<extra></extra>"))
        fig.add_trace(go.Scatter(
            x=[k + 0.5], y=[c[k] / div], mode="markers+text", showlegend=False,
            marker={"color": color, "size": 9, "symbol": "diamond"},
            text=[f"peak {fmt_bytes(c[k])} @ step {k}"
                  + (f"<br>{peak_notes[name]}" if peak_notes and peak_notes.get(name) else "")],
            textposition=_peak_text_position(k, len(c), placed) if peak_notes else pos,
            hoverinfo="skip", cliponaxis=False))
        placed.append(k)
    for label, val, dash in (("arena", arena_bytes, "dash"),
                             ("lower bound", lower_bound_bytes, "dot")):
        if val:
            fig.add_trace(go.Scatter(
                x=[0, max(n, 1)], y=[val / div] * 2, mode="lines", name=label,
                line={"color": "#333", "dash": dash, "width": 1},
                hovertemplate=f"{label}: {fmt_bytes(val)}<extra></extra>"))
    if title is None and before is not None and len(curves[0][1]) and len(after):
        b, a = float(curves[0][1].max()), float(after.max())
        pct = 100 * (b - a) / b if b else 0.0
        title = f"peak {fmt_bytes(b)} → {fmt_bytes(a)}: saves {fmt_bytes(b - a)} ({pct:.1f} %)"
    if step is not None:
        fig.add_vline(x=step + 0.5, line={"color": "#999", "width": 1, "dash": "dot"})
    fig.update_layout(title={"text": title or "", "font": {"size": 14}, "x": 0.01, "y": 0.98},
                      xaxis_title="step", yaxis_title=f"memory ({unit})", dragmode="zoom",
                      yaxis_rangemode="tozero",
                      uirevision="curves")
    if peak_notes:  # the peak labels take the top: the legend goes under the axis
        fig.update_layout(legend={"orientation": "h", "y": -0.22, "yanchor": "top", "x": 0,
                                  "xanchor": "left"}, margin={"b": 80, "t": 80})
        fig.update_yaxes(range=[0, top / div * 1.12])
    step_axis(fig, n)
    apply_range(fig, x_range)
    return fig

