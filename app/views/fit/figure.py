"""Peak (log scale) against batch size, one line per method, with common GPU sizes marked.

Pure: fit rows in, a figure out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from app.core.formatting import fmt_bytes
from app.figures.style import empty_figure
from app.views.fit.model import GPU_SIZES_GIB
from roam_core.planner.whatfits import FIT_METHODS, FitRow, method_label

__all__ = ["fit_figure"]

_COLORS = {"eager_reserved": "#1f77b4", "roam": "#d62728", "roam_recompute_5pct": "#ff7f0e",
           "roam_recompute_25pct": "#2ca02c"}


_DASH = {"eager_reserved": "solid", "roam": "solid", "roam_recompute_5pct": "dash",
         "roam_recompute_25pct": "dot"}


def fit_figure(rows: Sequence[FitRow], memory_gib: float | None = None) -> go.Figure:
    """Peak (log scale) against batch size, one line per method (and sequence length), with
    horizontal lines at :data:`GPU_SIZES_GIB` and ``memory_gib``."""
    if not rows:  # no axes and no grey plot area: an empty chart read as a broken one
        fig = empty_figure("No sweep yet: pick a model and press “Sweep”")
        fig.update_layout(height=420)
        return fig
    fig = go.Figure()
    seqs = sorted({r.seq_len for r in rows}, key=lambda t: t or 0)
    for t in seqs:
        group = sorted((r for r in rows if r.seq_len == t), key=lambda r: r.batch_size)
        for m in FIT_METHODS:
            pts = [r for r in group if m in r.peak_bytes]
            if not pts:
                continue
            name = method_label(m) + (f", seq {t}" if t and len(seqs) > 1 else "")
            fig.add_trace(go.Scatter(
                x=[r.batch_size for r in pts], y=[r.peak_bytes[m] / 2**30 for r in pts],
                mode="lines+markers", name=name,
                line={"color": _COLORS.get(m), "dash": _DASH.get(m, "solid")},
                text=[f"{name}<br>batch {r.batch_size}"
                      + (f", seq {r.seq_len}" if r.seq_len else "")
                      + f"<br>{fmt_bytes(r.peak_bytes[m])}"
                      + (f"<br>+{r.extra_time_pct.get(m, 0):.1f}% time"
                         + (f" (est. on {r.device_profile})" if r.device_profile else "")
                         if m.startswith("roam_recompute") else "") for r in pts],
                hovertemplate="%{text}<extra></extra>"))
    sizes: list[tuple[float, str, str, str]] = [(g, f"{g} GiB", "#999", "dot")
                                                for g in GPU_SIZES_GIB]
    if memory_gib:
        sizes.append((float(memory_gib), f"yours: {memory_gib:g} GiB", "#000", "dash"))
    for g, label, color, dash_ in sizes:  # (annotations on a log axis take log10 positions)
        fig.add_hline(y=g, line={"color": color, "dash": dash_, "width": 1})
        fig.add_annotation(x=0, xref="paper", y=_log10(g), yref="y", text=label,
                           showarrow=False, xanchor="left", yanchor="bottom",
                           font={"size": 10, "color": color})
    lo = min(min(r.peak_bytes.values()) for r in rows) / 2**30
    hi = max(max(r.peak_bytes.values()) / 2**30 for r in rows)
    top = max(hi, *(s[0] for s in sizes))
    fig.update_yaxes(type="log", title="peak (GiB, log scale)",
                     range=[_log10(lo / 2), _log10(top * 1.6)])
    fig.update_xaxes(type="log", title="batch size", tickvals=sorted({r.batch_size for r in rows}))
    fig.update_layout(title=f"{rows[0].graph_name.split('-b')[0]}: peak memory against batch size",
                      height=440, margin={"l": 70, "r": 20, "t": 50, "b": 50},
                      template="plotly_white", legend={"font": {"size": 11}})
    return fig


def _log10(x: float) -> float:
    return math.log10(max(x, 1e-9))
