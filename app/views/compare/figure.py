"""Two plans' memory curves on one axis (pure plotly: arrays in, figure out).

Each curve runs in its own plan's order, and the orders may differ in length (a plan that
re-runs ops has more steps), so x is the normalised step: step ``s`` of an ``n``-step plan
spans ``[100 s / n, 100 (s + 1) / n)`` % of the step.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from app.core.formatting import byte_unit, fmt_bytes
from app.figures.style import BASE_LAYOUT
from app.views.curves.figure import decimate

__all__ = ["A_COLOR", "B_COLOR", "compare_curves_figure"]

#: Plan A's and plan B's colours (not the before/after colours: either may be either).
A_COLOR, B_COLOR = "#4c72b0", "#c44e52"


def compare_curves_figure(curve_a: np.ndarray, label_a: str, curve_b: np.ndarray,
                          label_b: str, max_points: int = 4000) -> go.Figure:
    """Bytes live at every step of plans A and B, on the normalised step axis (0–100 %).

    Each peak gets a diamond and a label above the plot (one line each, in the curve's
    colour); the title gives the difference of the peaks.  Curves longer than
    ``max_points`` are decimated with their peaks kept
    (:func:`app.views.curves.figure.decimate`).
    """
    curves = [("A: " + label_a, np.asarray(curve_a, np.float64), A_COLOR),
              ("B: " + label_b, np.asarray(curve_b, np.float64), B_COLOR)]
    top = max([float(c.max()) for _, c, _ in curves if len(c)] + [1.0])
    div, unit = byte_unit(top)
    fig = go.Figure(layout=BASE_LAYOUT)
    peaks = []
    for i, (name, c, color) in enumerate(curves):
        if not len(c):
            continue
        n, k = len(c), int(np.argmax(c))
        xs = decimate(c, max_points)
        ys = np.append(c[xs] / div, c[xs[-1]] / div)
        steps = np.append(xs, n)  # the "hv" line covers the last step too
        fig.add_trace(go.Scatter(
            x=(100.0 * steps / n).astype(np.float32), y=ys.astype(np.float32), name=name,
            customdata=steps.astype(np.int32), mode="lines",
            line={"color": color, "shape": "hv", "width": 2 if i else 1.5},
            hovertemplate=f"{name}<br>step %{{customdata}} of {n} (%{{x:.1f}} %)"
                          f"<br>%{{y:.3f}} {unit}<extra></extra>"))
        fig.add_trace(go.Scatter(
            x=[100.0 * (k + 0.5) / n], y=[c[k] / div], mode="markers", showlegend=False,
            marker={"color": color, "size": 9, "symbol": "diamond"},
            hovertemplate=f"{name}: peak {fmt_bytes(c[k])} at step {k} of {n}<extra></extra>"))
        peaks.append((name, float(c[k]), k, n, color))
    for j, (name, peak, k, n, color) in enumerate(peaks):
        fig.add_annotation(text=f"<b>{name}: peak {fmt_bytes(peak)}</b> at step {k} of {n}",
                           xref="paper", yref="paper", x=0.0, y=1.0, xanchor="left",
                           yanchor="bottom", align="left", showarrow=False,
                           font={"size": 11, "color": color},
                           yshift=4 + 16 * (len(peaks) - 1 - j))
    title = ""
    if len(peaks) == 2:
        d = peaks[1][1] - peaks[0][1]
        pct = f" ({100 * d / peaks[0][1]:+.1f} %)" if peaks[0][1] else ""
        title = ("peak B − A: " + ("+" if d > 0 else "−" if d < 0 else "")
                 + fmt_bytes(abs(d)) + pct)
    fig.update_layout(title={"text": title, "font": {"size": 14}, "x": 0.01, "y": 0.99,
                             "yanchor": "top"},
                      xaxis_title="normalised step (% of each plan's steps)",
                      yaxis_title=f"memory ({unit})", yaxis_rangemode="tozero",
                      legend={"orientation": "h", "y": -0.25, "yanchor": "top", "x": 0,
                              "xanchor": "left"},
                      margin={"l": 70, "r": 20, "t": 30 + 16 * len(peaks) + 24, "b": 90})
    fig.update_xaxes(range=[0, 100], ticksuffix=" %")
    fig.update_yaxes(range=[0, top / div * 1.05])
    return fig
