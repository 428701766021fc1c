"""View models and the planner door: pure computations."""

from __future__ import annotations

import numpy as np
import pytest

from app import analysis, planning
from roam_core.model.samples import tiny_train_step
from roam_core.oracle.simulate import lifetimes, simulate
from tests.app.helpers import planned_with_tree


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


@pytest.mark.parametrize("method", [m for m, _ in planning.BASELINE_METHODS])
def test_baselines_are_valid_orders_with_a_layout(method: str) -> None:
    from roam_core.oracle.validate import check_order

    g = tiny_train_step()
    order, label = planning.baseline_order(g, method)
    assert check_order(g, order) == []
    assert "unknown" not in label
    blocks, _, how = planning.baseline_layout(g, order)
    assert how
    assert {b.tensor_id for b in blocks} >= set(lifetimes(g, order))


def test_why_notes_explain_odd_results() -> None:

    from app.analysis import why_notes

    g = tiny_train_step()
    plan = planning.run_planner(g, planning.PlanSettings(method="eager", time_limit_s=1.0))
    # the plan's curve above the compared one for most steps before its peak
    n = len(plan.order)
    after = np.arange(n, dtype=np.int64) + 100
    before = np.full(n, 50, np.int64)
    before[-1] = 10_000
    notes = why_notes(g, plan, g.op_ids, "eager", before, after)
    assert any(w.startswith("The planned curve is above eager for 100 % of the steps")
               for w in notes)
    assert not [w for w in why_notes(g, plan, g.op_ids, "eager", after, after)
                if "above" in w]


def test_why_notes_name_optimizer_ops_hoisted_before_the_loss() -> None:
    """On a traced Adam step: the ops that need nothing from the backward, run first."""
    import dataclasses
    from pathlib import Path

    from app.analysis import why_notes
    from roam_core.formats.graph_io import load_graph

    g = load_graph(Path(__file__).resolve().parents[2] / "sample_graphs" /
                   "mlp-b8-steady.json.gz")
    loss = next(o.id for o in g.ops if o.phase.value == "loss")
    needs_loss: dict[str, bool] = {}

    def after_loss(op: str) -> bool:  # does op depend on the loss (through data edges)?
        if op not in needs_loss:
            needs_loss[op] = op == loss or any(
                p is not None and after_loss(p) for p in map(g.value_producer, g.op(op).inputs))
        return needs_loss[op]

    free = [o.id for o in g.ops if o.phase.value == "optimizer" and not after_loss(o.id)]
    assert free  # Adam's step counters and bias corrections
    order = (*free, *[o for o in g.op_ids if o not in free])
    plan = planning.run_planner(g, planning.PlanSettings(method="eager", time_limit_s=1.0))
    hoisted = dataclasses.replace(plan, order=order)
    curve = np.zeros(len(order), np.int64)
    notes = why_notes(g, hoisted, g.op_ids, "eager", curve, curve)
    assert any(w.startswith(f"{len(free)} optimizer ops run before the loss") for w in notes)


def test_lifetime_change_and_peak_contributors() -> None:
    from app.analysis import layout_from_plan, lifetime_change, peak_contributors, peak_note

    assert lifetime_change(1024, 2, 5).startswith("change: 3 steps longer")
    graph, plan = planned_with_tree()
    view = layout_from_plan(graph, plan)
    top = peak_contributors(graph, view, 2)
    assert 1 <= len(top) <= 3
    assert [b for _, b in top] == sorted((b for _, b in top), reverse=True)
    assert peak_note(top).startswith("top: ")
    text = str(analysis.explain_tensor(graph, plan, graph.op_ids, "relu"))
    assert "change: " in text


def test_peaks_are_annotated_by_module_on_a_traced_graph() -> None:
    """mlp-b8-steady records module paths: each peak names its top-3 modules."""
    from pathlib import Path

    from app import figures
    from app.analysis import has_modules, layout_from_plan, peak_modules, total_curve
    from roam_core.formats.graph_io import load_graph

    g = load_graph(Path(__file__).resolve().parents[2] / "sample_graphs" /
                   "mlp-b8-steady.json.gz")
    assert has_modules(g)
    assert not has_modules(tiny_train_step())
    plan = planning.run_planner(g, planning.PlanSettings(method="eager", time_limit_s=1.0))
    view = layout_from_plan(g, plan)
    curve = total_curve(g, plan.order)
    k = int(np.argmax(curve))
    top = peak_modules(g, view, k)
    assert 1 <= len(top) <= 3
    assert sum(b for _, b in top) <= int(curve[k])
    assert [b for _, b in top] == sorted((b for _, b in top), reverse=True)
    note = analysis.peak_note(top, "top modules")
    fig = figures.memory_curves_figure(curve, curve, peak_notes={"planned": note})
    texts = [t.text[0] for t in fig.data if t.mode == "markers+text"]
    assert any(note in t for t in texts)
