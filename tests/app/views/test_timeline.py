"""The operator timeline: rows, phases, hover; copies from many threads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from app.core import memo
from app.views.timeline import data as timeline_data
from app.views.timeline import figure as timeline_figure
from roam_core.model.samples import tiny_train_step


def test_timeline_rows_phases_and_hover() -> None:
    g = tiny_train_step()
    order = list(reversed(g.op_ids))
    alloc = np.arange(len(order)) * 2**20
    fig = timeline_figure.timeline_figure(g, order, g.op_ids, alloc_bytes=alloc, freed_bytes=alloc,
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


@pytest.mark.slow
def test_figures_copied_from_many_threads_stay_whole(planned: dict[str, Any]) -> None:
    """Eight threads ask for one memoised timeline at once (as a page's first load does):
    every copy is complete and equal."""
    from concurrent.futures import ThreadPoolExecutor


    g, pk = planned["graph"]["key"], planned["plan"]
    memo.clear_caches()
    with ThreadPoolExecutor(8) as ex:
        figs = list(ex.map(lambda _: timeline_data.timeline_fig(g, pk, "eager", None, None),
                           range(16)))
    want = figs[0].to_json()
    assert figs[0].data
    assert all(f.to_json() == want for f in figs[1:])
