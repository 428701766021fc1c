"""Memory before vs after: the figure, decimation, the peak notes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.analysis import layout_view, peaks, planner, settings
from app.analysis import modules as module_paths
from app.views.curves import figure as curves_figure
from roam_core.formats.graph_io import load_graph
from roam_core.model.samples import tiny_train_step


def test_curves_annotate_both_peaks_and_lines() -> None:
    before = np.array([1, 5, 3], dtype=np.int64) * 2**20
    after = np.array([1, 2, 4, 1], dtype=np.int64) * 2**20
    fig = curves_figure.memory_curves_figure(after, before, arena_bytes=5 * 2**20,
                                       lower_bound_bytes=3 * 2**20, before_label="eager")
    labels = [a for a in fig.layout.annotations if a.yref == "paper" and a.y == 1.0]
    assert [a.text for a in labels] == ["<b>eager: peak 5.00 MiB</b> @ step 1",
                                        "<b>planned: peak 4.00 MiB</b> @ step 2"]
    # above the plot, one line each: they cover neither a curve nor each other
    assert [(a.x, a.xanchor, a.yanchor, a.yshift) for a in labels] == [
        (0.0, "left", "bottom", 20), (0.0, "left", "bottom", 4)]
    # a click on a curve says whose order it is about
    assert {t.name: curves_figure.SIDES[t.customdata[0]] for t in fig.data
            if t.mode == "lines" and t.name in ("eager", "planned")} == {"eager": "before",
                                                                         "planned": "after"}
    names = [t.name for t in fig.data]
    assert {"eager", "planned", "arena", "lower bound"} <= set(names)
    assert fig.layout.yaxis.title.text == "memory (MiB)"
    assert "saves 1.00 MiB (20.0 %)" in fig.layout.title.text
    arena = next(t for t in fig.data if t.name == "arena")
    assert list(arena.y) == [5.0, 5.0]


def test_curves_range_and_step_marker() -> None:
    fig = curves_figure.memory_curves_figure(np.arange(10), x_range=[2, 5], step=3)
    assert tuple(fig.layout.xaxis.range) == (2, 5)
    assert [s.x0 for s in fig.layout.shapes] == [3.5]  # the middle of step 3


def test_long_curves_are_decimated_but_keep_peaks_and_the_window() -> None:
    rng = np.random.default_rng(1)
    curve = rng.integers(0, 1000, 20_000)
    curve[12_345] = 5000
    fig = curves_figure.memory_curves_figure(curve, curve[::-1], max_points=1000)
    line = fig.data[2]
    assert len(line.x) <= 1100
    assert 12_345 in set(line.x)
    assert max(line.y) * 1024 == pytest.approx(5000, rel=1e-3)  # KiB axis
    zoom = curves_figure.memory_curves_figure(curve, None, x_range=[100, 400], max_points=1000)
    assert set(range(100, 401)) <= set(zoom.data[0].x)  # every step inside the window


def test_peaks_are_annotated_by_module_on_a_traced_graph() -> None:
    """mlp-b8-steady records module paths: each peak names its top-3 modules."""


    g = load_graph(Path(__file__).resolve().parents[3] / "sample_graphs" /
                   "mlp-b8-steady.json.gz")
    assert module_paths.has_modules(g)
    assert not module_paths.has_modules(tiny_train_step())
    plan = planner.run_planner(g, settings.PlanSettings(method="eager", time_limit_s=1.0))
    view = layout_view.layout_from_plan(g, plan)
    curve = layout_view.total_curve(g, plan.order)
    k = int(np.argmax(curve))
    top = peaks.peak_modules(g, view, k)
    assert 1 <= len(top) <= 3
    assert sum(b for _, b in top) <= int(curve[k])
    assert [b for _, b in top] == sorted((b for _, b in top), reverse=True)
    note = peaks.peak_note(top, "top modules")
    fig = curves_figure.memory_curves_figure(curve, curve, peak_notes={"planned": note})
    assert any(note in a.text for a in fig.layout.annotations)


def test_an_unplanned_curve_is_the_before_orders() -> None:
    """Without a plan the one curve is the compared order's: its label and colour, and a
    click on it is about that order."""
    fig = curves_figure.memory_curves_figure(np.arange(5), after_label="eager (program order)",
                                             planned=False)
    line = fig.data[0]
    assert line.name == "eager (program order)"
    assert line.line.color == curves_figure.BEFORE_COLOR
    assert curves_figure.SIDES[line.customdata[0]] == "before"
