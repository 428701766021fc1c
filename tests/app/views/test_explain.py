"""The Explain panel: ops, tensors, lifetimes."""

from __future__ import annotations

from pathlib import Path

from app.analysis import layout_view, peaks
from app.core import state
from app.views.explain import data as explain_data
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


def test_explain_on_a_rerun_names_its_step_and_readers(cache_dir: Path) -> None:
    """A re-run is not in the order before planning (no "step None"); its copy is read by
    the backward and by other re-runs (no "read by: (none)"); its copy has a lifetime."""
    from roam_core.formats.graph_io import load_graph as _load
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    g = _load(Path(__file__).resolve().parents[3] / "sample_graphs"
              / "teach_recompute-b256-steady.json.gz")
    plan = make_plan(g, config=PlannerConfig(time_limit_s=5, budget_bytes=6 * 2**20))
    gk, pk = state.put_graph(g), state.put_plan(plan)
    seen_readers = 0
    for rop in plan.recompute:
        for sel in ({"kind": "op", "id": rop.id}, {"kind": "tensor", "id": rop.outputs[0]}):
            text = " ".join(" ".join(s.lines) for s in explain_data.explain_sections(
                gk, pk, "eager", sel))
            assert "None" not in text
            assert "order has" not in text  # the error of a lifetime on the wrong graph
        (rsec,) = [s for s in explain_data.explain_sections(gk, pk, "eager",
                                                            {"kind": "op", "id": rop.id})
                   if s.title == "recomputed"]
        read_by = next(x for x in rsec.lines if x.startswith("read by: "))
        seen_readers += read_by != "read by: (none)"
    assert seen_readers == len(plan.recompute)
