"""View models and the planner door (stand-ins included): pure computations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from app import analysis, planning
from roam_core.graph import round_size
from roam_core.samples import diamond, tiny_train_step
from roam_core.simulate import lifetimes, simulate
from tests.app.helpers import planned_with_tree
from tests.strategies import random_graphs


def _no_overlap(graph, lts, offs, a) -> bool:
    items = [(lts[t], offs[t], round_size(graph.tensors[t].size_bytes, a)) for t in lts]
    for i, (l1, o1, s1) in enumerate(items):
        for l2, o2, s2 in items[i + 1:]:
            if s1 and s2 and l1.overlaps(l2) and o1 < o2 + s2 and o2 < o1 + s1:
                return False
    return True


@given(random_graphs(max_ops=10))
def test_first_fit_offsets_never_overlap(g) -> None:
    lts = lifetimes(g, g.op_ids)
    offs = planning.first_fit_offsets(g, lts, 1)
    assert set(offs) == set(lts)
    assert _no_overlap(g, lts, offs, 1)


def test_stand_in_plan_is_consistent() -> None:
    g = diamond()
    plan = planning._stand_in_plan(g, planning.PlanSettings(alignment_bytes=1), None)
    assert plan.planned_peak_bytes == simulate(g, plan.order, alignment_bytes=1).peak_bytes
    assert plan.planned_peak_bytes <= plan.baseline_peak_bytes
    assert plan.arena_bytes >= plan.planned_peak_bytes >= plan.lower_bound_bytes
    assert set(plan.offsets) == set(g.tensors)


def test_layout_view_and_live_rows_match_the_curve() -> None:
    graph, plan = planned_with_tree()
    view = analysis.layout_from_plan(graph, plan)
    assert len(view) == len(graph.tensors)
    curve = analysis.total_curve(graph, plan.order, plan.alignment_bytes)
    for step in range(len(plan.order)):
        rows = analysis.live_rows(graph, view, step)
        assert sum(r["size_bytes"] for r in rows) == curve[step]
        sizes = [r["size_bytes"] for r in rows]
        assert sizes == sorted(sizes, reverse=True)


def test_step_bytes_balance() -> None:
    g = tiny_train_step()
    alloc, freed = analysis.step_bytes(g, g.op_ids, 1)
    live = np.asarray(simulate(g, g.op_ids, alignment_bytes=1).live_bytes)
    # bytes live while step i runs = allocated so far - freed before step i
    assert list(np.cumsum(alloc) - np.concatenate([[0], np.cumsum(freed)[:-1]])) == list(live)


def test_search_regex_and_plain_fallback() -> None:
    g = tiny_train_step()
    assert [h[1] for h in analysis.search(g, "^relu$")] == ["relu", "relu"]
    assert [h[0] for h in analysis.search(g, "aten.sub_")] == ["op"]
    assert analysis.search(g, "relu_bw(") == []  # invalid regex: plain substring, no match
    assert analysis.search(g, "  ") == []
    assert len(analysis.search(g, ".", limit=3)) == 3


def test_explain_names_the_mutation_constraint() -> None:
    graph, plan = planned_with_tree()
    secs = analysis.explain_op(graph, plan, graph.op_ids, "update")
    pins = "\n".join(secs[1].lines)
    assert "mm" in pins
    assert "mutation" in pins
    assert "grad_w" in pins
    assert "data: reads grad_w" in pins
    assert "sub-task: t1" in secs[0].lines


def test_explain_tensor_lifetimes_and_peak_neighbours() -> None:
    graph, plan = planned_with_tree()
    secs = analysis.explain_tensor(graph, plan, graph.op_ids, "relu")
    titles = [s.title for s in secs]
    assert titles[0] == "tensor relu"
    assert titles[1] == "lifetime"
    assert any("steps [" in x for x in secs[1].lines)
    assert titles[2].startswith("live with it at the planned peak") or \
        titles[2] == "at the planned peak"
    w = analysis.explain_tensor(graph, plan, graph.op_ids, "w")
    assert "resident" in w[0].lines[2]


def test_tree_helpers() -> None:
    _, plan = planned_with_tree()
    nodes = [n["id"] for n, _ in analysis.iter_tree(plan.task_tree)]
    assert nodes == ["root", "t0", "t1"]
    t1 = analysis.find_node(plan.task_tree, "t1")
    assert analysis.node_range(t1) == (4, 8)
    assert analysis.find_node(plan.task_tree, "nope") is None


def test_summary_rows() -> None:
    _, plan = planned_with_tree()
    rows = dict(analysis.summary_rows(plan, plan.planned_peak_bytes * 2, "eager", None))
    assert rows["saving"].endswith("(50.0 %)")
    assert rows["eager reserved (caching allocator)"] == "n/a"
    assert "stage order" in rows


@pytest.mark.parametrize("method", ["eager", "lescea", "inductor", "xla"])
def test_baseline_layout_is_consistent(method: str) -> None:
    from app.services import baseline_order

    g = tiny_train_step()
    order, label = baseline_order(g, method)
    assert sorted(order) == sorted(g.op_ids)
    assert label
    blocks, _, how = planning.baseline_layout(g, order)
    assert how
    assert {b.tensor_id for b in blocks} >= set(lifetimes(g, order))
