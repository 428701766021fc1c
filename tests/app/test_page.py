"""The page built from the view registry: every id, per-app config, what a page load fires, every
view rendered with and without a plan."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dash
import pytest
from dash.exceptions import PreventUpdate

from app.analysis import settings
from app.core import ids
from app.views import lazy, page
from app.views.budget import view as budget_view
from app.views.curves import data as curves_data
from app.views.curves import view as curves_view
from app.views.explain import data as explain_data
from app.views.explain import view as explain_view
from app.views.export import view as export_view
from app.views.fit import view as fit_view
from app.views.layouts import data as layouts_data
from app.views.layouts import view as layouts_view
from app.views.live import data as live_data
from app.views.live import view as live_view
from app.views.loading import view as loading_view
from app.views.memory_by_module import view as modules_view
from app.views.planning import view as planning_view
from app.views.search import view as search_view
from app.views.snapshot import view as snapshot_view
from app.views.summary import data as summary_data
from app.views.summary import view as summary_view
from app.views.timeline import view as timeline_view
from app.views.tree import view as tree_view
from app.views.uploads import result_id
from roam_core.formats.graph_io import dumps_graph
from roam_core.model.samples import tiny_train_step
from tests.app.helpers import put_planned, run


@pytest.mark.slow
def test_layout_builds_with_every_id(cache_dir: Path) -> None:
    from app import create_app

    app = create_app(cache_dir=str(cache_dir), plan_on_start=False)
    text = str(app.layout())
    for name in ("CURVES", "TIMELINE", "LAYOUT", "BASE_LAYOUT", "TREE", "LIVE_TABLE",
                 "SEARCH_INPUT", "SUMMARY", "EXPLAIN", "VERIFY_CARD", "PLAN_UPLOAD"):
        assert f"'{getattr(ids, name)}'" in text, name
    assert app.config.assets_folder.endswith("/assets")
    assert app.server.config["MAX_CONTENT_LENGTH"] > 200 * 2**20


@pytest.mark.slow
def test_two_apps_keep_their_own_upload_limits(cache_dir: Path) -> None:
    """The config is per app (bound at registration), not module state."""
    from app import create_app

    small = create_app(cache_dir=str(cache_dir), plan_on_start=False, max_upload_mb=0.001)
    big = create_app(cache_dir=str(cache_dir), plan_on_start=False, max_upload_mb=50)
    assert small.server.config["ROAM"].max_upload_bytes == int(0.001 * 2**20)
    assert big.server.config["ROAM"].max_upload_bytes == 50 * 2**20
    assert not any(hasattr(m, "CONFIG") for m in (loading_view, planning_view, export_view))
    raw = dumps_graph(tiny_train_step())
    for app, code in ((small, 413), (big, 200)):  # the upload route applies each app's cap
        r = app.server.test_client().post("/_roam/upload/graph", data=raw)
        assert r.status_code == code, r.json
    assert "larger than the upload limit" in small.server.test_client().post(
        "/_roam/upload/graph", data=raw).json["error"]
    ref = {"token": big.server.test_client().post("/_roam/upload/graph", data=raw
                                                  ).json["token"], "filename": "t.json"}
    data, _ = run(loading_view.load_graph, result_id(ids.UPLOAD), ref, None, ref, None)
    assert data["name"] == "tiny_train_step"


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
    # the Verify card's whole state in one answer (no chain of four on load)
    "..verify-device.options...verify-device.value...verify-note.children...verify-off.data..."
    "verify-btn.children...verify-result.children...verify-btn.disabled..."
    "verify-cancel-btn.disabled..",
}


@pytest.mark.slow
def test_page_load_fires_only_the_views(cache_dir: Path) -> None:
    from app import create_app

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
        modules_view.render_modules({"key": "k"}, None, "eager", 2, "after", None, None)
    # an unset store does not fire at mount (data None would: undefined != null)
    stores = [c for c in _components(page) if type(c).__name__ == "Store"]
    assert len(stores) > 10
    for s in stores:
        assert s.to_plotly_json()["props"].get("data", 0) is not None, s.id
    # the Budget, What-fits and snapshot cards: a title until opened, then their body
    for mod in (budget_view, fit_view, snapshot_view):
        body = lazy.body_id(mod.CARD)
        assert body in present
        assert mod.CARD in present
        mounted = next(c for c in _components(page) if getattr(c, "id", None) == body)
        assert not mounted.children
        cb = app.callback_map[f"{body}.children"]
        # mounted on the <details>'s open state (assets/lazy_open.js sends it), not on a
        # summary click that Dash could miss while the page boots
        assert cb["inputs"] == [{"id": lazy.details_id(mod.CARD), "property": "open"}]
    for graph_id in (budget_view.FRONTIER_GRAPH, fit_view.FIT_GRAPH, snapshot_view.SNAP_CURVES):
        assert graph_id not in present
    assert budget_view.FRONTIER_GRAPH in str(budget_view.body())
    assert fit_view.FIT_GRAPH in str(fit_view.body(["tiny_gpt"]))
    assert snapshot_view.SNAP_SEGMENTS in str(snapshot_view.body())
    assert lazy.mount_body(True, None, budget_view.body)[0] is not None


@pytest.mark.slow
def test_renderers(planned: dict[str, Any]) -> None:
    g, pk = planned["graph"], planned["plan"]
    summary = summary_view.render_panels(g, pk, "eager")
    assert "planned peak" in str(summary)
    assert "t1" in str(tree_view.render_tree(pk, {}))
    assert "No task tree" in str(tree_view.render_tree(None, None))
    rows, title = live_view.render_live(g, pk, "eager", {"step": 2})
    assert title.startswith("Live at step 2")
    assert rows
    lay, base = layouts_view.render_layouts(g, pk, "eager", None, None)
    assert lay["layout"]["meta"]["lod"] == base["layout"]["meta"]["lod"] == "vector"
    assert "op update" in str(explain_view.render_explain(g, pk, "eager",
                                                       {"kind": "op", "id": "update"}))
    assert "relu" in str(search_view.on_search("relu", g))
    with pytest.raises(PreventUpdate):
        curves_view.render_curves(None, pk, "eager", None, None)
    fig = run(curves_view.render_curves, ids.PLAN_KEY, pk, g, pk, "eager", [1, 3], None)
    assert tuple(fig["layout"]["xaxis"]["range"]) == (1, 3)
    patch = run(timeline_view.render_timeline, ids.VIEW_RANGE, [2, 4], g, pk, "eager", [2, 4], None)
    assert isinstance(patch, dash.Patch)
    ops = {(o["location"][-1], json.dumps(o["params"]["value"])) for o in
           patch.to_plotly_json()["operations"]}
    assert ops == {("autorange", "false"), ("range", "[2, 4]")}


@pytest.mark.slow
def test_views_with_and_without_plan(cache_dir: Path) -> None:
    gk, pk = put_planned()
    for plan_key in (None, pk):
        fig = curves_data.curves_figure(gk, plan_key, "lescea", None, None)
        assert fig.data
        _lay, base = layouts_data.layout_figures(gk, plan_key, "eager", [0, 3], None)
        assert base.layout.meta["lod"] == "vector"
        rows, title = live_data.live_table(gk, plan_key, "eager", None)
        assert rows
        assert "(the peak)" in title
        assert "graph" in dict(summary_data.summary_rows(gk, plan_key, "xla"))
    sel = {"kind": "tensor", "id": "relu"}
    assert explain_data.explain_sections(gk, pk, "eager", sel)[0].title == "tensor relu"
    assert explain_data.explain_sections(gk, None, "eager", sel)[0].title == "nothing selected yet"


def test_every_view_is_registered_once() -> None:
    """Each view package and module of app/views is in the registry, under its own name."""
    from app.views.registry import VIEWS

    names = [v.name for v in VIEWS]
    assert len(names) == len(set(names))
    views_dir = Path(__file__).resolve().parents[2] / "app" / "views"
    packages = {p.name for p in views_dir.iterdir() if (p / "view.py").exists()}
    assert packages == set(names)
    assert [v.column for v in VIEWS] == sorted((v.column for v in VIEWS), reverse=True), (
        "the registry lists the side column first, then the main column")


@pytest.mark.slow
def test_views_in_one_row_share_it_and_warm_fills_the_memos(cache_dir: Path) -> None:
    """Tree and Explain sit side by side; warm() computes every view that has a warm step."""
    from app.core import memo
    from app.views.loading.data import load_choice
    from app.views.spec import PageDefaults

    gk = load_choice("hand:tiny_train_step")
    defaults = PageDefaults(settings.PlanSettings(), [], None, {"key": gk, "name": "t"}, None,
                            2**20, [])
    layout = page.build_layout(defaults)
    rows = [c for c in _components(layout) if getattr(c, "className", None) == "row2"]
    assert [[k.id for k in _components(r) if getattr(k, "id", None) in (ids.TREE, ids.EXPLAIN)]
            for r in rows] == [[ids.TREE, ids.EXPLAIN]]
    memo.clear_caches()
    page.warm(gk, None)
    assert curves_data._curves.cache_info().currsize == 1
