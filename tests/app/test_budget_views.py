"""Budget, What-fits and Measured-memory views: services, figure data, callbacks called directly."""

from __future__ import annotations

import base64
import pickle
from pathlib import Path
from typing import Any

import pytest

from app import budget, fit, services, snapshot_view, state
from app.planning import PlanSettings
from roam_core.formats.snapshot import plan_snapshot
from tests.app.test_callbacks import run
from tests.builders import random_train_graph, two_param_step

S = PlanSettings(time_limit_s=1)


@pytest.fixture
def frontier_rec(cache_dir: Path) -> dict[str, Any]:
    g = random_train_graph(2, 6)
    gk = state.put_graph(g)
    seen: list[tuple] = []
    out, status = budget.frontier_job(seen.append, 1, {"key": gk}, 8, ["on"], "roam", 1, 60, 1,
                                      512)
    assert out["graph"] == gk
    assert "plans" in status
    assert seen
    assert all(d <= t for d, t, _ in seen)
    assert seen[-1][0] == seen[-1][1]
    return {"graph": {"key": gk, "name": g.name}, "rec": state.get_json(out["key"]),
            "result": out}


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
    fig = budget.frontier_figure(rec, roam[0]["plan_key"])
    line = fig.data[0]
    assert line.name == "roam (budget plans)"
    assert len(line.x) == len(roam)
    assert set(line.customdata) == {p["plan_key"] for p in roam}
    assert fig.data[-1].name == "shown in the views"
    assert any(t.name == "no recomputation" for t in fig.data)
    # the second job for the same graph and settings is the cached one
    key = budget.frontier(gk, PlanSettings("roam", 1.0, 60, 1, 512), 8,
                          lambda *a: pytest.fail("recomputed a cached frontier"))
    assert key == frontier_rec["result"]["key"]
    f2, rows, notes = budget.render_frontier(None, frontier_rec["graph"], None, 8, ["on"],
                                             "roam", 1, 60, 1, 512)
    assert any("not applicable" in li.children for li in notes)
    # torch's min-cut baseline needs the model: a graph that is not a zoo trace says so
    assert any("torch_min_cut: not applicable" in li.children
               and "not a zoo model's trace" in li.children for li in notes)
    assert len(rows) == len(rec["points"])
    assert len(f2.data) >= 2


def test_clicking_a_point_loads_a_recompute_plan_into_every_view(
        frontier_rec: dict[str, Any]) -> None:
    rec, graph = frontier_rec["rec"], frontier_rec["graph"]
    p = max((p for p in rec["points"] if p["recomputed_ops"]), key=lambda p: p["extra_flops"])
    click = {"points": [{"customdata": p["plan_key"], "x": p["extra_pct"]}]}
    key = run(budget.on_frontier_click, budget.FRONTIER_GRAPH, click, click, None, None)
    assert key == p["plan_key"]
    plan = state.get_plan(key)
    gk = graph["key"]
    # the views draw the expanded graph: the timeline has the recomputed ops in their colour
    tl = services.timeline_fig(gk, key, "eager", None, None)
    rc = [t for t in tl.data if t.name == "recomputed" and t.type == "heatmap"]
    assert rc
    assert sum(1 for row in rc[0].text for x in row if x) == len(plan.recompute)
    services.curves_figure(gk, key, "eager", None, None)
    services.layout_figures(gk, key, "eager", None, None)
    rows, _ = services.live_table(gk, key, "eager", None)
    assert rows
    assert services.summary_rows(gk, key, "eager")
    services.walkthrough_steps(gk, key, "eager")
    services.module_view(gk, key, "eager", 2, "after")
    services.curves_figure(gk, key, "eager", None, None, {"kind": "module", "id": ""})
    # Explain says why, the cost and what it frees
    rop = plan.recompute[0]
    for sel in ({"kind": "op", "id": rop.id}, {"kind": "op", "id": rop.source}):
        secs = services.explain_sections(gk, key, "eager", sel)
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
    out, status = budget.frontier_job(seen.append, 1, {"key": gk}, 4, ["on"], "roam", 1, 60, 1,
                                      512)
    assert "plans" in status, status
    assert any("min-cut" in msg for _, _, msg in seen)
    rec = state.get_json(out["key"])
    cut = [p for p in rec["points"] if p["method"].startswith("torch_min_cut_")]
    assert {p["method"] for p in cut} == {f"torch_min_cut_{b}" for b in MIN_CUT_BUDGETS}
    assert all(state.has_plan(p["plan_key"]) for p in cut)
    fig = budget.frontier_figure(rec)
    (series,) = [t for t in fig.data if t.name == "torch min-cut (activation_memory_budget)"]
    # each budget is labelled once; points on the same spot share one label
    labels = [b for t in series.text if t for b in t.split(", ")]
    assert sorted(labels) == sorted(str(b) for b in MIN_CUT_BUDGETS)
    assert set(series.customdata) == {p["plan_key"] for p in cut}
    rows = budget.frontier_rows(rec)
    assert {r["method"] for r in rows} >= {f"torch min-cut, budget {b}" for b in MIN_CUT_BUDGETS}
    # the frontier without it is another cache entry, with no min-cut point
    out2, _ = budget.frontier_job(lambda *_: None, 1, {"key": gk}, 4, [], "roam", 1, 60, 1, 512)
    assert out2["key"] != out["key"]
    assert not any(p["method"].startswith("torch_min_cut_")
                   for p in state.get_json(out2["key"])["points"])


def _fake_trace(model: str, b: int, t: int | None) -> Any:
    from dataclasses import replace

    g = two_param_step(act_bytes=8192 * b)
    return replace(g, name=f"{model}-b{b}-steady")


def test_fit_sweep_caches_rows_and_answers(cache_dir: Path) -> None:
    calls: list[int] = []

    def trace(m: str, b: int, t: int | None) -> Any:
        calls.append(b)
        return _fake_trace(m, b, t)

    rows = fit.sweep("mlp", [4, 1, 2], [None], S, trace=trace)
    assert [r.batch_size for r in rows] == [1, 2, 4]
    assert all(r.peak_bytes["roam"] <= r.peak_bytes["eager_reserved"] for r in rows)
    assert fit.sweep("mlp", [1, 2, 4, 8], [None], S, trace=trace)[-1].batch_size == 8
    assert calls == [1, 2, 4, 8]  # the second sweep traced only batch 8
    fig = fit.fit_figure(rows, 0.0001)
    names = [t.name for t in fig.data]
    assert "PyTorch eager (reserved)" in names
    assert "roam + recompute ≤25% FLOPs" in names
    hl = [s for s in fig.layout.shapes if s.type == "line"]
    assert sorted(s.y0 for s in hl) == sorted([0.0001, 24, 40, 80, 141])
    assert fig.layout.yaxis.type == "log"
    tiny = rows[0].peak_bytes["roam"] / 2**30
    ans = fit.fit_answer(rows, tiny)
    assert ans[1].startswith("roam: batch 1")
    assert "the largest tried" in fit.fit_answer(rows, 100)[0]
    with pytest.raises(Exception, match="too many"):
        fit.sweep("gpt2-xl", [1, 2, 4, 8], [None], S, trace=trace)


def test_fit_job_messages(cache_dir: Path) -> None:
    _, msg = fit.fit_job(print, 1, "mlp", "1 x", "", 1, 60, 1, 512)
    assert msg == "Sweep failed: batch sizes: 'x' is not a positive whole number"
    _out, msg = fit.fit_job(print, 1, "gpt2-xl", "1 2 4 8", "", 1, 60, 1, 512)
    assert "too many" in msg
    assert "minutes" in msg
    fig, answer = fit.render_fit({"rows": [r.to_dict() for r in fit.sweep(
        "mlp", [1], [None], S, trace=_fake_trace)]}, 24)
    assert len(answer) == 5
    assert fig.data


@pytest.mark.slow
def test_fit_sweep_traces_a_zoo_model(cache_dir: Path) -> None:
    pytest.importorskip("torch")
    rows = fit.sweep("mlp", [1, 4], [None], S)
    assert [r.graph_name for r in rows] == ["mlp-b1-steady", "mlp-b4-steady"]
    assert all(r.peak_bytes["roam"] < r.peak_bytes["eager_reserved"] for r in rows)


def _snapshot_url(graph_key: str, plan_key: str) -> str:
    g, p = state.get_graph(graph_key), state.get_plan(plan_key)
    snap = plan_snapshot(g, p)
    # a measured run reserves more than it allocates: an extra cached segment, freed blocks
    snap["segments"].append({"device": 0, "address": 1 << 40, "total_size": 2 << 20,
                             "blocks": [{"address": 1 << 40, "size": 2 << 20,
                                         "state": "inactive"}]})
    snap["device_traces"][0].insert(0, {"action": "segment_alloc", "addr": 1 << 40,
                                        "size": 2 << 20})
    return "data:application/octet-stream;base64," + base64.b64encode(
        pickle.dumps(snap)).decode()


def test_snapshot_overlay_segments_and_fragmentation(cache_dir: Path) -> None:
    g = two_param_step()
    gk = state.put_graph(g)
    pk = services.plan_graph(gk, S)
    plan = state.get_plan(pk)
    url = _snapshot_url(gk, pk)
    data, msg, cleared = run(snapshot_view.on_snapshot_upload, snapshot_view.SNAP_UPLOAD, url,
                             url, "run.pickle")
    assert msg == "loaded snapshot run.pickle"
    assert cleared is None
    curves, segs, summary = snapshot_view.render_snapshot(data, {"key": gk}, pk, "eager")
    names = [t.name for t in curves.data]
    assert names[:2] == ["simulated: eager (program order)", "simulated: planned (roam)"]
    measured = curves.data[names.index("measured allocated")]
    div, unit = budget.byte_unit(plan.arena_bytes + (2 << 20))  # the top: measured reserved
    assert curves.layout.yaxis.title.text == unit
    assert max(measured.y) * div == pytest.approx(plan.planned_peak_bytes)
    assert max(measured.x) < len(plan.order)  # on the plan's step axis
    assert list(segs.layout.xaxis.ticktext) == ["planned arena", "segment 1", "segment 2"]
    text = " ".join(li.children for li in summary)
    frag = plan.arena_bytes + (2 << 20) - plan.planned_peak_bytes
    assert "fragmentation at the peak (reserved − allocated)" in text
    from app.analysis import fmt_bytes

    assert fmt_bytes(frag) in text


def test_snapshot_upload_refuses_a_pickle_with_a_class(cache_dir: Path) -> None:
    import os

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    url = "data:;base64," + base64.b64encode(pickle.dumps(Evil())).decode()
    data, msg, _ = run(snapshot_view.on_snapshot_upload, snapshot_view.SNAP_UPLOAD, url, url,
                       "evil.pickle")
    assert data is not None
    assert msg.startswith("Snapshot not loaded: evil.pickle: refusing")
    big = "data:;base64," + base64.b64encode(
        b"x" * (snapshot_view.MAX_SNAPSHOT_UPLOAD_BYTES + 10)).decode()
    _, msg, _ = run(snapshot_view.on_snapshot_upload, snapshot_view.SNAP_UPLOAD, big, big, "b")
    assert "upload limit" in msg


def test_the_plan_settings_form_is_read_one_way_everywhere(cache_dir: Path) -> None:
    """The Plan card, the Budget view and What fits read the form with one parser: the same
    settings from the same values, the same words for a bad value."""
    from app import callbacks
    from app.planning import settings_from_form

    form = ("roam", 2, 60, None, 512)
    assert callbacks._settings(*form) == budget._settings(*form) == settings_from_form(*form)
    assert budget._settings("eager", 2, 60, 1, 512).method == "roam"  # roam's frontier
    words = "time limit must be more than 0 s (got -5 s)"
    assert callbacks.settings_message("roam", -5, 60, 1, 512) == f"Settings: {words}"
    _, msg = fit.fit_job(print, 1, "mlp", "1", "", -5, 60, 1, 512)
    assert msg == f"Sweep failed: {words}"
    gk = state.put_graph(two_param_step())
    _, msg = budget.frontier_job(print, 1, {"key": gk}, 8, [], "roam", -5, 60, 1, 512)
    assert msg == f"Frontier failed: {words}"
    fig, rows, notes = budget.render_frontier(None, {"key": gk}, None, 8, [], "roam", -5, 60,
                                              1, 512)
    assert (rows, notes) == ([], [])
    assert fig.layout.title.text.startswith("No frontier yet")
