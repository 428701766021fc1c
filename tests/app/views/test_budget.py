"""The Budget view: the frontier job, record, figure and cache; a click loads a recompute plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.analysis.settings import PlanSettings
from app.core import state
from app.views.budget import data as budget_data
from app.views.budget import figure as budget_figure
from app.views.budget import view as budget_view
from app.views.curves import data as curves_data
from app.views.explain import data as explain_data
from app.views.layouts import data as layouts_data
from app.views.live import data as live_data
from app.views.memory_by_module import data as modules_data
from app.views.summary import data as summary_data
from app.views.timeline import data as timeline_data
from app.views.walkthrough import data as walkthrough_data
from tests.app.helpers import (
    run,
)
from tests.builders import random_train_graph


@pytest.fixture
def frontier_rec(cache_dir: Path) -> dict[str, Any]:
    g = random_train_graph(2, 6)
    gk = state.put_graph(g)
    seen: list[tuple] = []
    out, status = budget_view.frontier_job(seen.append, 1, {"key": gk}, 8, ["on"], "roam", 1, 60, 1,
                                      512)
    assert out["graph"] == gk
    assert "plans" in status
    assert seen
    assert all(d <= t for d, t, _ in seen)
    assert seen[-1][0] == seen[-1][1]
    return {"graph": {"key": gk, "name": g.name}, "rec": state.get_json(out["key"]),
            "result": out}


@pytest.mark.slow
def test_frontier_record_figure_and_cache(frontier_rec: dict[str, Any]) -> None:
    rec, gk = frontier_rec["rec"], frontier_rec["graph"]["key"]
    roam = [p for p in rec["points"] if p["method"] == "roam"]
    assert len(roam) >= 4
    assert any(p["recomputed_ops"] for p in roam)
    assert {p["method"] for p in rec["points"]} >= {"roam", "none"}
    assert all(state.has_plan(p["plan_key"]) for p in rec["points"])
    # lower peaks cost more FLOPs along roam's points
    by_peak = sorted(roam, key=lambda p: p["peak_bytes"])
    assert by_peak[0]["extra_flops"] >= by_peak[-1]["extra_flops"]
    fig = budget_figure.frontier_figure(rec, roam[0]["plan_key"])
    line = fig.data[0]
    assert line.name == "roam (budget plans)"
    assert len(line.x) == len(roam)
    assert set(line.customdata) == {p["plan_key"] for p in roam}
    assert fig.data[-1].name == "shown in the views"
    assert any(t.name == "no recomputation" for t in fig.data)
    # the second job for the same graph and settings is the cached one
    key = budget_data.frontier(gk, PlanSettings("roam", 1.0, 60, 1, 512), 8,
                          lambda *a: pytest.fail("recomputed a cached frontier"))
    assert key == frontier_rec["result"]["key"]
    f2, rows, notes = budget_view.render_frontier(None, frontier_rec["graph"], None, 8, ["on"],
                                             "roam", 1, 60, 1, 512)
    assert any("not applicable" in li.children for li in notes)
    # torch's min-cut baseline needs the model: a graph that is not a zoo trace says so
    assert any("torch_min_cut: not applicable" in li.children
               and "not a zoo model's trace" in li.children for li in notes)
    assert len(rows) == len(rec["points"])
    assert len(f2.data) >= 2


@pytest.mark.slow
def test_clicking_a_point_loads_a_recompute_plan_into_every_view(
        frontier_rec: dict[str, Any]) -> None:
    rec, graph = frontier_rec["rec"], frontier_rec["graph"]
    p = max((p for p in rec["points"] if p["recomputed_ops"]), key=lambda p: p["extra_flops"])
    click = {"points": [{"customdata": p["plan_key"], "x": p["extra_pct"]}]}
    key = run(budget_view.on_frontier_click, budget_view.FRONTIER_GRAPH, click, click, None, None)
    assert key == p["plan_key"]
    plan = state.get_plan(key)
    gk = graph["key"]
    # the views draw the expanded graph: the timeline has the recomputed ops in their colour
    tl = timeline_data.timeline_fig(gk, key, "eager", None, None)
    rc = [t for t in tl.data if t.name == "recomputed" and t.type == "heatmap"]
    assert rc
    assert sum(1 for row in rc[0].text for x in row if x) == len(plan.recompute)
    curves_data.curves_figure(gk, key, "eager", None, None)
    layouts_data.layout_figures(gk, key, "eager", None, None)
    rows, _ = live_data.live_table(gk, key, "eager", None)
    assert rows
    assert summary_data.summary_rows(gk, key, "eager")
    walkthrough_data.walkthrough_steps(gk, key, "eager")
    modules_data.module_view(gk, key, "eager", 2, "after")
    curves_data.curves_figure(gk, key, "eager", None, None, {"kind": "module", "id": ""})
    # Explain says why, the cost and what it frees
    rop = plan.recompute[0]
    for sel in ({"kind": "op", "id": rop.id}, {"kind": "op", "id": rop.source}):
        secs = explain_data.explain_sections(gk, key, "eager", sel)
        (rsec,) = [s for s in secs if s.title == "recomputed"]
        text = " ".join(rsec.lines)
        assert f"re-runs {rop.source}" in text
        assert "MFLOP" in text
        assert "frees" in text
        assert "× steps" in text


@pytest.mark.slow
def test_frontier_of_a_zoo_model_has_torch_min_cut_points(cache_dir: Path) -> None:
    """A zoo model's trace gets torch's partitioner at each activation_memory_budget: real
    plans, one labelled series in the figure, named rows; unticked, the frontier skips it."""
    pytest.importorskip("torch")
    from roam_core.trace.min_cut import MIN_CUT_BUDGETS, min_cut_available
    from roam_core.zoo import trace_zoo

    if min_cut_available() is not None:
        pytest.skip(min_cut_available())
    g = trace_zoo("mlp", 8, None, "steady").graph
    gk = state.put_graph(g)
    seen: list[tuple] = []
    out, status = budget_view.frontier_job(seen.append, 1, {"key": gk}, 4, ["on"], "roam", 1, 60, 1,
                                      512)
    assert "plans" in status, status
    assert any("min-cut" in msg for _, _, msg in seen)
    rec = state.get_json(out["key"])
    cut = [p for p in rec["points"] if p["method"].startswith("torch_min_cut_")]
    assert {p["method"] for p in cut} == {f"torch_min_cut_{b}" for b in MIN_CUT_BUDGETS}
    assert all(state.has_plan(p["plan_key"]) for p in cut)
    fig = budget_figure.frontier_figure(rec)
    (series,) = [t for t in fig.data if t.name == "torch min-cut (activation_memory_budget)"]
    # each budget is labelled once; points on the same spot share one label
    labels = [b for t in series.text if t for b in t.split(", ")]
    assert sorted(labels) == sorted(str(b) for b in MIN_CUT_BUDGETS)
    assert set(series.customdata) == {p["plan_key"] for p in cut}
    rows = budget_data.frontier_rows(rec)
    assert {r["method"] for r in rows} >= {f"torch min-cut, budget {b}" for b in MIN_CUT_BUDGETS}
    # the frontier without it is another cache entry, with no min-cut point
    out2, _ = budget_view.frontier_job(lambda *_: None, 1, {"key": gk}, 4, [], "roam", 1, 60, 1,
                                       512)
    assert out2["key"] != out["key"]
    assert not any(p["method"].startswith("torch_min_cut_")
                   for p in state.get_json(out2["key"])["points"])
