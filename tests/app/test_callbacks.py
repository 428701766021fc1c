"""Callbacks called as plain functions (Dash's unit-test style, no browser)."""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable, Iterator
from contextvars import copy_context
from pathlib import Path
from typing import Any

import dash
import pytest
from dash._callback_context import context_value
from dash._utils import AttributeDict
from dash.exceptions import PreventUpdate

from app import callbacks, ids, state
from roam_core.formats import plan_io
from roam_core.formats.graph_io import dumps_graph
from roam_core.model.samples import diamond, tiny_train_step
from tests.app.helpers import planned_with_tree


def run(fn: Callable[..., Any], trigger: str | dict, value: Any, *args: Any) -> Any:
    """Call a callback as Dash would after ``trigger`` changed to ``value``."""
    prop = (json.dumps(trigger, separators=(",", ":")) if isinstance(trigger, dict)
            else trigger) + ".data"

    def call() -> Any:
        context_value.set(AttributeDict(triggered_inputs=[{"prop_id": prop, "value": value}]))
        return fn(*args)

    return copy_context().run(call)


def _url(raw: bytes) -> str:
    return "data:application/json;base64," + base64.b64encode(raw).decode()


@pytest.fixture
def planned(cache_dir: Path) -> dict[str, Any]:
    graph, plan = planned_with_tree()
    return {"graph": {"key": state.put_graph(graph), "name": graph.name},
            "plan": state.put_plan(plan), "text": plan_io.dumps_plan(plan)}


def test_load_graph_from_upload_and_sample(cache_dir: Path) -> None:
    url = _url(dumps_graph(diamond()))
    data, msg, cleared = run(callbacks.load_graph, ids.UPLOAD, url, None, url, None, "d.json")
    assert data["name"] == "diamond"
    assert msg == "loaded diamond: 4 ops"
    assert cleared is None
    data, msg, _ = run(callbacks.load_graph, ids.SAMPLE_PICK, "hand:chain3", "hand:chain3",
                    None, None, None)
    assert data["name"] == "chain3"


def test_load_graph_bad_upload_keeps_the_graph(cache_dir: Path) -> None:
    url = _url(b'{"format": "roam-graph", "schema_version": 99}')
    data, msg, _ = run(callbacks.load_graph, ids.UPLOAD, url, None, url, None, "bad.json")
    assert data is dash.no_update
    assert msg.startswith("Error: bad.json: ")
    assert "schema_version" in msg


def test_plan_job_guard_and_progress(cache_dir: Path) -> None:
    with pytest.raises(PreventUpdate):
        callbacks.plan_job(print, None, {"key": "g"}, "roam", 1, 10, 1, 512)
    gk = state.put_graph(diamond())
    seen: list[tuple] = []
    out, status = callbacks.plan_job(seen.append, 1, {"key": gk}, "roam", 1, 10, 1, 512)
    assert out["graph"] == gk
    assert state.has_plan(out["key"])
    assert status.startswith("planned with roam")
    assert seen
    assert all(len(s) == 3 and s[0] <= s[1] for s in seen)


def test_plan_job_reports_a_planner_crash(cache_dir: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from app import planning

    def boom(*_: Any, **__: Any) -> None:
        raise ValueError("solver exploded")

    monkeypatch.setattr(planning, "run_planner", boom)
    gk = state.put_graph(diamond())
    out, status = callbacks.plan_job(print, 1, {"key": gk}, "roam", 1, 10, 1, 512)
    assert out is dash.no_update
    assert status == "Planning failed: ValueError: solver exploded"
    # the same failure on load leaves the graph unplanned instead of breaking the page
    g = {"key": gk, "name": "diamond"}
    assert run(callbacks.resolve_plan, ids.GRAPH_KEY, g, g, None, None, "roam", 1, 10, 1,
               512) is None


def test_resolve_plan_sources(planned: dict[str, Any]) -> None:
    g = planned["graph"]
    fresh = {"key": planned["plan"], "graph": g["key"]}
    args = ("roam", 1, 10, 1, 512)
    assert run(callbacks.resolve_plan, "plan-result", fresh, g, fresh, None, *args) == \
        planned["plan"]
    stale = {"key": "p-x", "graph": "g-other"}
    assert run(callbacks.resolve_plan, "plan-result", stale, g, stale, None, *args) is \
        dash.no_update
    # a new small graph is planned on load (cached afterwards)
    key = run(callbacks.resolve_plan, ids.GRAPH_KEY, g, g, None, None, *args)
    assert state.has_plan(key)


def test_on_range_sources(planned: dict[str, Any]) -> None:
    g, pk = planned["graph"], planned["plan"]

    def rng(trig: Any, value: Any) -> Any:
        return run(callbacks.on_range, trig, value, *([None] * 7), pk, g, "eager")

    assert rng(ids.CURVES, {"xaxis.range[0]": 2, "xaxis.range[1]": 5}) == (
        [2.0, 5.0], "steps 2 – 5")
    assert rng(ids.RESET_ZOOM, 1) == (None, "whole step axis")
    r, text = rng({"index": "t1", "type": ids.TREE_NODE}, 1)
    assert r[0] < 4 < r[1]
    assert text.startswith("steps")
    with pytest.raises(PreventUpdate):
        rng({"index": "t1", "type": ids.TREE_NODE}, None)  # re-rendered tree: no click
    with pytest.raises(PreventUpdate):
        rng(ids.LAYOUT, {"dragmode": "pan"})


def test_on_tree_more(planned: dict[str, Any]) -> None:
    pk, more = planned["plan"], {"index": "root", "type": ids.TREE_MORE}
    assert run(callbacks.on_tree_more, more, 1, [1], pk, {"x": 3}) == {"x": 3, "root": 2}
    assert run(callbacks.on_tree_more, ids.PLAN_KEY, pk, [], pk, {"root": 2}) == {}
    with pytest.raises(PreventUpdate):
        run(callbacks.on_tree_more, more, None, [None], pk, {})  # re-rendered: no click


def test_on_select_and_step(planned: dict[str, Any]) -> None:
    click = {"points": [{"text": "relu", "customdata": [512, 0, 0, 1, 5], "x": 3.2}]}
    assert run(callbacks.on_select, ids.LAYOUT, click, click, None, None, [], None) == {
        "kind": "tensor", "id": "relu"}
    assert run(callbacks.on_select, ids.TIMELINE, click, None, None, click, [], None)["kind"] \
        == "op"
    hit = {"index": "op:mm", "type": ids.SEARCH_HIT}
    assert run(callbacks.on_select, hit, 1, None, None, None, [1], None) == {
        "kind": "op", "id": "mm"}
    assert run(callbacks.on_step, ids.CURVES, click, click, None) == {"step": 3}
    assert run(callbacks.on_step, ids.PLAN_KEY, "p", None, "p") is None


def test_renderers(planned: dict[str, Any]) -> None:
    g, pk = planned["graph"], planned["plan"]
    summary = callbacks.render_panels(g, pk, "eager")
    assert "planned peak" in str(summary)
    assert "t1" in str(callbacks.render_tree(pk, {}))
    assert "No task tree" in str(callbacks.render_tree(None, None))
    rows, title = callbacks.render_live(g, pk, "eager", {"step": 2})
    assert title.startswith("Live at step 2")
    assert rows
    lay, base = callbacks.render_layouts(g, pk, "eager", None, None)
    assert lay["layout"]["meta"]["lod"] == base["layout"]["meta"]["lod"] == "vector"
    assert "op update" in str(callbacks.render_explain(g, pk, "eager",
                                                       {"kind": "op", "id": "update"}))
    assert "relu" in str(callbacks.on_search("relu", g))
    with pytest.raises(PreventUpdate):
        callbacks.render_curves(None, pk, "eager", None, None)
    fig = run(callbacks.render_curves, ids.PLAN_KEY, pk, g, pk, "eager", [1, 3], None)
    assert tuple(fig["layout"]["xaxis"]["range"]) == (1, 3)
    patch = run(callbacks.render_timeline, ids.VIEW_RANGE, [2, 4], g, pk, "eager", [2, 4], None)
    assert isinstance(patch, dash.Patch)
    ops = {(o["location"][-1], json.dumps(o["params"]["value"])) for o in
           patch.to_plotly_json()["operations"]}
    assert ops == {("autorange", "false"), ("range", "[2, 4]")}


def test_export_and_import(planned: dict[str, Any]) -> None:
    g, pk = planned["graph"], planned["plan"]
    payload, msg = run(callbacks.on_export, ids.EXPORT_JSON, 1, 1, None, None, None, g, pk,
                       "eager", "curves")
    assert msg.startswith("exported")
    assert payload["filename"].endswith(".plan.json")
    data, msg, _ = callbacks.on_plan_upload(_url(payload["content"].encode()), "p.json", g)
    assert data["graph"] == g["key"]
    assert "valid for this graph" in msg
    data, msg, _ = callbacks.on_plan_upload(_url(b"garbage"), "g.json", g)
    assert data is dash.no_update
    assert msg.startswith("Import failed: g.json:")
    _, msg = run(callbacks.on_export, ids.EXPORT_CSV, 1, None, 1, None, None, g, None,
                 "eager", "curves")
    assert msg == "Export failed: RoamError: nothing to export: plan the graph first"


def test_layout_builds_with_every_id(cache_dir: Path) -> None:
    from app import create_app

    app = create_app(cache_dir=str(cache_dir), plan_on_start=False)
    text = str(app.layout())
    for name in ("CURVES", "TIMELINE", "LAYOUT", "BASE_LAYOUT", "TREE", "LIVE_TABLE",
                 "SEARCH_INPUT", "SUMMARY", "EXPLAIN", "VERIFY_CARD", "PLAN_UPLOAD"):
        assert f"'{getattr(ids, name)}'" in text, name
    assert app.config.assets_folder.endswith("/assets")
    assert app.server.config["MAX_CONTENT_LENGTH"] > 200 * 2**20


def test_two_apps_keep_their_own_upload_limits(cache_dir: Path) -> None:
    """The config is per app (bound at registration), not module state."""
    from app import create_app

    small = create_app(cache_dir=str(cache_dir), plan_on_start=False, max_upload_mb=0.001)
    big = create_app(cache_dir=str(cache_dir), plan_on_start=False, max_upload_mb=50)
    assert small.server.config["ROAM"].max_upload_bytes == int(0.001 * 2**20)
    assert big.server.config["ROAM"].max_upload_bytes == 50 * 2**20
    assert not hasattr(callbacks, "CONFIG")
    url = _url(dumps_graph(tiny_train_step()))
    cfg = small.server.config["ROAM"]
    data, msg, _ = run(functools.partial(callbacks.load_graph, config=cfg), ids.UPLOAD, url,
                       None, url, None, "t.json")
    assert data is dash.no_update
    assert "larger than the upload limit" in msg
    data, _, _ = run(functools.partial(callbacks.load_graph, config=big.server.config["ROAM"]),
                     ids.UPLOAD, url, None, url, None, "t.json")
    assert data["name"] == "tiny_train_step"


def test_memos_are_registered_and_return_copies(planned: dict[str, Any]) -> None:
    from app import memo, services

    names = memo.memo_names()
    for n in ("app.state.get_graph", "app.state._get_plan", "app.services.before_data",
              "app.services.after_data", "app.services._curves", "app.services._timeline",
              "app.services._layouts"):
        assert n in names
    g, pk = planned["graph"]["key"], planned["plan"]
    fig = services.curves_figure(g, pk, "eager", None, None)
    fig.update_layout(title="mutated")
    copy = services.curves_figure(g, pk, "eager", None, None)
    assert copy.layout.title.text != "mutated"
    assert max(copy.data[0].y) > 0  # arrays stay arrays in the copy (not base64 dicts)
    a = services.after_data(g, pk)
    with pytest.raises(ValueError):
        a.curve[0] = 0  # frozen arrays
    assert services._curves.cache_info().currsize >= 1
    services.clear_caches()
    assert services._curves.cache_info().currsize == 0
    assert services.after_data.cache_info().currsize == 0


def test_memo_copies_one_reader_at_a_time() -> None:
    """The threaded server copies stored figures; plotly objects are not safe to read from
    two threads at once (plotly.py #3441), so a memo's copies never overlap."""
    import threading
    import time

    from app import memo

    inside, most = [0], [0]
    guard = threading.Lock()

    def slow_copy(value: list[int]) -> list[int]:
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        with guard:
            inside[0] -= 1
        return list(value)

    @memo.memoised(2, copy=slow_copy)
    def stored(n: int) -> list[int]:
        return [n]

    threads = [threading.Thread(target=stored, args=(1,)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1
    assert stored(1) == [1]


def test_a_job_forked_while_a_copy_runs_can_copy_too() -> None:
    """Background jobs are forked from the threaded server: a child forked while another
    thread holds a memo's copy lock must not inherit it held (it would hang forever)."""
    import os
    import threading
    import time

    from app import memo

    release = threading.Event()
    holding = threading.Event()

    def copy(value: list[int]) -> list[int]:
        if threading.current_thread() is not threading.main_thread():
            holding.set()
            release.wait(10)
        return list(value)

    @memo.memoised(2, copy=copy)
    def stored(n: int) -> list[int]:
        return [n]

    t = threading.Thread(target=stored, args=(1,))
    t.start()
    assert holding.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: the copy lock was held by a thread that does not exist here
        os._exit(0 if stored(1) == [1] else 1)
    deadline = time.monotonic() + 10
    status: int | None = None
    while status is None and time.monotonic() < deadline:
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(code)
        time.sleep(0.02)
    if status is None:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    release.set()
    t.join(10)
    assert status == 0, "the forked child hung on (or failed after) the inherited lock"


def test_figures_copied_from_many_threads_stay_whole(planned: dict[str, Any]) -> None:
    """Eight threads ask for one memoised timeline at once (as a page's first load does):
    every copy is complete and equal."""
    from concurrent.futures import ThreadPoolExecutor

    from app import services

    g, pk = planned["graph"]["key"], planned["plan"]
    services.clear_caches()
    with ThreadPoolExecutor(8) as ex:
        figs = list(ex.map(lambda _: services.timeline_fig(g, pk, "eager", None, None),
                           range(16)))
    want = figs[0].to_json()
    assert figs[0].data
    assert all(f.to_json() == want for f in figs[1:])


def test_plan_job_cancel_keeps_the_best_plan_so_far(cache_dir: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancel is cooperative: the planner stops, the best valid plan so far is shown."""
    from app import planning

    real = planning.run_planner
    polled: list[bool] = []

    def stoppable(graph: Any, settings: Any, progress: Any = None, cancel: Any = None) -> Any:
        callbacks.cancel_plan(1, "page1", 1)  # the user presses Cancel mid-run
        polled.append(cancel())
        return real(graph, settings, progress, cancel)

    monkeypatch.setattr(planning, "run_planner", stoppable)
    gk = state.put_graph(tiny_train_step())
    seen: list[tuple] = []
    out, status = callbacks.plan_job(seen.append, 1, {"key": gk}, "roam", 5, 10, 1, 512,
                                     "page1")
    assert polled == [True]
    assert out["cancelled"] is True
    assert status.startswith("cancelled: showing the best plan found so far (peak ")
    assert state.get_plan(out["key"]).order  # a valid plan, shown in every view
    assert seen[-1][2].startswith("cancelled after")
    # not cached as the full plan of these settings: the next Plan press plans in full
    from app import services
    assert services.cached_plan_key(gk, callbacks._settings("roam", 5, 10, 1, 512)) is None
    # another page's run is not cancelled
    monkeypatch.setattr(planning, "run_planner", real)
    out2, status2 = callbacks.plan_job(seen.append, 1, {"key": gk}, "roam", 5, 10, 1, 512,
                                       "page2")
    assert "cancelled" not in out2
    assert status2.startswith("planned with roam")


def test_cancel_feedback_for_jobs_without_partial_results() -> None:
    assert callbacks.cancelled(1) == "cancelled"
    with pytest.raises(PreventUpdate):
        callbacks.cancelled(None)
    msg, progress = callbacks.cancel_plan(2, "s", 3)
    assert msg.startswith("cancelling")
    assert progress.startswith("cancelled")
    with pytest.raises(PreventUpdate):
        callbacks.cancel_plan(1, "s", None)  # nothing was started


def test_buttons_derive_from_the_running_store() -> None:
    idle = {"plan": False, "trace": False, "verify": False}
    assert callbacks.buttons(idle, False, ["mlp"]) == (False, True, False, True, False, True)
    assert callbacks.buttons({**idle, "plan": True}, False, ["mlp"])[:2] == (True, False)
    assert callbacks.buttons({**idle, "trace": True}, False, ["mlp"])[2:4] == (True, False)
    assert callbacks.buttons({**idle, "verify": True}, False, [])[2:] == (
        True, True, True, False)
    assert callbacks.buttons(None, None, None)[4] is True  # verify off until known


def test_settings_are_checked_in_words(cache_dir: Path) -> None:
    assert callbacks.settings_message("roam", 5, 60, 1, 512) == ""
    msg = callbacks.settings_message("roam", -5, 60, 0, 512)
    assert msg == ("Settings: time limit must be more than 0 s (got -5 s); "
                   "workers must be at least 1 (got 0)")
    gk = state.put_graph(diamond())
    out, status = callbacks.plan_job(print, 1, {"key": gk}, "roam", -5, 60, 0, 512)
    assert out is dash.no_update
    assert status.startswith("Planning not started: time limit must be more than 0 s")
    g = {"key": gk, "name": "diamond"}
    assert run(callbacks.resolve_plan, ids.TIME_LIMIT, -5, g, None, None, "roam", -5, 60, 1,
               512) is dash.no_update


def test_new_graph_clears_status_and_sample_pick(cache_dir: Path) -> None:
    assert callbacks.clear_plan_status({"key": "g", "name": "x"}) == ("", "", 0)
    opts = [{"label": "mlp", "value": "file:mlp-b8-steady.json.gz"},
            {"label": "chain3", "value": "hand:chain3"}]
    assert callbacks.sample_pick_for({"key": "g", "name": "chain3"}, "hand:chain3",
                                     opts)[0] is dash.no_update
    value, placeholder = callbacks.sample_pick_for({"key": "g", "name": "mlp-b2-steady"},
                                                   "hand:chain3", opts)
    assert value is None
    assert "mlp-b2-steady" in placeholder


def test_tree_node_zoom_stays_on_the_step_axis(planned: dict[str, Any]) -> None:
    """The root spans every step: its window is the axis, never a negative, too wide range."""
    g, pk = planned["graph"], planned["plan"]
    n = len(state.get_plan(pk).order)
    r, text = run(callbacks.on_range, {"index": "root", "type": ids.TREE_NODE}, 1,
                  *([None] * 7), pk, g, "eager")
    assert r == [0.0, n]
    assert text == f"steps 0 – {n}"
    r, _ = run(callbacks.on_range, {"index": "t1", "type": ids.TREE_NODE}, 1,
               *([None] * 7), pk, g, "eager")
    assert 0 <= r[0] < r[1] <= n


def test_units_are_binary_with_exact_bytes_on_demand(planned: dict[str, Any]) -> None:
    g, pk = planned["graph"], planned["plan"]
    rows, _ = callbacks.render_live(g, pk, "eager", None)
    assert all(r["offset"].endswith("B") for r in rows)  # "1.50 KiB", never a raw count
    tips = callbacks.live_tooltips(rows)
    assert tips[0]["offset"]["value"] == f"{rows[0]['offset_bytes']:,} B"
    text = str(callbacks.render_explain(g, pk, "eager", {"kind": "tensor", "id": "relu"}))
    assert "offset " in text
    import re
    assert not re.search(r"offset \d+ \(", text)


def test_summary_does_not_repeat_the_eager_peak(planned: dict[str, Any]) -> None:
    g, pk = planned["graph"], planned["plan"]
    eager = str(callbacks.render_panels(g, pk, "eager"))
    assert eager.count("peak (allocated)") == 1
    other = str(callbacks.render_panels(g, pk, "lescea"))
    assert other.count("peak (allocated)") == 2  # LESCEA's and eager's


def test_trace_job_reports_a_status_while_it_runs(cache_dir: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The zoo trace (17 s for GPT-2) shows a ticking status line, then how long it took."""
    import time

    from app import services

    def slow_trace(model: str, batch: int, *_: Any) -> str:
        time.sleep(1.3)
        return state.put_graph(diamond())

    monkeypatch.setattr(services, "trace_zoo_graph", slow_trace)
    seen: list[tuple] = []
    out, status = callbacks.trace_job(seen.append, 1, "gpt2", 1, 0, "adamw", "steady")
    assert status == "traced gpt2"
    assert out["key"].startswith("g-")
    texts = [s[0] for s in seen]
    assert texts[0] == "tracing gpt2 (batch 1)…"
    assert any(t.startswith("tracing gpt2 (batch 1): 1 s") for t in texts[1:-1])
    assert texts[-1].startswith("traced in 1.")


def test_walkthrough_on_a_teaching_graph(cache_dir: Path) -> None:
    """The four steps, open on a teaching graph; its tensors are clickable everywhere."""
    from app import services
    from app.planning import PlanSettings

    gk = state.put_graph(tiny_train_step())
    pk = services.plan_graph(gk, PlanSettings(time_limit_s=2.0, node_limit=3))
    g = {"key": gk, "name": "tiny_train_step"}
    body = callbacks.render_walkthrough(g, pk, "eager")
    text = str(body)
    assert "open=True" in text
    for n in ("1. The eager (program order) order peaks at step", "2. ", "3. The layout packs",
              "4. Recomputation"):
        assert n in text
    open_, steps = services.walkthrough_steps(gk, pk, "eager")
    assert open_
    hits = [t for _, _, links in steps for t, _ in links]
    assert hits
    hit = {"index": f"tensor:{hits[0]}", "step": 0, "type": ids.TOUR_HIT}
    assert run(callbacks.on_select, hit, 1, None, None, None, [], g, [1]) == {
        "kind": "tensor", "id": hits[0]}
    rng, _ = run(callbacks.on_range, hit, 1, *([None] * 8), pk, g, "eager")
    assert rng is not None
    assert callbacks.render_walkthrough(g, None, "eager") == []
    idents = [(c.id["index"], c.id["step"]) for c in _components(body)
              if isinstance(getattr(c, "id", None), dict)]
    assert len(idents) == len(set(idents))  # a tensor in two steps: still unique ids


def test_lifetime_changes_rank_by_bytes_times_steps(cache_dir: Path) -> None:
    from app.analysis import lifetime_changes
    from app.planning import PlanSettings, run_planner

    g = tiny_train_step()
    plan = run_planner(g, PlanSettings(time_limit_s=2.0))
    order = tuple(reversed(plan.order))  # not valid: only lifetimes matter here
    rows = lifetime_changes(g, plan, order)
    assert [abs(r[3]) for r in rows] == sorted((abs(r[3]) for r in rows), reverse=True)
    assert all(r[1] != r[2] for r in rows)


def _components(c: Any) -> Any:
    from dash.development.base_component import Component

    if isinstance(c, Component):
        yield c
        c = getattr(c, "children", None)
    if isinstance(c, list | tuple):
        for x in c:
            yield from _components(x)
    elif isinstance(c, Component):
        yield from _components(c)


def test_walkthrough_links_are_tensor_ids_labelled_by_name(cache_dir: Path) -> None:
    """On a traced graph the buttons read parameter names, and select by storage id."""
    from app import services
    from app.planning import PlanSettings
    from roam_core.formats.graph_io import load_graph

    g = load_graph(Path(__file__).resolve().parents[2] / "sample_graphs" /
                   "mlp-b8-steady.json.gz")
    gk = state.put_graph(g)
    pk = services.plan_graph(gk, PlanSettings(time_limit_s=2.0))
    _, steps = services.walkthrough_steps(gk, pk, "eager")
    links = [link for _, _, ls in steps for link in ls]
    assert links
    assert all(tid in g.tensors for tid, _ in links)
    assert any(g.tensors[tid].name and label.startswith(g.tensors[tid].name)
               for tid, label in links)


def _components(node: Any) -> Iterator[Any]:
    yield node
    kids = getattr(node, "children", None)
    for kid in kids if isinstance(kids, (list, tuple)) else [kids]:
        if hasattr(kid, "to_plotly_json"):
            yield from _components(kid)


#: The callbacks a page load runs: the views above the fold and what they need.  Anything
#: else that fires on load delays them (a GPT2-XL page went from 1.0 s to 2.2 s to boot when
#: four cards and their callbacks joined the start-up page).
LOAD_OUTPUTS = {
    "curves-graph.figure", "timeline-graph.figure",
    "..layout-graph.figure...base-layout-graph.figure..", "summary-card.children",
    "walkthrough.children", "task-tree.children", "..live-table.data...live-title.children..",
    "live-table.tooltip_data", "explain-panel.children",
    "..module-table.data...module-icicle.figure...module-title.children..",
    "module-seen.data",
    "..verify-device.options...verify-device.value...verify-note.children...verify-off.data..",
}


def test_page_load_fires_only_the_views(cache_dir: Path) -> None:
    from app import budget, create_app, fit, lazy, snapshot_view

    app = create_app(cache_dir=str(cache_dir), plan_on_start=False)
    page = app.layout()
    present = {getattr(c, "id", None) for c in _components(page)} - {None}
    on_load = set()
    for cb in app._callback_list:
        if cb.get("prevent_initial_call"):
            continue
        outs = [o.rsplit(".", 1)[0] for o in cb["output"].strip(".").split("...")]
        if any(o in present for o in outs):  # Dash runs it only when its outputs are there
            on_load.add(cb["output"])
    assert on_load == LOAD_OUTPUTS
    # the module view waits until it is scrolled into view
    modules = app.callback_map["..module-table.data...module-icicle.figure..."
                               "module-title.children.."]
    assert {"id": ids.MODULE_SEEN, "property": "data"} in modules["inputs"]
    with pytest.raises(PreventUpdate):
        callbacks.render_modules({"key": "k"}, None, "eager", 2, "after", None, None)
    # an unset store does not fire at mount (data None would: undefined != null)
    stores = [c for c in _components(page) if type(c).__name__ == "Store"]
    assert len(stores) > 10
    for s in stores:
        assert s.to_plotly_json()["props"].get("data", 0) is not None, s.id
    # the Budget, What-fits and snapshot cards: a title until opened, then their body
    for mod in (budget, fit, snapshot_view):
        body = lazy.body_id(mod.CARD)
        assert body in present
        assert mod.CARD in present
        mounted = next(c for c in _components(page) if getattr(c, "id", None) == body)
        assert not mounted.children
        cb = app.callback_map[f"{body}.children"]
        assert cb["inputs"] == [{"id": lazy.summary_id(mod.CARD), "property": "n_clicks"}]
    for graph_id in (budget.FRONTIER_GRAPH, fit.FIT_GRAPH, snapshot_view.SNAP_CURVES):
        assert graph_id not in present
    assert budget.FRONTIER_GRAPH in str(budget.body())
    assert fit.FIT_GRAPH in str(fit.body(["tiny_gpt"]))
    assert snapshot_view.SNAP_SEGMENTS in str(snapshot_view.body())
    assert lazy.mount_body(1, None, budget.body)[0] is not None


def test_frozen_figures_are_made_once_and_shared_whole(planned: dict[str, Any]) -> None:
    """The page is sent a figure's memoised JSON text (parsed into the caller's own dict):
    many threads asking at once get equal, complete dicts, made from one serialisation."""
    from concurrent.futures import ThreadPoolExecutor

    from app import memo, services

    g, pk = planned["graph"]["key"], planned["plan"]
    services.clear_caches()
    with ThreadPoolExecutor(8) as ex:
        dicts = list(ex.map(lambda _: services.timeline_dict(g, pk, "eager", None, None),
                            range(16)))
    assert dicts[0]["data"]
    assert all(d == dicts[0] for d in dicts[1:])
    assert dicts[0] is not dicts[1]
    dicts[0]["layout"]["title"] = "mutated"  # a caller's dict is its own
    assert services.timeline_dict(g, pk, "eager", None, None)["layout"].get("title") != \
        "mutated"
    want = json.loads(services.timeline_fig(g, pk, "eager", None, None).to_json())
    assert dicts[1] == want  # the same figure as the copy path
    lay, base = services.layout_dicts(g, pk, "eager", None, None)
    assert lay["layout"]["meta"]["lod"]
    assert base["data"]
    assert services.curves_dict(g, pk, "eager", None, None)["data"]
    rows, ice, title = services.module_view_dict(g, pk, "eager", 2, "after")
    rows2, ice2, title2 = services.module_view(g, pk, "eager", 2, "after")
    assert (rows, title) == (rows2, title2)
    assert ice == json.loads(ice2.to_json())

    made = []

    def freeze(v: list[int]) -> tuple[int, ...]:
        made.append(1)
        return tuple(v)

    @memo.memoised(2, copy=list, frozen=freeze)
    def stored(n: int) -> list[int]:
        return [n]

    with ThreadPoolExecutor(8) as ex:
        forms = list(ex.map(lambda _: stored.frozen(1), range(16)))
    assert len(made) == 1
    assert all(f is forms[0] for f in forms)
    with pytest.raises(ValueError):
        memo.memoised(2, frozen=tuple)
