"""The Explain panel: ops, tensors, lifetimes."""

from __future__ import annotations

from app.analysis import layout_view, peaks
from app.views.explain import model as explain_model
from tests.app.helpers import (
    planned_with_tree,
)


def test_explain_names_the_mutation_constraint() -> None:
    graph, plan = planned_with_tree()
    secs = explain_model.explain_op(graph, plan, graph.op_ids, "update")
    pins = "\n".join(secs[1].lines)
    assert "mm" in pins
    assert "mutation" in pins
    assert "grad_w" in pins
    assert "data: reads grad_w" in pins
    assert "sub-task: t1" in secs[0].lines


def test_explain_tensor_lifetimes_and_peak_neighbours() -> None:
    graph, plan = planned_with_tree()
    secs = explain_model.explain_tensor(graph, plan, graph.op_ids, "relu")
    titles = [s.title for s in secs]
    assert titles[0] == "tensor relu"
    assert titles[1] == "lifetime"
    assert any("steps [" in x for x in secs[1].lines)
    assert titles[2].startswith("live with it at the planned peak") or \
        titles[2] == "at the planned peak"
    w = explain_model.explain_tensor(graph, plan, graph.op_ids, "w")
    assert "resident" in w[0].lines[2]


def test_lifetime_change_and_peak_contributors() -> None:

    assert explain_model.lifetime_change(1024, 2, 5).startswith("change: 3 steps longer")
    graph, plan = planned_with_tree()
    view = layout_view.layout_from_plan(graph, plan)
    top = peaks.peak_contributors(graph, view, 2)
    assert 1 <= len(top) <= 3
    assert [b for _, b in top] == sorted((b for _, b in top), reverse=True)
    assert peaks.peak_note(top).startswith("top: ")
    text = str(explain_model.explain_tensor(graph, plan, graph.op_ids, "relu"))
    assert "change: " in text
