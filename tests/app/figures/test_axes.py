"""The shared step axis and binary byte ticks."""

from __future__ import annotations

import numpy as np
import pytest

from app.analysis.layout_view import layout_from_plan
from app.figures import axes
from app.views.curves import figure as curves_figure
from app.views.layouts import figure as layouts_figure
from app.views.timeline import figure as timeline_figure
from tests.app.helpers import (
    planned_with_tree,
)


@pytest.mark.parametrize(("max_bytes", "last"), [(3 * 2**20, "3 MiB"), (1000, "1 KiB"),
                                                 (7 * 2**30, "7 GiB")])
def test_binary_ticks(max_bytes: int, last: str) -> None:
    vals, texts = axes.binary_ticks(max_bytes)
    assert texts[-1] == last
    assert vals[-1] >= max_bytes
    steps = np.diff(vals)
    assert np.allclose(steps, steps[0])
    assert np.log2(steps[0]) == int(np.log2(steps[0]))  # binary-aligned


@pytest.mark.slow
def test_step_axes_line_up_in_every_view() -> None:
    """Same fixed margins, no automargin and the same whole range: step s at the same x."""
    graph, plan = planned_with_tree()
    view = layout_from_plan(graph, plan)
    n = len(plan.order)
    curve = np.arange(n) * 2**20
    figs = [curves_figure.memory_curves_figure(curve, curve[::-1]),
            timeline_figure.timeline_figure(graph, plan.order, graph.op_ids,
                                    before_label="eager, optimizer state moved (paper's)"),
            layouts_figure.layout_figure(view)]
    for f in figs:
        assert (f.layout.margin.l, f.layout.margin.r) == (axes.STEP_AXIS_MARGIN["l"],
                                                         axes.STEP_AXIS_MARGIN["r"])
        assert f.layout.yaxis.automargin is False
        assert tuple(f.layout.xaxis.range) == (0, n)
    assert all(len(t) <= 10 for t in figs[1].layout.yaxis.ticktext)  # fits the margin
    assert "eager, optimizer state moved" in figs[1].layout.title.text
    line = figs[0].data[0]
    assert line.x[-1] == n  # the last step's line reaches the end of its step
