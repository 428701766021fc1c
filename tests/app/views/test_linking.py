"""One step window and one selection for every view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dash.exceptions import PreventUpdate

from app.core import ids, state
from app.views.curves import view as curves_view
from app.views.linking import data as linking_data
from app.views.linking import view as linking_view
from tests.app.helpers import (
    put_planned,
    run,
)


def test_on_range_sources(planned: dict[str, Any]) -> None:
    g, pk = planned["graph"], planned["plan"]

    def rng(trig: Any, value: Any) -> Any:
        return run(linking_view.on_range, trig, value, *([None] * 7), pk, g, "eager")

    assert rng(ids.CURVES, {"xaxis.range[0]": 2, "xaxis.range[1]": 5}) == (
        [2.0, 5.0], "steps 2 – 5")
    assert rng(ids.RESET_ZOOM, 1) == (None, "whole step axis")
    r, _ = rng(ids.SEARCH_PICK, {"index": "op:update", "n": 1})  # a search hit: its op
    assert r[0] < 7 < r[1]
    with pytest.raises(PreventUpdate):
        rng(ids.SEARCH_PICK, None)
    r, text = rng({"index": "t1", "type": ids.TREE_NODE}, 1)
    assert r[0] < 4 < r[1]
    assert text.startswith("steps")
    with pytest.raises(PreventUpdate):
        rng({"index": "t1", "type": ids.TREE_NODE}, None)  # re-rendered tree: no click
    with pytest.raises(PreventUpdate):
        rng(ids.LAYOUT, {"dragmode": "pan"})


def test_on_select_and_step(planned: dict[str, Any]) -> None:
    click = {"points": [{"text": "relu", "customdata": [512, 0, 0, 1, 5], "x": 3.2}]}
    assert run(linking_view.on_select, ids.LAYOUT, click, click, None, None, [], None) == {
        "kind": "tensor", "id": "relu"}
    assert run(linking_view.on_select, ids.TIMELINE, click, None, None, click, [], None)["kind"] \
        == "op"
    pick = {"index": "op:mm", "n": 1}  # a search hit (assets/search_hits.js)
    assert run(linking_view.on_select, ids.SEARCH_PICK, pick, None, None, None, pick,
               None) == {"kind": "op", "id": "mm"}
    with pytest.raises(PreventUpdate):
        run(linking_view.on_select, ids.SEARCH_PICK, None, None, None, None, None, None)
    assert run(curves_view.on_step, ids.CURVES, click, click, None) == {"step": 3,
                                                                       "side": "after"}
    before = {"points": [{"customdata": 0, "x": 7.5}]}  # the compared order's curve
    assert run(curves_view.on_step, ids.CURVES, before, before, "p") == {"step": 7,
                                                                         "side": "before"}
    assert run(curves_view.on_step, ids.PLAN_KEY, "p", None, "p") is None


def test_tree_node_zoom_stays_on_the_step_axis(planned: dict[str, Any]) -> None:
    """The root spans every step: its window is the axis, never a negative, too wide range."""
    g, pk = planned["graph"], planned["plan"]
    n = len(state.get_plan(pk).order)
    r, text = run(linking_view.on_range, {"index": "root", "type": ids.TREE_NODE}, 1,
                  *([None] * 7), pk, g, "eager")
    assert r == [0.0, n]
    assert text == f"steps 0 – {n}"
    r, _ = run(linking_view.on_range, {"index": "t1", "type": ids.TREE_NODE}, 1,
               *([None] * 7), pk, g, "eager")
    assert 0 <= r[0] < r[1] <= n


def test_linking_ranges(cache_dir: Path) -> None:
    gk, pk = put_planned()
    assert linking_data.range_from_relayout({"xaxis.range[0]": 1, "xaxis.range[1]": 4}) == [1, 4]
    assert linking_data.range_from_relayout({"xaxis.autorange": True}) is None
    assert linking_data.range_from_relayout({"dragmode": "pan"}) == "keep"
    assert linking_data.range_from_relayout({"autosize": True}) == "keep"  # first draw
    node = linking_data.range_of(gk, pk, "eager", "node", "t1")
    assert node[0] < 4
    assert node[1] > 7
    op = linking_data.range_of(gk, pk, "eager", "op", "update")
    assert op[0] < 7 < op[1]
    assert op[1] - op[0] >= linking_data.MIN_RANGE_STEPS
    tensor = linking_data.range_of(gk, pk, "eager", "tensor", "relu")
    assert tensor is not None
    assert linking_data.range_of(gk, pk, "eager", "node", "nope") is None
