"""The operator timeline as one two-row heatmap (one image whatever the op count), and the
marks drawn over it: recomputed ops, a selected module's ops.

Pure: a graph and orders in, a figure out (no cache, no Dash).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import plotly.graph_objects as go

from app.core.formatting import byte_unit
from app.figures.axes import apply_range, step_axis
from app.figures.style import BASE_LAYOUT, PHASE_COLORS
from roam_core.model.graph import Graph, OpId, Phase
from roam_core.model.plan import Plan

__all__ = ["RECOMPUTE_COLOR", "mark_ops", "mark_recompute", "timeline_figure"]

#: Timeline colour of recomputed ops (the phase colours are blue/orange/green/red/purple).
RECOMPUTE_COLOR = "#e377c2"


def timeline_figure(
    graph: Graph, after_order: Sequence[OpId], before_order: Sequence[OpId] | None = None, *,
    alloc_bytes: np.ndarray | None = None, freed_bytes: np.ndarray | None = None,
    x_range: Sequence[float] | None = None, highlight_op: str | None = None,
    before_label: str = "before", after_label: str = "roam", planned: bool = True,
) -> go.Figure:
    """Operators by step, one row for the planned order (top) and one for ``before_order``
    (bottom), coloured by phase; hover shows the op, its module and the
    bytes allocated/freed.  With ``planned=False`` the one row, ``after_order``, is the
    compared order's (labelled ``before``).

    Drawn as one two-row heatmap (cell ``text`` = op id, so a click names the op).
    """
    fig = go.Figure(layout=BASE_LAYOUT)
    # y grows upwards: the planned order is the top row (as the planned arena is the top
    # layout), the compared order under it; the row names are short (the margin is fixed
    # so that every view's step axis lines up) and the title names the orders in full
    rows = [("before", before_order)] if before_order is not None else []
    rows.append(("planned" if planned else "before", after_order))
    phases = list(Phase)
    code = {p.value: i for i, p in enumerate(phases)}
    phase_of = {o.id: code[o.phase.value] for o in graph.ops}
    target_of = {o.id: o.target + (f"<br>module {o.module}" if o.module else "")
                 + (f"<br>{o.source}" if o.source else "") for o in graph.ops}
    n = max(len(o) for _, o in rows)
    z = np.full((len(rows), n), np.nan, np.float32)
    text = [[""] * n for _ in rows]
    hover = [[""] * n for _ in rows]
    top = float(max(np.max(alloc_bytes, initial=0), np.max(freed_bytes, initial=0))) \
        if alloc_bytes is not None and freed_bytes is not None else 0.0
    div, unit = byte_unit(top)
    for r, (_, order) in enumerate(rows):
        z[r, :len(order)] = [phase_of[o] for o in order]
        text[r][:len(order)] = list(order)
    # hover details only on the planned row (the comparison row names its ops: half the bytes)
    hover[-1] = [f"<br>{target_of[o]}" for o in after_order]
    if alloc_bytes is not None and freed_bytes is not None:
        hover[-1] = [f"{h}<br>alloc {a / div:.2f} {unit}, freed {f / div:.2f} {unit}"
                     for h, a, f in zip(hover[-1], alloc_bytes, freed_bytes)]
    k = len(phases)
    scale = []
    for i, p in enumerate(phases):
        c = PHASE_COLORS[p.value]
        scale += [[i / k, c], [(i + 1) / k, c]]
    steps = np.tile(np.arange(n, dtype=np.int32), (len(rows), 1))
    fig.add_trace(go.Heatmap(  # cell s spans [s, s + 1), as on every step axis
        z=z, x0=0.5, dx=1, y=list(range(len(rows))), text=text, hovertext=hover, zmin=0,
        zmax=k, colorscale=scale, showscale=False, xgap=0, ygap=6, customdata=steps,
        hovertemplate="%{text}%{hovertext}<br>step %{customdata}<extra></extra>"))
    present = {p for _, o in rows for p in {phase_of[x] for x in o}}
    for i, p in enumerate(phases):
        if i in present:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=p.value,
                                     marker={"color": PHASE_COLORS[p.value], "symbol": "square",
                                             "size": 10}))
    if highlight_op is not None:
        for r, (_, order) in enumerate(rows):
            if highlight_op in order:
                fig.add_trace(go.Scatter(
                    x=[list[str](order).index(highlight_op) + 0.5], y=[r], mode="markers",
                    showlegend=False, hoverinfo="skip",
                    marker={"size": 18, "color": "rgba(0,0,0,0)",
                            "line": {"color": "#000", "width": 2}}))
    fig.update_yaxes(tickvals=list(range(len(rows))), ticktext=[r[0] for r in rows],
                     range=[-0.5, len(rows) - 0.5], fixedrange=True)
    fig.update_layout(xaxis_title="step", height=230, uirevision="timeline",
                      margin={"t": 30, "b": 40})
    if before_order is not None:
        title = f"top: planned ({after_label}) · bottom: before = {before_label}"
    else:
        title = f"before = {before_label} (not planned yet)"
    fig.update_layout(title={"text": title, "font": {"size": 12}, "x": 0.01, "y": 0.97})
    step_axis(fig, n)
    apply_range(fig, x_range)
    return fig


def mark_ops(fig: go.Figure, orders: Sequence[Sequence[OpId]], op_ids: Collection[OpId]
             ) -> None:
    """Underline, on each timeline row (``orders[r]`` is row ``r``), the steps of ``op_ids``.

    Consecutive steps are drawn as one segment, so a module's forward is a few lines.
    """
    chosen = set(op_ids)
    xs: list[float | None] = []
    ys: list[float | None] = []
    for r, order in enumerate(orders):
        hit = np.fromiter((o in chosen for o in order), bool, len(order))
        if not hit.any():
            continue
        d = np.diff(np.r_[0, hit.astype(np.int8), 0])
        for s, e in zip(np.nonzero(d == 1)[0], np.nonzero(d == -1)[0]):
            xs += [s - 0.5, e - 0.5, None]
            ys += [r - 0.42, r - 0.42, None]
    if xs:
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="selected module",
                                 line={"color": "#000", "width": 4}, hoverinfo="skip"))


def mark_recompute(fig: go.Figure, plan: Plan, row: int, n_rows: int) -> None:
    """Paint the recomputed ops of ``plan`` (timeline row ``row``) in their own colour.

    A second heatmap over the same cells (text = op id, so a click still names the op) and a
    legend entry ``recomputed``.
    """
    if not plan.recompute:
        return
    ids = {r.id: r.source for r in plan.recompute}
    order = list(plan.order)
    z = np.full((n_rows, len(order)), np.nan, np.float32)
    text = [[""] * len(order) for _ in range(n_rows)]
    hover = [[""] * len(order) for _ in range(n_rows)]
    for i, o in enumerate(order):
        if o in ids:
            z[row, i] = 1.0
            text[row][i] = o
            hover[row][i] = f"<br>recomputes {ids[o]} (re-run in the backward)"
    fig.add_trace(go.Heatmap(
        z=z, x0=0, dx=1, y=list(range(n_rows)), text=text, hovertext=hover, zmin=0, zmax=1,
        colorscale=[[0, RECOMPUTE_COLOR], [1, RECOMPUTE_COLOR]], showscale=False, xgap=0,
        ygap=6, name="recomputed", hovertemplate="%{text}%{hovertext}<br>step %{x}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="recomputed",
                             marker={"color": RECOMPUTE_COLOR, "symbol": "square", "size": 10}))
