"""Live tensors: the rows at a step add up to the curve; exact bytes on hover."""

from __future__ import annotations

from typing import Any

from app.analysis import layout_view
from app.views.explain import view as explain_view
from app.views.live import model as live_model
from app.views.live import view as live_view
from tests.app.helpers import (
    planned_with_tree,
)


def test_layout_view_and_live_rows_match_the_curve() -> None:
    graph, plan = planned_with_tree()
    view = layout_view.layout_from_plan(graph, plan)
    assert len(view) == len(graph.tensors)
    curve = layout_view.total_curve(graph, plan.order, plan.alignment_bytes)
    for step in range(len(plan.order)):
        rows = live_model.live_rows(graph, view, step)
        assert sum(r["size_bytes"] for r in rows) == curve[step]
        sizes = [r["size_bytes"] for r in rows]
        assert sizes == sorted(sizes, reverse=True)
        # every row is named: a recorded name, else its module and role (never blank)
        assert all(r["name"] for r in rows)


def test_live_kinds_read_as_words() -> None:
    """``optimizer state``, never the enum id ``optimizer_state``."""
    import roam_core as rc
    from tests.builders import two_param_step

    graph = two_param_step()
    plan = rc.make_plan(graph, rc.PlannerConfig(workers=1, time_limit_s=1))
    view = layout_view.layout_from_plan(graph, plan)
    kinds = {r["kind"] for s in range(len(plan.order))
             for r in live_model.live_rows(graph, view, s)}
    assert "optimizer state" in kinds
    assert not any("_" in str(k) for k in kinds)


def test_units_are_binary_with_exact_bytes_on_demand(planned: dict[str, Any]) -> None:
    g, pk = planned["graph"], planned["plan"]
    rows, _ = live_view.render_live(g, pk, "eager", None)
    assert all(r["offset"].endswith("B") for r in rows)  # "1.50 KiB", never a raw count
    tips = live_view.live_tooltips(rows)
    assert tips[0]["offset"]["value"] == f"{rows[0]['offset_bytes']:,} B"
    text = str(explain_view.render_explain(g, pk, "eager", {"kind": "tensor", "id": "relu"}))
    assert "offset " in text
    import re
    assert not re.search(r"offset \d+ \(", text)


def test_live_rows_and_explain_show_the_producers_source_line() -> None:
    import dataclasses

    from app.views.explain.model import explain_op
    from roam_core.model.graph import Graph

    graph, plan = planned_with_tree()
    op = next(o for o in graph.ops if graph.storages_created(o.id))
    ops = [dataclasses.replace(o, source="model.py:7 in forward") if o.id == op.id else o
           for o in graph.ops]
    graph = Graph.build(ops, list(graph.tensors.values()), graph.aliases, graph.control_edges,
                        outputs=graph.outputs, name=graph.name, origin=graph.origin)
    view = layout_view.layout_from_plan(graph, plan)
    rows = [r for s in range(len(plan.order)) for r in live_model.live_rows(graph, view, s)]
    assert {r["source"] for r in rows if r["producer"] == op.id} == {"model.py:7 in forward"}
    text = str(explain_op(graph, plan, plan.order, op.id))
    assert "source model.py:7 in forward" in text
