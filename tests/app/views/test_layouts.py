"""The tensor layouts: level of detail, highlight, hover anywhere on a rectangle."""

from __future__ import annotations

import numpy as np
import pytest

from app.analysis import layout_view
from app.analysis.layout_view import layout_from_plan
from app.views.layouts import figure as layouts_figure
from tests.app.helpers import (
    planned_with_tree,
    synthetic_view,
)


@pytest.mark.slow
def test_layout_raster_when_crowded_vector_when_zoomed() -> None:
    view = synthetic_view(20_000)
    fig = layouts_figure.layout_figure(view, vector_limit=5000, hover_grid=(200, 100))
    assert fig.layout.meta["lod"] == "raster"
    assert len(fig.layout.images) == 1
    assert not fig.layout.shapes  # never one shape per tensor
    assert not [t for t in fig.data if t.type == "scattergl"]  # no WebGL anywhere
    grid = fig.data[-1]
    assert grid.type == "heatmap"
    assert np.asarray(grid.z).shape == (100, 200)
    # every named cell names a storage that covers the cell's centre
    text = np.asarray(grid.text)
    for r, c in [(10, 10), (50, 120), (99, 199)]:
        if text[r, c]:
            i = int(text[r, c][1:])
            x = grid.x0 + c * grid.dx
            y = grid.y0 + r * grid.dy
            assert view.start[i] - 20 <= x <= view.end[i] + 20  # within a cell of it
            lo, hi = view.offset[i], view.offset[i] + view.size[i]
            assert lo - grid.dy <= y <= hi + grid.dy
            assert grid.z[r][c] * 1024 == view.size[i]  # KiB: sizes up to 32 KiB
    small = layouts_figure.layout_figure(view, x_range=[100, 110], vector_limit=5000)
    assert small.layout.meta["lod"] == "vector"
    assert not small.layout.images
    n_vis = int(view.visible(100, 110).sum())
    assert small.layout.meta["visible"] == n_vis
    fills = [t for t in small.data if t.type == "scatter" and t.fill == "toself"]
    assert sum(np.isnan(np.asarray(t.x, dtype=float)).sum() for t in fills) == n_vis
    assert small.data[-1].type == "scatter"
    assert small.data[-1].mode == "markers"
    assert len(small.data[-1].x) == n_vis
    # a window of many storages is a raster image of that window (no vectors to draw)
    mid = layouts_figure.layout_figure(view, x_range=[100, 400], vector_limit=50)
    assert mid.layout.meta["lod"] == "raster"
    assert mid.layout.meta["window"] == [100.0, 400.0]
    assert mid.layout.images[0].x == 100
    assert mid.layout.images[0].sizex == 300
    assert not [t for t in mid.data if t.type == "scattergl"]


def test_layout_of_plan_and_highlight() -> None:
    graph, plan = planned_with_tree()
    view = layout_from_plan(graph, plan)
    fig = layouts_figure.layout_figure(view, highlight_id="relu")
    assert fig.layout.meta["lod"] == "vector"
    assert len(fig.layout.shapes) == 1
    i = list(view.ids).index("relu")
    assert fig.layout.shapes[0].y0 == view.offset[i]
    assert fig.layout.yaxis.ticktext[0] == "0 B"


@pytest.mark.slow
def test_hover_names_the_storage_drawn_there_anywhere_on_it() -> None:
    """A big storage beside a sliver: every cell on the big one names the big one (the old
    grid named the smallest storage touching a cell), in raster and in vector mode."""

    ids = np.array(["big", "sliver"], dtype=object)
    view = layout_view.LayoutView(ids, np.array([0, 50]), np.array([100, 51]), np.array([0, 0]),
                      np.array([1000 * 512, 512]), np.array([3, 5], np.int8), 100,
                      1000 * 512, "two")
    for limit in (0, 5000):  # raster, vector
        fig = layouts_figure.layout_figure(view, vector_limit=limit, hover_grid=(50, 20))
        grid = next(t for t in fig.data if t.type == "heatmap")
        text = np.asarray(grid.text)
        assert (text == "big").mean() > 0.95, fig.layout.meta["lod"]
        assert (text == "").sum() == 0  # the whole window is covered: hover anywhere
        assert "MiB" in grid.hovertemplate or "KiB" in grid.hovertemplate
    vec = layouts_figure.layout_figure(view, vector_limit=5000)
    assert vec.data[-1].type == "scatter"  # exact markers stay on top
    assert vec.data[-1].mode == "markers"
    assert vec.layout.hoverdistance == 4
    cd = vec.data[-1].customdata[0]
    assert cd[4] == "500.00 KiB"  # binary units first, exact bytes after
    assert cd[0] == 512000
