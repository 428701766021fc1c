"""Figure builders: pure functions, checked on their traces and layout (no browser)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from app import figures
from app.analysis import layout_from_plan
from app.raster import rasterize
from roam_core.model.samples import tiny_train_step
from tests.app.helpers import planned_with_tree, synthetic_view


def test_figures_module_imports_no_dash() -> None:
    code = "import sys, app.figures, app.services; print('dash' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_curves_annotate_both_peaks_and_lines() -> None:
    before = np.array([1, 5, 3], dtype=np.int64) * 2**20
    after = np.array([1, 2, 4, 1], dtype=np.int64) * 2**20
    fig = figures.memory_curves_figure(after, before, arena_bytes=5 * 2**20,
                                       lower_bound_bytes=3 * 2**20, before_label="eager")
    texts = [t.text[0] for t in fig.data if t.mode == "markers+text"]
    assert texts == ["peak 5.00 MiB @ step 1", "peak 4.00 MiB @ step 2"]
    names = [t.name for t in fig.data]
    assert {"eager", "planned", "arena", "lower bound"} <= set(names)
    assert fig.layout.yaxis.title.text == "memory (MiB)"
    assert "saves 1.00 MiB (20.0 %)" in fig.layout.title.text
    arena = next(t for t in fig.data if t.name == "arena")
    assert list(arena.y) == [5.0, 5.0]


def test_curves_range_and_step_marker() -> None:
    fig = figures.memory_curves_figure(np.arange(10), x_range=[2, 5], step=3)
    assert tuple(fig.layout.xaxis.range) == (2, 5)
    assert [s.x0 for s in fig.layout.shapes] == [3.5]  # the middle of step 3


def test_layout_raster_when_crowded_vector_when_zoomed() -> None:
    view = synthetic_view(20_000)
    fig = figures.layout_figure(view, vector_limit=5000, hover_grid=(200, 100))
    assert fig.layout.meta["lod"] == "raster"
    assert len(fig.layout.images) == 1
    assert not fig.layout.shapes  # never one shape per tensor
    assert not [t for t in fig.data if t.type == "scattergl"]  # no WebGL in the overview
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
    small = figures.layout_figure(view, x_range=[100, 110], vector_limit=5000)
    assert small.layout.meta["lod"] == "vector"
    assert not small.layout.images
    n_vis = int(view.visible(100, 110).sum())
    assert small.layout.meta["visible"] == n_vis
    fills = [t for t in small.data if t.type == "scatter" and t.fill == "toself"]
    assert sum(np.isnan(np.asarray(t.x, dtype=float)).sum() for t in fills) == n_vis
    assert small.data[-1].type == "scattergl"
    assert len(small.data[-1].x) == n_vis


def test_layout_of_plan_and_highlight() -> None:
    graph, plan = planned_with_tree()
    view = layout_from_plan(graph, plan)
    fig = figures.layout_figure(view, highlight_id="relu")
    assert fig.layout.meta["lod"] == "vector"
    assert len(fig.layout.shapes) == 1
    i = list(view.ids).index("relu")
    assert fig.layout.shapes[0].y0 == view.offset[i]
    assert fig.layout.yaxis.ticktext[0] == "0 B"


def test_timeline_rows_phases_and_hover() -> None:
    g = tiny_train_step()
    order = list(reversed(g.op_ids))
    alloc = np.arange(len(order)) * 2**20
    fig = figures.timeline_figure(g, order, g.op_ids, alloc_bytes=alloc, freed_bytes=alloc,
                                  highlight_op="mm", before_label="eager")
    assert list(fig.layout.yaxis.ticktext) == ["eager", "planned"]
    heat = fig.data[0]
    assert heat.type == "heatmap"
    assert np.asarray(heat.z).shape == (2, len(order))
    assert list(heat.text[1]) == order
    assert list(heat.text[0]) == list(g.op_ids)
    assert heat.hovertext[1][1] == "<br>aten.mm.default<br>alloc 1.00 MiB, freed 1.00 MiB"
    assert set(heat.hovertext[0]) == {""}
    legend = {t.name for t in fig.data if t.type == "scatter" and t.name}
    assert legend == {"forward", "loss", "backward", "optimizer"}
    # same phase -> same colour code in both rows
    z = np.asarray(heat.z)
    assert z[1][order.index("mm")] == z[0][list(g.op_ids).index("mm")]
    rings = [t for t in fig.data if t.type == "scatter" and t.hoverinfo == "skip"]
    assert sorted((t.x[0], t.y[0]) for t in rings) == [(0.5, 0), (len(order) - 0.5, 1)]


def test_task_tree_icicle() -> None:
    _, plan = planned_with_tree()
    fig = figures.task_tree_figure(plan.task_tree)
    assert list(fig.data[0].ids) == ["root", "t0", "t1"]
    assert list(fig.data[0].parents) == ["", "root", "root"]
    assert figures.task_tree_figure(None).layout.annotations[0].text.startswith("no task")


@pytest.mark.parametrize(("max_bytes", "last"), [(3 * 2**20, "3 MiB"), (1000, "1 KiB"),
                                                 (7 * 2**30, "7 GiB")])
def test_binary_ticks(max_bytes: int, last: str) -> None:
    vals, texts = figures.binary_ticks(max_bytes)
    assert texts[-1] == last
    assert vals[-1] >= max_bytes
    steps = np.diff(vals)
    assert np.allclose(steps, steps[0])
    assert np.log2(steps[0]) == int(np.log2(steps[0]))  # binary-aligned


def test_rasterize_paints_kinds_and_window() -> None:
    colors = np.array([[255, 0, 0, 255], [0, 0, 255, 255]], np.uint8)
    x0, x1 = np.array([0, 5]), np.array([5, 10])
    y0, y1 = np.array([0, 5]), np.array([5, 10])
    img = rasterize(x0, x1, y0, y1, np.array([0, 1]), colors, (0, 10, 0, 10), 10, 10)
    assert (img[:5, :5] == colors[0]).all()
    assert (img[5:, 5:] == colors[1]).all()
    assert (img[:5, 5:, 3] == 0).all()
    # a rectangle outside the window paints nothing; a tiny one still gets one pixel
    img2 = rasterize(np.array([20, 3]), np.array([30, 3.01]), np.array([0, 2]),
                     np.array([5, 2.01]), np.array([0, 0]), colors, (0, 10, 0, 10), 10, 10)
    assert int(img2[..., 3].astype(bool).sum()) == 1


def test_paint_index_puts_small_storages_on_top() -> None:
    from app.raster import paint_index

    idx = paint_index(np.array([0, 4]), np.array([10, 5]), np.array([0, 4]),
                      np.array([10, 5]), (0, 10, 0, 10), 10, 10)
    assert idx[4, 4] == 1
    assert (idx == 0).sum() == 99


def test_long_curves_are_decimated_but_keep_peaks_and_the_window() -> None:
    rng = np.random.default_rng(1)
    curve = rng.integers(0, 1000, 20_000)
    curve[12_345] = 5000
    fig = figures.memory_curves_figure(curve, curve[::-1], max_points=1000)
    line = fig.data[2]
    assert len(line.x) <= 1100
    assert 12_345 in set(line.x)
    assert max(line.y) * 1024 == pytest.approx(5000, rel=1e-3)  # KiB axis
    zoom = figures.memory_curves_figure(curve, None, x_range=[100, 400], max_points=1000)
    assert set(range(100, 401)) <= set(zoom.data[0].x)  # every step inside the window


def test_step_axes_line_up_in_every_view() -> None:
    """Same fixed margins, no automargin and the same whole range: step s at the same x."""
    graph, plan = planned_with_tree()
    view = layout_from_plan(graph, plan)
    n = len(plan.order)
    curve = np.arange(n) * 2**20
    figs = [figures.memory_curves_figure(curve, curve[::-1]),
            figures.timeline_figure(graph, plan.order, graph.op_ids,
                                    before_label="eager, optimizer state moved (paper's)"),
            figures.layout_figure(view)]
    for f in figs:
        assert (f.layout.margin.l, f.layout.margin.r) == (figures.STEP_AXIS_MARGIN["l"],
                                                         figures.STEP_AXIS_MARGIN["r"])
        assert f.layout.yaxis.automargin is False
        assert tuple(f.layout.xaxis.range) == (0, n)
    assert all(len(t) <= 10 for t in figs[1].layout.yaxis.ticktext)  # fits the margin
    assert "eager, optimizer state moved" in figs[1].layout.title.text
    line = figs[0].data[0]
    assert line.x[-1] == n  # the last step's line reaches the end of its step


def test_hover_names_the_storage_drawn_there_anywhere_on_it() -> None:
    """A big storage beside a sliver: every cell on the big one names the big one (the old
    grid named the smallest storage touching a cell), in raster and in vector mode."""
    from app.analysis import LayoutView

    ids = np.array(["big", "sliver"], dtype=object)
    view = LayoutView(ids, np.array([0, 50]), np.array([100, 51]), np.array([0, 0]),
                      np.array([1000 * 512, 512]), np.array([3, 5], np.int8), 100,
                      1000 * 512, "two")
    for limit in (0, 5000):  # raster, vector
        fig = figures.layout_figure(view, vector_limit=limit, hover_grid=(50, 20))
        grid = next(t for t in fig.data if t.type == "heatmap")
        text = np.asarray(grid.text)
        assert (text == "big").mean() > 0.95, fig.layout.meta["lod"]
        assert (text == "").sum() == 0  # the whole window is covered: hover anywhere
        assert "MiB" in grid.hovertemplate or "KiB" in grid.hovertemplate
    vec = figures.layout_figure(view, vector_limit=5000)
    assert vec.data[-1].type == "scattergl"  # exact markers stay on top
    assert vec.layout.hoverdistance == 4
    cd = vec.data[-1].customdata[0]
    assert cd[4] == "500.00 KiB"  # binary units first, exact bytes after
    assert cd[0] == 512000
