"""Peak memory against the extra time of recomputation as a figure: roam's budget plans as a
line, each checkpointing recipe as its own marker, torch's min-cut as one labelled series.
Time is the cost model's estimate (ms, and % of the step on hover, with the FLOPs).

Pure: a frontier record in, a figure out.  Each point's ``customdata`` is its plan key (a
click loads it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from app.core.formatting import byte_unit, flops_text, fmt_bytes
from app.figures.style import empty_figure
from app.views.budget.model import BASELINE_LABELS, MIN_CUT, FrontierRecord, method_label

__all__ = ["MIN_CUT_COLOR", "ROAM_COLOR", "frontier_figure"]

MIN_CUT_COLOR = "#ff7f0e"


_SYMBOLS = {"none": "circle-open", "checkpoint_blocks": "square", "checkpoint_every_2": "diamond",
            "sqrt_segments": "triangle-up", "checkpoint_sequential": "cross",
            "selective_attention": "star"}


_COLORS = {"none": "#7f7f7f", "checkpoint_blocks": "#1f77b4", "checkpoint_every_2": "#2ca02c",
           "sqrt_segments": "#9467bd", "checkpoint_sequential": "#8c564b",
           "selective_attention": "#bcbd22"}


ROAM_COLOR = "#d62728"


def _ms(p: Mapping[str, Any]) -> float:
    """A point's extra time in ms (0 for records made before the cost model)."""
    return 1e3 * float(p.get("extra_seconds", 0.0))


def _cost_text(p: Mapping[str, Any]) -> str:
    """Hover text of a point's cost: time first, then FLOPs."""
    return (f"+{_ms(p):.3f} ms ({p.get('extra_time_pct', 0.0):.2f}% of the step)"
            f"<br>+{p['extra_pct']:.2f}% FLOPs, {p['recomputed_ops']} re-runs")


def _coincident_labels(points: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each min-cut point's budget; points on the same spot share one label (``0.5, 0.7``)."""
    spots: dict[tuple[int, float], list[str]] = {}
    for p in points:
        spots.setdefault((p["peak_bytes"], _ms(p)), []).append(
            p["method"][len(MIN_CUT):])
    seen: set[tuple[int, float]] = set()
    out = []
    for p in points:
        spot = (p["peak_bytes"], _ms(p))
        out.append("" if spot in seen else ", ".join(spots[spot]))
        seen.add(spot)
    return out


def frontier_figure(record: FrontierRecord | None, selected_plan: str | None = None
                    ) -> go.Figure:
    """Peak memory against extra time (ms): roam's budget plans as a line, each baseline as
    its own marker; ``customdata`` is the plan key (a click loads it)."""
    if not record or not record.get("points"):  # no axes, no grey plot area
        fig = empty_figure("No frontier yet: press “Compute frontier”")
        fig.update_layout(height=380)
        return fig
    fig = go.Figure()
    pts = record["points"]
    sf = record.get("step_flops") or 0
    div, unit = byte_unit(max(p["peak_bytes"] for p in pts))
    roam = sorted((p for p in pts if p["method"] == "roam"), key=lambda p: p["peak_bytes"])
    if roam:
        fig.add_trace(go.Scatter(
            x=[_ms(p) for p in roam], y=[p["peak_bytes"] / div for p in roam],
            mode="lines+markers", name="roam (budget plans)", customdata=[
                p["plan_key"] for p in roam],
            marker={"color": ROAM_COLOR, "size": 10}, line={"color": ROAM_COLOR},
            text=[f"roam, budget {fmt_bytes(p['budget_bytes'])}"
                  f"<br>peak {fmt_bytes(p['peak_bytes'])}"
                  f"<br>{_cost_text(p)}" for p in roam],
            hovertemplate="%{text}<extra></extra>"))
    cut = sorted((p for p in pts if p["method"].startswith(MIN_CUT)),
                 key=lambda p: p["method"])
    if cut:  # one series, each point labelled by its activation_memory_budget
        fig.add_trace(go.Scatter(
            x=[_ms(p) for p in cut], y=[p["peak_bytes"] / div for p in cut],
            mode="markers+text", name="torch min-cut (activation_memory_budget)",
            customdata=[p["plan_key"] for p in cut],
            text=_coincident_labels(cut), textposition="top right",
            textfont={"size": 10, "color": MIN_CUT_COLOR},
            marker={"symbol": "hexagon", "size": 12, "color": MIN_CUT_COLOR,
                    "line": {"width": 1, "color": "#222"}},
            hovertext=[f"{method_label(p['method'])}<br>peak {fmt_bytes(p['peak_bytes'])}"
                       f"<br>{_cost_text(p)}" for p in cut],
            hovertemplate="%{hovertext}<extra></extra>"))
    for p in pts:
        if p["method"] == "roam" or p["method"].startswith(MIN_CUT):
            continue
        m = p["method"]
        fig.add_trace(go.Scatter(
            x=[_ms(p)], y=[p["peak_bytes"] / div], mode="markers",
            name=BASELINE_LABELS.get(m, m), customdata=[p["plan_key"]],
            marker={"symbol": _SYMBOLS.get(m, "x"), "size": 13, "color": _COLORS.get(m, "#333"),
                    "line": {"width": 1, "color": "#222"}},
            text=[f"{BASELINE_LABELS.get(m, m)}<br>peak {fmt_bytes(p['peak_bytes'])}"
                  f"<br>{_cost_text(p)}"],
            hovertemplate="%{text}<extra></extra>"))
    sel = [p for p in pts if selected_plan and p["plan_key"] == selected_plan]
    if sel:
        fig.add_trace(go.Scatter(
            x=[_ms(sel[0])], y=[sel[0]["peak_bytes"] / div], mode="markers",
            name="shown in the views", hoverinfo="skip",
            marker={"size": 22, "color": "rgba(0,0,0,0)", "line": {"width": 3, "color": "#000"}}))
    fig.update_layout(
        title=f"{record.get('graph_name', '')}: peak memory vs extra time "
              f"(step {1e3 * float(record.get('step_seconds') or 0.0):.2f} ms, "
              f"{flops_text(sf)}, estimated on {record.get('device_profile', '?')}); "
              "click a point to load its plan",
        xaxis_title="extra time per step (ms, estimated)",
        yaxis_title=f"peak ({unit}, arena incl. resident)",
        height=420, margin={"l": 70, "r": 20, "t": 50, "b": 50}, clickmode="event",
        legend={"font": {"size": 11}}, template="plotly_white")
    return fig

