"""Compare two plans: real plans of a teaching graph (eager, and roam under a budget)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from app.analysis.settings import PlanSettings
from app.core import state
from app.views.compare import data, model, view
from roam_core.base.errors import PlanFormatError
from roam_core.formats.graph_io import load_graph
from roam_core.model.graph import Phase
from roam_core.model.samples import tiny_train_step
from roam_core.oracle.simulate import lifetimes
from roam_core.planner import make_plan
from roam_core.planner.config import PlannerConfig
from tests.app.helpers import run

SAMPLE = (Path(__file__).resolve().parents[3] / "sample_graphs"
          / "teach_recompute-b256-steady.json.gz")
SETTINGS = PlanSettings(time_limit_s=2.0, workers=1)


@pytest.fixture
def two_plans(cache_dir: Path) -> dict[str, Any]:
    """teach_recompute with a source line on each forward op, stored; plan A is the eager
    baseline (through the app), plan B roam under a budget of 70 % of A's arena."""
    g = load_graph(SAMPLE)
    ops = [dataclasses.replace(o, source=f"teach.py:{10 + i} in forward")
           if o.phase is Phase.FORWARD else o for i, o in enumerate(g.ops)]
    g = dataclasses.replace(g, ops=tuple(ops))
    gk = state.put_graph(g)
    ka = data.resolve_choice(gk, "base:eager", SETTINGS)
    a = state.get_plan(ka)
    b = make_plan(g, PlannerConfig(time_limit_s=2.0, workers=1,
                                   budget_bytes=int(0.7 * a.arena_bytes)))
    assert b.recompute  # the budget is met by re-running tanh layers
    return {"graph": g, "gk": gk, "ka": ka, "kb": state.put_plan(b), "a": a, "b": b}


def test_metrics_give_both_plans_and_the_difference(two_plans: dict[str, Any]) -> None:
    a, b = two_plans["a"], two_plans["b"]
    comp = data.comparison(two_plans["gk"], two_plans["ka"], two_plans["kb"])
    rows = {r["metric"]: r for r in comp.metrics}
    peak = rows["planned peak"]
    d = b.planned_peak_bytes - a.planned_peak_bytes
    assert d < 0
    assert peak["diff"].startswith(model.signed_bytes(d))
    assert rows["re-runs (ops)"] == {"metric": "re-runs (ops)", "a": "0",
                                     "b": str(len(b.recompute)),
                                     "diff": f"+{len(b.recompute)}"}
    assert float(rows["extra time (ms)"]["b"]) == pytest.approx(1e3 * b.extra_seconds,
                                                                abs=1e-3)
    assert float(rows["extra time (% of step)"]["b"]) == pytest.approx(
        100 * b.extra_seconds / b.step_seconds, abs=0.01)
    assert rows["extra time (% of step)"]["a"] == "0.00"
    assert "h100" in comp.note


def test_extra_times_on_two_device_profiles_get_no_difference(two_plans: dict[str, Any]
                                                                ) -> None:
    """Plans priced on two devices (an imported a100 plan beside an h100 one) show each
    extra time, and no difference between them."""
    from dataclasses import replace

    b = two_plans["b"]
    assert b.device_profile == "h100-sxm"
    assert b.extra_seconds > 0
    other = replace(b, device_profile="a100-80g")
    same = {r["metric"]: r for r in model.metric_rows(b, b, b.step_seconds)}
    apart = {r["metric"]: r for r in model.metric_rows(other, b, b.step_seconds)}
    for m in ("extra time (ms)", "extra time (% of step)"):
        assert same[m]["diff"].startswith("+0.")
        assert apart[m]["diff"] == "n/a: other device profiles"
        assert apart[m]["a"] == apart[m]["b"]  # each still shown


def test_modules_add_up_to_each_peak_sorted_by_difference(two_plans: dict[str, Any]) -> None:
    a, b = two_plans["a"], two_plans["b"]
    rows = data.comparison(two_plans["gk"], two_plans["ka"], two_plans["kb"]).modules
    mib = 2**20
    assert sum(r["a_mib"] for r in rows) == pytest.approx(a.planned_peak_bytes / mib, abs=0.01)
    assert sum(r["b_mib"] for r in rows) == pytest.approx(b.planned_peak_bytes / mib, abs=0.01)
    diffs = [abs(r["diff_mib"]) for r in rows]
    assert diffs == sorted(diffs, reverse=True)
    assert all(r["diff_mib"] == pytest.approx(r["b_mib"] - r["a_mib"], abs=2e-3) for r in rows)
    assert "(outside modules)" in {r["module"] for r in rows}  # user-facing names


def test_lifetime_changes_name_module_op_and_source(two_plans: dict[str, Any]) -> None:
    g, b = two_plans["graph"], two_plans["b"]
    rows = data.comparison(two_plans["gk"], two_plans["ka"], two_plans["kb"]).lifetimes
    assert rows
    changes = [abs(r["diff_mib_steps"]) for r in rows]
    assert changes == sorted(changes, reverse=True)
    rerun = [r for r in rows if r["b_rerun"] == "re-run"]
    assert rerun, "the recomputed activations are among the largest changes"
    r = rerun[0]
    producer = g.op(g.tensors[r["id"]].producer)
    assert (r["op"], r["source"]) == (producer.target, producer.source)
    assert r["source"].startswith("teach.py:")
    assert r["a_rerun"] == ""
    assert r["rerun"] == "B"
    assert r["diff_steps"] == r["b_steps"] - r["a_steps"] < 0
    assert r["id"] in {t for rop in b.recompute for t in g.op(rop.source).outputs}


def test_held_steps_are_lifetimes_without_reruns(two_plans: dict[str, Any]) -> None:
    g, a = two_plans["graph"], two_plans["a"]
    held = model.held_steps(g, a, g)
    life = lifetimes(g, a.order)
    assert {t: h.steps for t, h in held.items()} == {t: lt.end - lt.start
                                                     for t, lt in life.items()}
    assert not any(h.rerun for h in held.values())


def test_choices_list_baselines_plans_and_the_frontier(two_plans: dict[str, Any]) -> None:
    gk, kb = two_plans["gk"], two_plans["kb"]
    state.put_json("fr-test", {"graph": gk, "points": [
        {"method": "roam", "budget_bytes": 2**22, "peak_bytes": two_plans["b"].arena_bytes,
         "plan_key": kb},
        {"method": "every_block", "budget_bytes": None, "peak_bytes": 1, "plan_key": "gone"}]})
    opts = data.plan_choices(gk, None, [None], None, ["fr-test"], SETTINGS)
    values = [o["value"] for o in opts]
    assert values[:2] == ["base:eager", "base:inductor"]
    labels = {o["value"]: o["label"] for o in opts}
    assert labels["plan:" + kb].startswith("budget plan: roam at 4.00 MiB, peak ")
    assert "plan:gone" not in values
    shown = data.plan_choices(gk, kb, [None], None, ["fr-test"], SETTINGS)
    assert {o["value"]: o["label"] for o in shown}["plan:" + kb].startswith("plan shown: roam")
    assert [o["value"] for o in shown].count("plan:" + kb) == 1


def test_a_plan_of_another_graph_is_refused(two_plans: dict[str, Any]) -> None:
    other = state.put_plan(make_plan(tiny_train_step(), PlannerConfig(workers=1),
                                     method="eager"))
    with pytest.raises(PlanFormatError, match="made for graph"):
        data.resolve_choice(two_plans["gk"], "plan:" + other, SETTINGS)
    with pytest.raises(PlanFormatError, match="no longer in the cache"):
        data.resolve_choice(two_plans["gk"], "plan:nope", SETTINGS)


def test_callbacks_default_to_the_baseline_against_the_plan_shown(
        two_plans: dict[str, Any]) -> None:
    graph = {"key": two_plans["gk"], "name": two_plans["graph"].name}
    kb = two_plans["kb"]
    form = ("roam", 2.0, 60, 1, 512)
    opts, _, a, b = run(view.compare_options, "graph-key", graph, graph, kb, None, None,
                        None, None, None, "eager", *form)
    assert (a, b) == ("base:eager", "plan:" + kb)
    # picks are kept while on offer; a newly shown plan becomes B
    kept = run(view.compare_options, "graph-key", graph, graph, kb, None, None, None,
               "base:xla", "base:lescea", "eager", *form)
    assert kept[2:] == ("base:xla", "base:lescea")
    follow = run(view.compare_options, "plan-key", kb, graph, kb, None, None, None,
                 "base:xla", "base:lescea", "eager", *form)
    assert follow[2:] == ("base:xla", "plan:" + kb)
    fig, metrics, modules, lives, _note, status, ref = view.render_compare(a, b, opts, graph,
                                                                          *form)
    names = [t["name"] for t in fig["data"] if t.get("showlegend") is not False]
    assert names[0] == "A: baseline: eager (program order)"
    assert names[1].startswith("B: plan shown: roam")
    assert fig["layout"]["xaxis"]["range"] == [0, 100]
    assert metrics[0]["metric"] == "planned peak"
    assert modules
    assert lives
    assert status.startswith("A: baseline: eager")
    # the plans compared, for the exports (named as in the legend)
    pair = data.compared_plans(two_plans["gk"], ref)
    assert pair is not None
    assert (pair.key_b, pair.a_label) == (kb, "baseline: eager (program order)")
    assert data.compared_plans("another-graph", ref) is None
    # a pick no longer on offer falls back; the same plan twice says so
    *_, status2, _ref = view.render_compare(b, b, opts, graph, *form)
    assert "no difference" in status2
    fig3, *_, status3, ref3 = view.render_compare("plan:nope", b, opts, graph, *form)
    assert status3.startswith("Cannot compare: ")
    assert not fig3["data"]
    assert ref3 is None


def test_a_frontier_plan_against_the_eager_baseline(cache_dir: Path) -> None:
    """The Budget view's frontier (real plans) is on offer; a budget plan shows its re-runs."""
    from app.views.budget.data import frontier

    g = load_graph(SAMPLE)
    gk = state.put_graph(g)
    key, cancelled = frontier(gk, SETTINGS, 2, min_cut=False)
    assert not cancelled
    graph = {"key": gk, "name": g.name}
    form = ("roam", 2.0, 60, 1, 512)
    opts, _, a, _b = run(view.compare_options, "frontier-result", {"key": key, "graph": gk},
                        graph, None, None, None, {"key": key, "graph": gk}, None, None,
                        "eager", *form)
    labels = {o["value"]: o["label"] for o in opts}
    pk = next(p["plan_key"] for p in state.get_json(key)["points"]
              if p["method"] == "roam" and p["recomputed_ops"])
    assert labels["plan:" + pk].startswith("budget plan: roam at ")
    assert a == "base:eager"
    # a later page load (no frontier in the page; 2 budgets is not the Budget view's
    # default) still offers that frontier's plans, from the session's cache
    later, *_ = run(view.compare_options, "graph-key", graph, graph, None, None, None, None,
                    None, None, "eager", *form)
    assert "plan:" + pk in {o["value"] for o in later}
    *_, status, _ref = view.render_compare(a, "plan:" + pk, opts, graph, *form)
    assert "B: budget plan: roam at " in status
    ka = data.resolve_choice(gk, a, SETTINGS)
    kb = data.resolve_choice(gk, "plan:" + pk, SETTINGS)
    rows = {r["metric"]: r for r in data.comparison(gk, ka, kb).metrics}
    assert int(rows["re-runs (ops)"]["b"]) > 0
    assert float(rows["extra time (ms)"]["diff"]) > 0


def test_lifetime_changes_name_tensors_by_module_on_a_traced_model(cache_dir: Path) -> None:
    """tiny_gpt (traced from the zoo): every row is named by its module and role (or the
    tensor's own name), never a bare op id; the op and source stay their own columns."""
    g = load_graph(SAMPLE.with_name("tiny_gpt-b2-t32-steady.json.gz"))
    gk = state.put_graph(g)
    ka = data.resolve_choice(gk, "base:eager", SETTINGS)
    b = make_plan(g, PlannerConfig(time_limit_s=2.0, workers=1), method="lescea")
    rows = data.comparison(gk, ka, state.put_plan(b)).lifetimes
    assert rows
    op_ids = {o.id for o in g.ops}
    for r in rows:
        t = g.tensors[r["id"]]
        assert r["tensor"] not in op_ids, r
        assert f"({t.producer})" not in r["tensor"], r
        if t.name:
            assert r["tensor"] == t.name
        else:
            op = g.op(t.producer)
            # the tied LM head's matmul and the loss run outside every module
            assert r["tensor"].startswith(f"{op.module or 'top-level'} "), r
            assert r["tensor"].split(" (")[0].endswith(" output"), r
            assert r["op"] == op.target
    named = [r["tensor"] for r in rows if not g.tensors[r["id"]].name]
    assert any(n.startswith("h.") for n in named), named  # blocks' activations among them
