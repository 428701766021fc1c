"""A memory layout as a figure: x = lifetime steps, y = byte offset, coloured by kind.

Level of detail: a raster image of the window (drawn on the server, white edges round every
rectangle big enough to have them) while the window holds many storages, filled SVG vectors
(one trace per kind) once it holds at most ``vector_limit``; never one layout shape per
rectangle.  Hover and click anywhere on a rectangle through an invisible grid.  No WebGL:
plotly's SVG path for a few thousand filled rectangles, and any WebGL trace in a software-GL
browser, took about a second per figure to draw, where a window's image takes 0.1 s.
Pure: a :class:`LayoutView` in, a figure out.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import plotly.graph_objects as go

from app.analysis.layout_view import KINDS, LayoutView
from app.core.formatting import byte_unit, fmt_bytes, kind_label
from app.figures.axes import binary_ticks, step_axis
from app.figures.raster import paint_index, png_data_uri, rasterize
from app.figures.style import BASE_LAYOUT, KIND_COLORS

__all__ = ["drawn_index", "layout_figure", "outline_tensors"]


#: The edge round each rectangle in the raster image (the vector fills' white outline).
EDGE_RGBA = np.array([255, 255, 255, 255], np.uint8)


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
    view: LayoutView, *, x_range: Sequence[float] | None = None, vector_limit: int = 800,
    highlight_id: str | None = None, title: str | None = None,
    raster_px: tuple[int, int] = (1400, 700), hover_grid: tuple[int, int] = (200, 100),
) -> go.Figure:
    """Tensor layout: x = lifetime steps, y = byte offset, coloured by kind.

    Level of detail: when more than ``vector_limit`` storages intersect the x window, the
    rectangles are drawn as one raster image of the window (``layout.images``) under an
    invisible ``hover_grid`` heatmap whose cells name the storage they show; otherwise as
    filled SVG vectors, one trace per kind, with an invisible marker at each centre (exact
    bytes in its hover).  ``layout.meta`` records the mode and the window.
    """
    xa, xb = (0.0, float(max(view.n_steps, 1))) if x_range is None else map(float, x_range)
    vis = np.nonzero(view.visible(xa, xb))[0]
    height = float(max(view.height_bytes, 1))
    mode = "vector" if len(vis) <= vector_limit else "raster"
    fig = go.Figure(layout=BASE_LAYOUT)
    kind_names = [k.value for k in KINDS]
    if mode == "vector":
        for code in np.unique(view.kind[vis]) if len(vis) else ():
            m = vis[view.kind[vis] == code]
            xs, ys = _rect_xy(view.start[m], view.end[m], view.offset[m],
                              view.offset[m] + view.size[m])
            name = kind_names[int(code)]
            fig.add_trace(go.Scatter(
                x=xs, y=ys, fill="toself", mode="lines", line={"width": 0.5, "color": "#fff"},
                fillcolor=KIND_COLORS[name], name=kind_label(name), hoverinfo="skip"))
    else:
        colors = np.array([_rgba(KIND_COLORS[k]) for k in kind_names], np.uint8)
        w, h = raster_px
        img = rasterize(view.start[vis], view.end[vis], view.offset[vis],
                        view.offset[vis] + view.size[vis], view.kind[vis], colors,
                        (xa, xb, 0.0, height), w, h, outline=EDGE_RGBA)
        fig.add_layout_image(source=png_data_uri(img), xref="x", yref="y", x=xa, y=height,
                             sizex=xb - xa, sizey=height, sizing="stretch", layer="below")
        for name in dict.fromkeys(kind_names[int(c)] for c in np.unique(view.kind[vis])):
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers",
                                     name=kind_label(name),
                                     marker={"color": KIND_COLORS[name], "symbol": "square"}))
    # hover and click anywhere on a rectangle: a transparent grid naming the storage drawn
    # at each cell's centre (vector mode adds exact markers at the centres, on top)
    _hover_grid(fig, view, vis, (xa, xb, 0.0, height), hover_grid, raster_px)
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
    step_axis(fig, view.n_steps)
    fig.update_xaxes(range=[xa, xb], autorange=False, title="step")
    fig.update_layout(
        # short enough to clear the mode bar at 1280 px; how it is drawn is in ``meta``
        title={"text": title or f"{view.label}: {len(view)} storages, "
                                  f"{fmt_bytes(view.height_bytes)} high"
                                  + (f", {len(vis)} in this window" if x_range is not None
                                     else ""),
               "font": {"size": 13}, "x": 0.01, "y": 0.98},
        meta={"lod": mode, "visible": len(vis), "window": [xa, xb]}, uirevision=view.label,
        height=460,
        hoverdistance=4)  # the grid answers everywhere; a marker only right at its centre
    return fig


_TENSOR_HOVER = ("%{text}%{hovertext}<br>%{customdata[4]} at offset %{customdata[5]}<br>"
                 "steps [%{customdata[2]}, %{customdata[3]})<br>"
                 "<span style='font-size:10px'>exact: %{customdata[0]:,} B at byte "
                 "%{customdata[1]:,}</span><extra></extra>")


def _hover_markers(fig: go.Figure, view: LayoutView, hov: np.ndarray) -> None:
    sizes = [fmt_bytes(int(v)) for v in view.size[hov]]
    offs = [fmt_bytes(int(v)) for v in view.offset[hov]]
    cd = [[int(a), int(b), int(c), int(d), e, f] for a, b, c, d, e, f in zip(
        view.size[hov], view.offset[hov], view.start[hov], view.end[hov], sizes, offs)]
    fig.add_trace(go.Scatter(
        x=((view.start[hov] + view.end[hov]) / 2).astype(np.float32),
        y=(view.offset[hov] + view.size[hov] / 2).astype(np.float64),
        mode="markers", marker={"size": 6, "color": "rgba(0,0,0,0)"}, name="tensors",
        showlegend=False, text=list(view.ids[hov]), customdata=cd,
        hovertext=_labels(view, hov), hovertemplate=_TENSOR_HOVER))


def _labels(view: LayoutView, idx: np.ndarray) -> list[str]:
    """Hover lines naming each storage (its name and module), ``""`` when unknown."""
    if view.labels is None:
        return [""] * len(idx)
    return list(view.labels[idx])


def drawn_index(view: LayoutView, vis: np.ndarray, window: tuple[float, float, float, float],
                grid: tuple[int, int], image_px: tuple[int, int]) -> np.ndarray:
    """Index into ``vis`` of the storage drawn at each grid cell's centre (``-1``: none).

    The storages are painted at the image's resolution (as the raster overview and the
    vector fills show them), then sampled at the cell centres, so a cell names the storage
    a user sees there, not the smallest one touching the cell.
    """
    gw, gh = grid
    w, h = max(image_px[0], gw), max(image_px[1], gh)
    full = paint_index(view.start[vis], view.end[vis], view.offset[vis],
                       view.offset[vis] + view.size[vis], window, w, h)
    cols = ((np.arange(gw) + 0.5) * w / gw).astype(np.int64)
    rows = ((np.arange(gh) + 0.5) * h / gh).astype(np.int64)
    return full[np.ix_(rows, cols)]


def _hover_grid(fig: go.Figure, view: LayoutView, vis: np.ndarray,
                window: tuple[float, float, float, float], grid: tuple[int, int],
                image_px: tuple[int, int] = (1400, 700)) -> None:
    gw, gh = grid
    xa, xb, ya, yb = window
    idx = drawn_index(view, vis, window, grid, image_px)
    pick = vis[np.maximum(idx, 0)]
    text = np.where(idx >= 0, view.ids[pick], "")
    names = np.array(_labels(view, pick.ravel()), dtype=object).reshape(pick.shape)
    names = np.where(idx >= 0, names, "")
    div, unit = byte_unit(float(view.size[vis].max(initial=1)) if len(vis) else 1.0)
    z = np.where(idx >= 0, view.size[pick] / div, np.nan).astype(np.float64)
    dx, dy = (xb - xa) / gw, (yb - ya) / gh
    fig.add_trace(go.Heatmap(
        z=z, x0=xa + dx / 2, dx=dx, y0=ya + dy / 2, dy=dy, text=text.tolist(), opacity=0,
        hovertext=names.tolist(), showscale=False, hoverongaps=False, name="tensors",
        hovertemplate=f"%{{text}}%{{hovertext}}<br>%{{z:.2f}} {unit}<br>(click for offset, "
                      "lifetime and exact bytes)<extra></extra>"))


def outline_tensors(fig: go.Figure, view: LayoutView, tensor_ids: Collection[str],
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
