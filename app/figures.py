"""Pure figure builders: roam_core objects and view models in, ``go.Figure`` out.

No Dash here (no ``PreventUpdate``, no components): the CLI report and the app share these
functions, and they are unit-tested without a browser.  Layout rectangles use level of
detail: a raster overview image when the window holds many storages, filled SVG vectors
(one trace per kind) once it holds fewer than ``vector_limit``.  Never one layout shape per
rectangle.  The operator timeline is a two-row heatmap (one image, whatever the op count),
and WebGL is used only for invisible hover markers: in headless or software-GL browsers
large WebGL traces were the slowest part of a page load.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from app.analysis import KINDS, LayoutView, fmt_bytes, iter_tree
from app.raster import paint_index, png_data_uri, rasterize
from roam_core.model.graph import Graph, OpId, Phase

__all__ = [
    "KIND_COLORS",
    "PHASE_COLORS",
    "binary_ticks",
    "empty_figure",
    "layout_figure",
    "mark_ops",
    "memory_curves_figure",
    "module_icicle_figure",
    "outline_tensors",
    "task_tree_figure",
    "timeline_figure",
]

_logger = logging.getLogger(__name__)

KIND_COLORS: dict[str, str] = {
    "parameter": "#4c72b0", "buffer": "#8172b3", "input": "#937860", "activation": "#dd8452",
    "gradient": "#55a868", "optimizer_state": "#c44e52", "temporary": "#da8bc3",
    "output": "#8c8c8c",
}
PHASE_COLORS: dict[str, str] = {
    "forward": "#4c72b0", "loss": "#937860", "backward": "#dd8452", "optimizer": "#55a868",
    "other": "#8c8c8c",
}
_UNIT_NAMES = ("B", "KiB", "MiB", "GiB", "TiB")
_BASE_LAYOUT: dict[str, Any] = {
    "template": "plotly_white", "margin": {"l": 70, "r": 20, "t": 64, "b": 40},
    "hovermode": "closest",
    "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right"},
}


def _unit(max_bytes: float) -> tuple[float, str]:
    i = 0
    while max_bytes >= 1024 ** (i + 1) and i < len(_UNIT_NAMES) - 1:
        i += 1
    return float(1024**i), _UNIT_NAMES[i]


def binary_ticks(max_bytes: float, target: int = 6) -> tuple[list[float], list[str]]:
    """Tick positions (bytes) on binary-aligned values, with labels like ``'1.5 GiB'``.

    Examples
    --------
    >>> binary_ticks(3 * 2**20)[1]
    ['0 B', '512 KiB', '1 MiB', '1.5 MiB', '2 MiB', '2.5 MiB', '3 MiB']
    """
    if max_bytes <= 0:
        return [0.0], ["0 B"]
    raw = max_bytes / target
    step = 2.0 ** np.ceil(np.log2(raw))  # power of two
    if max_bytes / (step / 2) <= target + 1 and step >= 2:
        step /= 2
    vals = list(np.arange(0, max_bytes + step * 0.999, step))
    texts = []
    for v in vals:
        if v == 0:
            texts.append("0 B")
            continue
        div, name = _unit(v)
        texts.append(f"{v / div:g} {name}")
    return [float(v) for v in vals], texts


def empty_figure(message: str = "nothing to show yet") -> go.Figure:
    """A blank figure carrying a centred message."""
    fig = go.Figure(layout=_BASE_LAYOUT)
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper",
                       yref="paper", font={"size": 14, "color": "#666"})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def _apply_range(fig: go.Figure, x_range: Sequence[float] | None) -> None:
    if x_range is not None:
        fig.update_xaxes(range=[float(x_range[0]), float(x_range[1])], autorange=False)


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
    extra_curves: Sequence[tuple[str, np.ndarray, str]] = (),
) -> go.Figure:
    """Live bytes per step before and after planning on one chart.

    ``extra_curves`` adds ``(name, curve, colour)`` lines (the selected module's bytes).

    Both peaks are annotated (value, step); the arena size and the lower bound are
    horizontal lines; the y axis uses binary units.  ``step`` draws a marker line.  Curves
    longer than ``max_points`` keep every step inside ``x_range`` up to that budget and the
    min and max of each bucket elsewhere (see :func:`decimate`), so peaks never vanish.
    """
    after = np.asarray(after, dtype=np.float64)
    curves = [(after_label, after, "#c44e52")]
    if before is not None:
        curves.insert(0, (before_label, np.asarray(before, dtype=np.float64), "#4c72b0"))
    curves += [(n, np.asarray(c, dtype=np.float64), col) for n, c, col in extra_curves]
    top = max([float(c.max()) for _, c, _ in curves if len(c)]
              + [float(arena_bytes or 0), float(lower_bound_bytes or 0), 1.0])
    div, unit = _unit(top)
    fig = go.Figure(layout=_BASE_LAYOUT)
    n = max(len(c) for _, c, _ in curves)
    for (name, c, color), pos in zip(curves, ("top left", "top right", "top right",
                                              "bottom right", "bottom right")):
        if not len(c):
            continue
        k = int(np.argmax(c))
        xs = decimate(c, max_points, x_range)
        fig.add_trace(go.Scatter(
            x=xs.astype(np.int32), y=(c[xs] / div).astype(np.float32), name=name,
            mode="lines", line={"color": color, "shape": "hv"},
            hovertemplate=f"{name}<br>step %{{x}}<br>%{{y:.3f}} {unit}<extra></extra>"))
        fig.add_trace(go.Scatter(
            x=[k], y=[c[k] / div], mode="markers+text", showlegend=False,
            marker={"color": color, "size": 9, "symbol": "diamond"},
            text=[f"peak {fmt_bytes(c[k])} @ step {k}"], textposition=pos,
            hoverinfo="skip", cliponaxis=False))
    for label, val, dash in (("arena", arena_bytes, "dash"),
                             ("lower bound", lower_bound_bytes, "dot")):
        if val:
            fig.add_trace(go.Scatter(
                x=[0, max(n - 1, 1)], y=[val / div] * 2, mode="lines", name=label,
                line={"color": "#333", "dash": dash, "width": 1},
                hovertemplate=f"{label}: {fmt_bytes(val)}<extra></extra>"))
    if title is None and before is not None and len(curves[0][1]) and len(after):
        b, a = float(curves[0][1].max()), float(after.max())
        pct = 100 * (b - a) / b if b else 0.0
        title = f"peak {fmt_bytes(b)} → {fmt_bytes(a)}: saves {fmt_bytes(b - a)} ({pct:.1f} %)"
    if step is not None:
        fig.add_vline(x=step, line={"color": "#999", "width": 1, "dash": "dot"})
    fig.update_layout(title={"text": title or "", "font": {"size": 14}, "x": 0.01, "y": 0.98},
                      xaxis_title="step", yaxis_title=f"memory ({unit})", dragmode="zoom",
                      yaxis_rangemode="tozero",
                      uirevision="curves")
    _apply_range(fig, x_range)
    return fig


def timeline_figure(
    graph: Graph, after_order: Sequence[OpId], before_order: Sequence[OpId] | None = None, *,
    alloc_bytes: np.ndarray | None = None, freed_bytes: np.ndarray | None = None,
    x_range: Sequence[float] | None = None, highlight_op: str | None = None,
    before_label: str = "before",
) -> go.Figure:
    """Operators by step, one row for the planned order (and one for ``before_order``),
    coloured by phase; hover shows the op, its target and bytes allocated/freed.

    Drawn as one two-row heatmap (cell ``text`` = op id, so a click names the op).
    """
    fig = go.Figure(layout=_BASE_LAYOUT)
    rows = [(before_label, before_order)] if before_order is not None else []
    rows.append(("planned", after_order))
    phases = list(Phase)
    code = {p.value: i for i, p in enumerate(phases)}
    phase_of = {o.id: code[o.phase.value] for o in graph.ops}
    target_of = {o.id: o.target + (f"<br>module {o.module}" if o.module else "")
                 for o in graph.ops}
    n = max(len(o) for _, o in rows)
    z = np.full((len(rows), n), np.nan, np.float32)
    text = [[""] * n for _ in rows]
    hover = [[""] * n for _ in rows]
    top = float(max(np.max(alloc_bytes, initial=0), np.max(freed_bytes, initial=0))) \
        if alloc_bytes is not None and freed_bytes is not None else 0.0
    div, unit = _unit(top)
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
    fig.add_trace(go.Heatmap(
        z=z, x0=0, dx=1, y=list(range(len(rows))), text=text, hovertext=hover, zmin=0,
        zmax=k, colorscale=scale, showscale=False, xgap=0, ygap=6,
        hovertemplate="%{text}%{hovertext}<br>step %{x}<extra></extra>"))
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
                    x=[list(order).index(highlight_op)], y=[r], mode="markers",
                    showlegend=False, hoverinfo="skip",
                    marker={"size": 18, "color": "rgba(0,0,0,0)",
                            "line": {"color": "#000", "width": 2}}))
    fig.update_yaxes(tickvals=list(range(len(rows))), ticktext=[r[0] for r in rows],
                     range=[-0.5, len(rows) - 0.5], fixedrange=True)
    fig.update_xaxes(range=[-0.5, n - 0.5])
    fig.update_layout(xaxis_title="step", height=230, uirevision="timeline",
                      margin={"l": 110, "r": 20, "t": 30, "b": 40})
    _apply_range(fig, x_range)
    return fig


def _rect_xy(x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    n = len(x0)
    xs = np.empty((n, 6), np.float64)
    ys = np.empty((n, 6), np.float64)
    xs[:, :5] = np.c_[x0, x1, x1, x0, x0]
    ys[:, :5] = np.c_[y0, y0, y1, y1, y0]
    xs[:, 5] = ys[:, 5] = np.nan
    return xs.ravel(), ys.ravel()


def _rgba(color: str) -> list[int]:
    c = color.lstrip("#")
    return [int(c[i:i + 2], 16) for i in (0, 2, 4)] + [255]


def layout_figure(
    view: LayoutView, *, x_range: Sequence[float] | None = None, vector_limit: int = 5000,
    highlight_id: str | None = None, title: str | None = None,
    raster_px: tuple[int, int] = (1400, 700), hover_grid: tuple[int, int] = (200, 100),
) -> go.Figure:
    """Tensor layout: x = lifetime steps, y = byte offset, coloured by kind.

    Level of detail: when more than ``vector_limit`` storages intersect the x window, the
    rectangles are drawn as one raster image (``layout.images``) under an invisible
    ``hover_grid`` heatmap whose cells name the (smallest) storage they show, so hover and
    click need no WebGL; otherwise as filled SVG vectors, one trace per kind, with an
    invisible ``Scattergl`` marker at each centre.  ``layout.meta`` records the mode.
    """
    xa, xb = (0.0, float(max(view.n_steps, 1))) if x_range is None else map(float, x_range)
    vis = np.nonzero(view.visible(xa, xb))[0]
    height = float(max(view.height_bytes, 1))
    mode = "vector" if len(vis) <= vector_limit else "raster"
    fig = go.Figure(layout=_BASE_LAYOUT)
    kind_names = [k.value for k in KINDS]
    if mode == "vector":
        for code in np.unique(view.kind[vis]) if len(vis) else ():
            m = vis[view.kind[vis] == code]
            xs, ys = _rect_xy(view.start[m], view.end[m], view.offset[m],
                              view.offset[m] + view.size[m])
            name = kind_names[int(code)]
            fig.add_trace(go.Scatter(
                x=xs, y=ys, fill="toself", mode="lines", line={"width": 0.5, "color": "#fff"},
                fillcolor=KIND_COLORS[name], name=name, hoverinfo="skip"))
    else:
        colors = np.array([_rgba(KIND_COLORS[k]) for k in kind_names], np.uint8)
        w, h = raster_px
        img = rasterize(view.start[vis], view.end[vis], view.offset[vis],
                        view.offset[vis] + view.size[vis], view.kind[vis], colors,
                        (xa, xb, 0.0, height), w, h)
        fig.add_layout_image(source=png_data_uri(img), xref="x", yref="y", x=xa, y=height,
                             sizex=xb - xa, sizey=height, sizing="stretch", layer="below")
        for name in dict.fromkeys(kind_names[int(c)] for c in np.unique(view.kind[vis])):
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                     marker={"color": KIND_COLORS[name], "symbol": "square"}))
        _hover_grid(fig, view, vis, (xa, xb, 0.0, height), hover_grid)
    if mode == "vector":  # after the fills, so the markers are on top
        _hover_markers(fig, view, vis)
    if highlight_id is not None:
        idx = np.nonzero(view.ids == highlight_id)[0]
        if len(idx):
            i = int(idx[0])
            fig.add_shape(type="rect", x0=view.start[i], x1=view.end[i], y0=view.offset[i],
                          y1=view.offset[i] + view.size[i],
                          line={"color": "#000", "width": 2})
    vals, texts = binary_ticks(height)
    fig.update_yaxes(tickvals=vals, ticktext=texts, range=[0, height * 1.02],
                     title="offset")
    fig.update_xaxes(range=[xa, xb], autorange=False, title="step")
    fig.update_layout(
        title={"text": title or f"{view.label}: {len(view)} storages, height "
                                  f"{fmt_bytes(view.height_bytes)} ({mode}, {len(vis)} in view)",
               "font": {"size": 13}, "x": 0.01, "y": 0.98},
        meta={"lod": mode, "visible": len(vis)}, uirevision=view.label, height=460)
    return fig


_TENSOR_HOVER = ("%{text}%{hovertext}<br>%{customdata[0]:,} B at offset %{customdata[1]:,}<br>"
                 "steps [%{customdata[2]}, %{customdata[3]})<extra></extra>")


def _hover_markers(fig: go.Figure, view: LayoutView, hov: np.ndarray) -> None:
    cd = np.c_[view.size[hov], view.offset[hov], view.start[hov], view.end[hov]]
    fig.add_trace(go.Scattergl(
        x=((view.start[hov] + view.end[hov]) / 2).astype(np.float32),
        y=(view.offset[hov] + view.size[hov] / 2).astype(np.float64),
        mode="markers", marker={"size": 6, "opacity": 0.01, "color": "#000"}, name="tensors",
        showlegend=False, text=list(view.ids[hov]), customdata=cd.astype(np.float64),
        hovertext=_labels(view, hov), hovertemplate=_TENSOR_HOVER))


def _labels(view: LayoutView, idx: np.ndarray) -> list[str]:
    """Hover lines naming each storage (its name and module), ``""`` when unknown."""
    if view.labels is None:
        return [""] * len(idx)
    return list(view.labels[idx])


def _hover_grid(fig: go.Figure, view: LayoutView, vis: np.ndarray,
                window: tuple[float, float, float, float], grid: tuple[int, int]) -> None:
    gw, gh = grid
    xa, xb, ya, yb = window
    idx = paint_index(view.start[vis], view.end[vis], view.offset[vis],
                      view.offset[vis] + view.size[vis], window, gw, gh)
    pick = vis[np.maximum(idx, 0)]
    text = np.where(idx >= 0, view.ids[pick], "")
    names = np.array(_labels(view, pick.ravel()), dtype=object).reshape(pick.shape)
    names = np.where(idx >= 0, names, "")
    z = np.where(idx >= 0, view.size[pick], np.nan).astype(np.float64)
    dx, dy = (xb - xa) / gw, (yb - ya) / gh
    fig.add_trace(go.Heatmap(
        z=z, x0=xa + dx / 2, dx=dx, y0=ya + dy / 2, dy=dy, text=text.tolist(), opacity=0,
        hovertext=names.tolist(), showscale=False, hoverongaps=False, name="tensors",
        hovertemplate="%{text}%{hovertext}<br>%{z:,} B<br>(click for details)<extra></extra>"))


def task_tree_figure(tree: Mapping[str, Any] | None) -> go.Figure:
    """The planner's task division as an icicle (size = op count); for the report."""
    nodes = list(iter_tree(tree))
    if not nodes:
        return empty_figure("no task tree (baseline plan)")
    ids, parents, values, text = [], [], [], []

    def walk(node: Mapping[str, Any], parent: str) -> None:
        nid = str(node.get("id"))
        ids.append(nid)
        parents.append(parent)
        values.append(int(node.get("num_ops", 0) or 0))
        text.append(f"{node.get('kind', '')} · {node.get('num_ops', 0)} ops · "
                    f"{fmt_bytes(node.get('peak_before_bytes'))} → "
                    f"{fmt_bytes(node.get('peak_after_bytes'))} · {node.get('status', '')}")
        for c in node.get("children") or ():
            walk(c, nid)

    walk(tree, "")  # type: ignore[arg-type]
    fig = go.Figure(go.Icicle(ids=ids, labels=ids, parents=parents, values=values,
                              text=text, branchvalues="total",
                              hovertemplate="%{label}<br>%{text}<extra></extra>"),
                    layout=_BASE_LAYOUT)
    fig.update_layout(height=360, margin={"l": 10, "r": 10, "t": 30, "b": 10})
    return fig


# ------------------------------------------------------------------ memory by module
def module_icicle_figure(
    after: Mapping[str, Mapping[str, int]], before: Mapping[str, Mapping[str, int]] | None = None,
    *, title: str | None = None, selected: str | None = None, max_depth: int = 4,
) -> go.Figure:
    """Bytes live at the peak as an icicle by module (area = bytes, colour = main kind).

    Parameters
    ----------
    after, before : Mapping of full module path to (kind -> bytes)
        Own bytes of each module at the shown peak (and at the baseline's); ``""`` is the
        top level.  Each node's value is its subtree's bytes, so the root is the peak.
    title : str, optional
    selected : str, optional
        A module path drawn with a black outline.
    max_depth : int
        Levels drawn at once (click a node to zoom into it).

    The node id of a module is its path (``"(top level)"`` for ``""``; the root is
    ``"all"``), so a click names the module.
    """
    from app.analysis import module_label, natural_key

    def totals(own: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for path, kinds in own.items():
            parts = path.split(".") if path else [""]
            for i in range(1, len(parts) + 1):
                slot = out.setdefault(".".join(parts[:i]), {})
                for k, b in kinds.items():
                    slot[k] = slot.get(k, 0) + b
        return out

    sub = totals(after)
    sub_before = totals(before) if before is not None else {}
    peak = sum(sum(k.values()) for k in after.values())
    if not peak:
        return empty_figure("no bytes live at the peak")
    ids, parents, values, colors, lines = ["all"], [""], [peak], ["#eeeeee"], [1]
    text = [f"{fmt_bytes(peak)} at the peak"]
    for path in sorted(sub, key=lambda p: (p.count("."), natural_key(p))):
        kinds = sub[path]
        total = sum(kinds.values())
        if not total:
            continue
        parent = path.rpartition(".")[0] if "." in path else "all"
        ids.append(module_label(path))
        parents.append(module_label(parent) if parent != "all" else "all")
        values.append(total)
        main = max(kinds, key=lambda k: kinds[k])
        colors.append(KIND_COLORS.get(main, "#8c8c8c"))
        was = sum(sub_before.get(path, {}).values()) if before is not None else None
        parts = [f"{fmt_bytes(total)} at the peak ({100 * total / peak:.1f} %)"]
        if was is not None:
            parts.append(f"before: {fmt_bytes(was)}")
        parts += [f"{k}: {fmt_bytes(b)}" for k, b in
                  sorted(kinds.items(), key=lambda kv: -kv[1]) if b]
        text.append("<br>".join(parts))
        lines.append(3 if selected is not None and path == selected else 1)
    fig = go.Figure(go.Icicle(
        ids=ids, labels=[i.rpartition(".")[2] if i not in ("all", "(top level)") else i
                         for i in ids],
        parents=parents, values=values, branchvalues="total", text=text,
        marker={"colors": colors, "line": {"width": lines, "color": "#000"}},
        maxdepth=max_depth, sort=False, tiling={"orientation": "v"},
        hovertemplate="<b>%{id}</b><br>%{text}<extra></extra>", textinfo="label"),
        layout=_BASE_LAYOUT)
    shown = {k for kinds in after.values() for k, b in kinds.items() if b}
    key = "  ".join(f'<span style="color:{c}">■</span> {k}' for k, c in KIND_COLORS.items()
                    if k in shown)
    head = title or f"bytes at the peak by module: {fmt_bytes(peak)}"
    fig.update_layout(height=440, margin={"l": 10, "r": 10, "t": 56, "b": 10},
                      title={"text": f"{head}<br><sup>colour: the largest kind · {key}</sup>",
                             "font": {"size": 13}, "x": 0.01, "y": 0.97},
                      uirevision="modules")
    return fig


def outline_tensors(fig: go.Figure, view: LayoutView, tensor_ids: Any,
                    limit: int = 4000) -> None:
    """Outline the rectangles of ``tensor_ids`` in a layout figure (the largest ``limit``)."""
    mask = np.isin(view.ids, np.array(list(tensor_ids), dtype=object))
    idx = np.nonzero(mask)[0]
    if not len(idx):
        return
    idx = idx[np.argsort(-view.size[idx], kind="stable")][:limit]
    xs, ys = _rect_xy(view.start[idx], view.end[idx], view.offset[idx],
                      view.offset[idx] + view.size[idx])
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="selected module",
                             line={"color": "#000", "width": 1.5}, hoverinfo="skip"))


def mark_ops(fig: go.Figure, orders: Sequence[Sequence[OpId]], op_ids: Any) -> None:
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
