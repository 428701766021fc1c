"""Plans with recomputation in every view: the expanded graph, their timeline colour, Explain.

A plan made under a budget carries ``recompute`` ops whose ids (``<op>@r``) are in its order
but not in the graph; the views draw it over :func:`roam_core.model.recompute_ops.expand_graph`
of the graph (:func:`view_graph`).  No Dash here.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from app import state
from app.analysis import Section, fmt_bytes
from roam_core.model.graph import Graph, OpId
from roam_core.model.plan import Plan

__all__ = ["RECOMPUTE_COLOR", "explain_recompute", "mark_recompute", "view_graph",
           "without_reruns"]

#: Timeline colour of recomputed ops (the phase colours are blue/orange/green/red/purple).
RECOMPUTE_COLOR = "#e377c2"


@functools.lru_cache(maxsize=8)
def _expanded(graph_key: str, plan_key: str) -> Graph:
    from roam_core.model.recompute_ops import expand_graph

    plan = state.get_plan(plan_key)
    return expand_graph(state.get_graph(graph_key), plan.recompute, order=plan.order)


def view_graph(graph_key: str, plan_key: str | None) -> Graph:
    """The graph a plan's views are drawn over: expanded with its recompute ops, if any."""
    if plan_key and state.get_plan(plan_key).recompute:
        return _expanded(graph_key, plan_key)
    return state.get_graph(graph_key)


def without_reruns(plan: Plan) -> Plan:
    """``plan`` with its re-runs left out of the order: an order of the *input* graph, for
    views that compare it op by op with a baseline order (the walkthrough, the why notes).
    Dropped values then look kept until their late readers (those views say so)."""
    if not plan.recompute:
        return plan
    from dataclasses import replace

    ids = {r.id for r in plan.recompute}
    return replace(plan, order=tuple(o for o in plan.order if o not in ids))


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


def _steps_freed(g2: Graph, plan: Plan, graph: Graph, tid: str) -> tuple[int, int, int]:
    """(steps the original is not live, bytes, bytes x steps) gained by dropping ``tid``:
    the planned lifetime of the original against the span to its last late reader."""
    from roam_core.oracle.simulate import lifetimes

    lt = lifetimes(g2, plan.order)
    pos = {o: i for i, o in enumerate(plan.order)}
    t = graph.tensors[tid]
    readers = [pos[c] for c in t.consumers if c in pos]
    kept_end = max(readers, default=lt[tid].end - 1) + 1
    steps = max(kept_end - lt[tid].end, 0)
    size = t.size_bytes
    return steps, size, steps * size


def explain_recompute(graph: Graph, plan: Plan, kind: str, ident: str) -> list[Section]:
    """Why an op or storage is recomputed, what it costs (FLOPs) and what it frees.

    Empty for a plan without recomputation or an op/tensor it does not touch.
    """
    if not plan.recompute:
        return []
    from roam_core.model.recompute_ops import op_flops

    g2 = view_graph_for(graph, plan)
    by_id = {r.id: r for r in plan.recompute}
    by_source = {r.source: r for r in plan.recompute}
    copy_of = {v: (r, i) for r in plan.recompute for i, v in enumerate(r.outputs)}
    rop = None
    if kind == "op":
        rop = by_id.get(ident) or by_source.get(ident)
    elif ident in copy_of:
        rop = copy_of[ident][0]
    elif ident in graph.tensors and graph.tensors[ident].producer in by_source:
        rop = by_source[graph.tensors[ident].producer]
    if rop is None:
        return []
    src = graph.op(rop.source)
    flops = op_flops(graph, src)
    sf = max(plan.step_flops, 1)
    made = [v for v in src.outputs if v in graph.tensors and graph.storage_of(v) == v]
    lines = [f"{rop.id} re-runs {src.id} ({src.target}"
             + (f", module {src.module}" if src.module else "") + ") in the backward",
             f"why: the plan's budget drops its output{'s' if len(made) > 1 else ''} after the "
             "last forward use, instead of keeping "
             f"{'them' if len(made) > 1 else 'it'} live until the backward reads "
             f"{'them' if len(made) > 1 else 'it'}",
             f"cost: {flops / 1e6:,.2f} MFLOP ({100 * flops / sf:.3f}% of the step); the whole "
             f"plan adds {plan.extra_flops / 1e6:,.2f} MFLOP ({100 * plan.extra_flops / sf:.2f}%)"
             f" for {len(plan.recompute)} re-runs",
             "read by: " + (", ".join(rop.readers[:6]) or "(none)")
             + (" …" if len(rop.readers) > 6 else "")]
    for v in made:
        steps, size, bs = _steps_freed(g2, plan, graph, v)
        lines.append(f"frees {v}: {fmt_bytes(size)} for {steps} steps "
                     f"({bs / 2**20:,.2f} MiB × steps) between its last forward use and the re-run")
    return [Section("recomputed", tuple(lines))]


def view_graph_for(graph: Graph, plan: Plan) -> Graph:
    """:func:`view_graph` without the cache: ``graph`` expanded with ``plan``'s re-runs."""
    from roam_core.model.recompute_ops import expand_graph

    return expand_graph(graph, plan.recompute, order=plan.order) if plan.recompute else graph


def recomputed_ops(plan: Plan) -> Sequence[OpId]:
    """Ids of the plan's recompute ops, in plan order."""
    ids = {r.id for r in plan.recompute}
    return [o for o in plan.order if o in ids]

