"""End-to-end: Playwright drives Debian chromium against the served app.

One shared server (session fixture) with short planner limits.  Background jobs run in
processes forked from the app's fork server, which never sees a monkeypatch: a slow planner
(for cancel) is asked for through the cache (:mod:`tests.app.job_doubles`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.analysis.planner import run_planner
from app.analysis.settings import PlanSettings
from app.views.verify import data as verify_data
from roam_core.formats import plan_io
from roam_core.formats.graph_io import dumps_graph
from roam_core.model.samples import chain3, diamond, tiny_train_step
from tests.app.helpers import click_plot_until, planned_with_tree
from tests.app.job_doubles import slow_planner

pytestmark = pytest.mark.browser
expect: Any = None
T = 30_000  # ms; generous for a shared 2-core machine


@pytest.fixture(autouse=True)
def _expect() -> None:
    global expect
    expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture
def page_factory(browser: Any, app_url: str) -> Iterator[Any]:
    """Open pages in fresh browser contexts; fails the test on any console error."""
    opened: list[tuple[Any, list[str]]] = []

    def open_page() -> Any:
        ctx = browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 1000})
        page = ctx.new_page()
        errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(app_url)
        opened.append((page, errors))
        return page

    yield open_page
    for page, errors in opened:
        page.context.close()
        assert not errors, f"browser console errors: {errors}"


def _sample(name: str) -> Path:
    return Path(__file__).resolve().parents[2] / "sample_graphs" / name


def _upload(page: Any, selector: str, path: Path) -> None:
    page.locator(f"{selector} input[type=file]").set_input_files(str(path))


def _views_rendered(page: Any) -> None:
    expect(page.locator("#summary-card")).to_contain_text("planned peak", timeout=T)
    for gid in ("curves-graph", "timeline-graph", "layout-graph", "base-layout-graph"):
        expect(page.locator(f"#{gid} .main-svg").first).to_be_visible(timeout=T)
    expect(page.locator("#live-table td").first).to_be_visible(timeout=T)


def _load(page: Any, tmp_path: Path, graph: Any) -> None:
    path = tmp_path / f"{graph.name}.json"
    path.write_bytes(dumps_graph(graph))
    _upload(page, "#graph-upload", path)
    expect(page.locator("#load-status")).to_contain_text(f"loaded {graph.name}", timeout=T)


def _click_tensor(page: Any, graph_id: str, tensor_id: str) -> None:
    """Click the centre of a tensor's rectangle (its hover marker) in a layout figure until
    Explain shows the tensor."""
    page.locator(f"#{graph_id}").scroll_into_view_if_needed()
    page.wait_for_function("""([gid, tid]) => {  // a redraw may still be under way
        const gd = document.querySelector('#' + gid + ' .js-plotly-plot');
        const tr = gd && gd._fullData && gd._fullData[gd._fullData.length - 1];
        return !!tr && Array.from(tr.text || []).indexOf(tid) >= 0;
    }""", arg=[graph_id, tensor_id], timeout=T)
    click_plot_until(page, """([gid, tid]) => {
        const gd = document.querySelector('#' + gid + ' .js-plotly-plot');
        const tr = gd._fullData[gd._fullData.length - 1];
        const i = Array.from(tr.text).indexOf(tid);
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const r = gd.getBoundingClientRect();
        return [r.left + xa._offset + xa.l2p(tr.x[i]), r.top + ya._offset + ya.l2p(tr.y[i])];
    }""", lambda ms: expect(page.locator("#explain-panel")).to_contain_text(
        f"tensor {tensor_id}", timeout=ms), arg=[graph_id, tensor_id])


def test_sample_plan_views_tree_tensor_export_reimport(page_factory: Any,
                                                       tmp_path: Path) -> None:
    page = page_factory()
    _views_rendered(page)  # the start-up sample is already planned
    _load(page, tmp_path, tiny_train_step())
    _views_rendered(page)
    page.fill("#plan-time-limit", "1.5")
    page.press("#plan-time-limit", "Enter")
    page.click("#plan-btn")
    expect(page.locator("#plan-status")).to_contain_text("planned with roam", timeout=T)
    expect(page.locator("#plan-progress-text")).to_contain_text("100 % · planned in")
    done, total = (page.get_attribute("#plan-progress", a) for a in ("value", "max"))
    assert done == total != "0"
    # a plan with a task tree: import it, click a node, every view zooms
    graph, plan = planned_with_tree()
    t0, t1 = plan.task_tree["children"]  # t1 gets a sub-task, folded until asked for
    t1 = {**t1, "kind": "split", "children": [{**t1, "id": "t1a"}]}
    plan = dataclasses.replace(plan, task_tree={**plan.task_tree, "children": [t0, t1]})
    (tmp_path / "tree.plan.json").write_text(plan_io.dumps_plan(plan))
    _upload(page, "#plan-upload", tmp_path / "tree.plan.json")
    expect(page.locator("#import-status")).to_contain_text("valid for this graph", timeout=T)
    expect(page.locator("#task-tree button.node >> text=/^t1a[: ]/")).to_have_count(0)
    page.click("#task-tree button.more >> text='+ 1 more sub-task'")
    page.click("#task-tree button.node >> text=/^t1a[: ]/", timeout=T)
    expect(page.locator("#range-text")).to_contain_text("steps", timeout=T)
    expect(page.locator("#layout-graph .xtick").first).to_be_visible()
    page.click("#reset-zoom")
    expect(page.locator("#range-text")).to_have_text("whole step axis", timeout=T)
    # click a tensor in the layout: Explain tells why it sits there
    time.sleep(0.5)
    _click_tensor(page, "layout-graph", "relu_bw")
    expect(page.locator("#explain-panel")).to_contain_text("tensor relu_bw", timeout=T)
    expect(page.locator("#explain-panel")).to_contain_text("pinned by")
    # search: highlight and zoom
    page.fill("#search-input", "grad_w")
    page.press("#search-input", "Enter")
    page.click("#search-results button >> text=/^tensor grad_w/")
    expect(page.locator("#explain-panel")).to_contain_text("tensor grad_w", timeout=T)
    expect(page.locator("#range-text")).to_contain_text("steps", timeout=T)
    # exports download and the plan re-imports
    with page.expect_download(timeout=T) as dl:
        page.click("#export-json-btn")
    saved = tmp_path / "exported.plan.json"
    dl.value.save_as(saved)
    assert plan_io.loads_plan(saved.read_text(), graph).order == plan.order
    _upload(page, "#plan-upload", saved)
    expect(page.locator("#import-status")).to_contain_text("imported exported.plan.json",
                                                           timeout=T)
    with page.expect_download(timeout=T) as dl:
        page.click("#export-csv-btn")
    dl.value.save_as(tmp_path / "plan.csv")
    header = (tmp_path / "plan.csv").read_text().splitlines()[0].split(",")
    assert header[:4] == ["id", "lower", "upper", "size"]
    assert header[-1] == "offset"
    with page.expect_download(timeout=T) as dl:
        page.click("#export-html-btn")
    dl.value.save_as(tmp_path / "report.html")
    assert (tmp_path / "report.html").read_text().count("window.PlotlyConfig") == 1


def test_malformed_upload_shows_error_and_app_keeps_working(page_factory: Any,
                                                            tmp_path: Path) -> None:
    page = page_factory()
    _views_rendered(page)
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "roam-graph", "schema_version": 1, "ops": [{"id": "a"}]}')
    _upload(page, "#graph-upload", bad)
    expect(page.locator("#load-status")).to_contain_text("Error: bad.json:", timeout=T)
    _load(page, tmp_path, diamond())
    expect(page.locator("#summary-card")).to_contain_text("diamond: 4 ops", timeout=T)
    # the sample dropdown no longer claims the old sample
    expect(page.locator("#sample-pick")).to_contain_text("diamond (loaded; not a sample)",
                                                         timeout=T)
    # bad settings get a message in words, at once
    page.fill("#plan-time-limit", "-5")
    page.press("#plan-time-limit", "Enter")
    page.fill("#plan-workers", "0")
    page.press("#plan-workers", "Enter")
    expect(page.locator("#plan-settings-msg")).to_contain_text(
        "time limit must be more than 0 s (got -5 s)", timeout=T)
    expect(page.locator("#plan-settings-msg")).to_contain_text("workers must be at least 1")
    page.click("#plan-btn")
    expect(page.locator("#plan-status")).to_contain_text("Planning not started", timeout=T)
    page.fill("#plan-time-limit", "2")
    page.press("#plan-time-limit", "Enter")
    page.fill("#plan-workers", "1")
    page.press("#plan-workers", "Enter")
    expect(page.locator("#plan-settings-msg")).to_have_text("", timeout=T)
    foreign = tmp_path / "foreign.plan.json"
    foreign.write_text(plan_io.dumps_plan(planned_with_tree()[1]))
    _upload(page, "#plan-upload", foreign)
    expect(page.locator("#import-status")).to_contain_text("Import failed: foreign.plan.json",
                                                           timeout=T)


def test_cancel_stops_the_job(page_factory: Any, tmp_path: Path) -> None:
    """Cancel says so, stops the progress text, clears the old status, shows the best plan."""
    with slow_planner(60, then_real=False):
        _cancel_twice(page_factory(), tmp_path)


def _cancel_twice(page: Any, tmp_path: Path) -> None:
    _views_rendered(page)
    page.fill("#plan-time-limit", "7")
    page.press("#plan-time-limit", "Enter")
    page.click("#plan-btn")  # the start-up graph: a status that must go with a new graph
    expect(page.locator("#cancel-btn")).to_be_enabled(timeout=T)
    page.click("#cancel-btn")
    expect(page.locator("#plan-status")).to_contain_text("cancelled", timeout=T)
    expect(page.locator("#plan-btn")).to_be_enabled(timeout=T)
    _load(page, tmp_path, chain3())
    expect(page.locator("#plan-status")).to_have_text("", timeout=T)
    expect(page.locator("#plan-progress-text")).to_have_text("", timeout=T)
    page.fill("#plan-time-limit", "8")
    page.press("#plan-time-limit", "Enter")
    page.click("#plan-btn")
    expect(page.locator("#cancel-btn")).to_be_enabled(timeout=T)
    expect(page.locator("#plan-progress-text")).to_contain_text("slow test planner", timeout=T)
    expect(page.locator("#plan-progress-text")).to_contain_text("%")
    page.click("#cancel-btn")
    expect(page.locator("#plan-status")).to_contain_text(
        "cancelled: showing the best plan found so far", timeout=T)
    expect(page.locator("#plan-btn")).to_be_enabled(timeout=10_000)
    expect(page.locator("#cancel-btn")).to_be_disabled()
    text = page.locator("#plan-progress-text").inner_text()
    assert text.startswith("cancelled"), text
    time.sleep(1.0)
    assert page.locator("#plan-progress-text").inner_text() == text  # stopped
    expect(page.locator("#summary-card")).to_contain_text("chain3:", timeout=T)
    expect(page.locator("#summary-card")).to_contain_text("planned peak (eager)", timeout=T)
    page.screenshot(path=str(_shot("cancel")), full_page=False)


def _shot(name: str) -> Path:
    """Where a test's screenshot goes (``$ROAM_SHOTS`` or the pytest temp dir)."""
    import os
    import tempfile

    d = Path(os.environ.get("ROAM_SHOTS") or tempfile.gettempdir()) / "roam-shots"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{name}.png"


def test_two_contexts_plan_at_once(page_factory: Any, tmp_path: Path) -> None:
    with slow_planner(2.0, then_real=True):
        _plan_in_two_pages([page_factory(), page_factory()], tmp_path)


def _plan_in_two_pages(pages: list[Any], tmp_path: Path) -> None:
    for page, graph in zip(pages, (diamond(), chain3())):
        _views_rendered(page)
        _load(page, tmp_path, graph)
        page.fill("#plan-time-limit", "3.5")
        page.press("#plan-time-limit", "Enter")
    for page in pages:
        page.click("#plan-btn")
    for page in pages:
        expect(page.locator("#plan-btn")).to_be_disabled(timeout=T)
    for page, name in zip(pages, ("diamond", "chain3")):
        expect(page.locator("#plan-status")).to_contain_text("planned with roam", timeout=T)
        expect(page.locator("#summary-card")).to_contain_text(f"{name}:", timeout=T)


def test_zoo_model_is_traced_in_a_background_job(page_factory: Any) -> None:
    pytest.importorskip("torch")
    page = page_factory()
    _views_rendered(page)
    page.click("details.zoo summary")
    page.fill("#zoo-batch", "2")
    page.press("#zoo-batch", "Enter")
    page.click("#zoo-trace-btn")
    expect(page.locator("#zoo-status")).to_have_text("traced mlp", timeout=90_000)
    expect(page.locator("#load-status")).to_contain_text("loaded mlp-b2-steady", timeout=T)
    expect(page.locator("#summary-card")).to_contain_text("mlp-b2-steady", timeout=T)


def test_verify_on_cpu_runs_the_plan(page_factory: Any) -> None:
    pytest.importorskip("torch")
    page = page_factory()
    _views_rendered(page)
    _upload(page, "#graph-upload", _sample("mlp-b8-steady.json.gz"))
    expect(page.locator("#load-status")).to_contain_text("loaded mlp-b8-steady", timeout=T)
    expect(page.locator("#summary-card")).to_contain_text("planned peak", timeout=T)
    if not verify_data.cuda_status().available:
        expect(page.locator("#verify-note")).to_contain_text("no CUDA device visible",
                                                             timeout=T)
    page.click("#verify-device >> text=CPU")
    expect(page.locator("#verify-btn")).to_have_text("Verify on CPU", timeout=T)
    expect(page.locator("#verify-result")).to_contain_text("not verified yet")
    page.click("#verify-btn")
    expect(page.locator("#verify-status")).to_contain_text("verified mlp-b8-steady on cpu: pass",
                                                           timeout=60_000)
    expect(page.locator("#verify-result")).to_contain_text("PASS")
    expect(page.locator("#verify-result")).to_contain_text("max |eager − planned|0")


def test_report_tree_is_drawn(browser: Any, tmp_path: Path) -> None:
    """The report's task-tree icicle paints every node (it was blank: parents too small)."""
    from app.report import build_report

    graph = tiny_train_step()
    plan = run_planner(graph, PlanSettings(time_limit_s=2.0, node_limit=3))
    n_nodes = sum(1 for _ in _iter(plan.task_tree))
    assert n_nodes > 2
    out = tmp_path / "report.html"
    out.write_text(build_report(graph, plan))
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(out.as_uri())
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 5",
                               timeout=T)
        drawn = page.evaluate("""() => {
            const gd = [...document.querySelectorAll('.js-plotly-plot')]
                .find(g => g._fullData[0] && g._fullData[0].type === 'icicle'
                      && Array.from(g._fullData[0].ids).includes('root'));
            const slices = [...gd.querySelectorAll('g.slice path.surface')];
            return slices.map(p => p.getBBox()).filter(b => b.width > 1 && b.height > 1)
                         .length; }""")
        assert drawn == n_nodes
        page.locator("h2", has_text="Task division").scroll_into_view_if_needed()
        page.screenshot(path=str(_shot("report-tree")))
    finally:
        page.close()


def _iter(node: Any) -> Iterator[Any]:
    yield node
    for c in node.get("children") or ():
        yield from _iter(c)


def test_layout_hover_and_click_anywhere_on_a_rectangle(page_factory: Any) -> None:
    """Off the centre of a big storage, hover names it and a click explains it."""
    page = page_factory()
    _views_rendered(page)
    page.locator("#layout-graph").scroll_into_view_if_needed()
    time.sleep(0.5)
    # its axes show before its data: a loaded machine read the figure before its first draw
    page.wait_for_function("""() => {
        const gd = document.querySelector('#layout-graph .js-plotly-plot');
        return gd && gd._fullData && gd._fullData.length > 0; }""", timeout=T)
    # the largest storage of the view, at 10 % of its width and height from its corner
    xy = page.evaluate("""() => {
        const gd = document.querySelector('#layout-graph .js-plotly-plot');
        const tr = gd._fullData[gd._fullData.length - 1];
        const area = c => c[0] * (c[3] - c[2]);
        let best = 0;
        tr.customdata.forEach((c, i) => { if (area(c) > area(tr.customdata[best])) best = i; });
        const c = tr.customdata[best];
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const r = gd.getBoundingClientRect();
        const x = c[2] + 0.1 * (c[3] - c[2]), y = c[1] + 0.1 * c[0];
        return [r.left + xa._offset + xa.l2p(x), r.top + ya._offset + ya.l2p(y), tr.text[best]];
    }""")
    for i in range(3):
        page.mouse.move(xy[0] + i, xy[1])
        time.sleep(0.2)
    expect(page.locator("#layout-graph .hovertext").first).to_contain_text(xy[2], timeout=T)
    page.mouse.click(xy[0] + 2, xy[1])
    expect(page.locator("#explain-panel")).to_contain_text(f"tensor {xy[2]}", timeout=T)
    page.locator("#layout-graph").screenshot(path=str(_shot("layout-hover")))


def test_walkthrough_on_a_teaching_graph(page_factory: Any) -> None:
    """The guided walkthrough opens on a teaching graph; a tensor in it is shown everywhere."""
    page = page_factory()
    _views_rendered(page)
    _upload(page, "#graph-upload", _sample("mlp-b8-steady.json.gz"))
    expect(page.locator("#load-status")).to_contain_text("loaded mlp-b8-steady", timeout=T)
    tour = page.locator("#walkthrough details.walkthrough")
    expect(tour).to_have_attribute("open", "", timeout=T)
    for n in ("1. The eager", "2. ", "3. The layout packs", "4. Recomputation"):
        expect(tour).to_contain_text(n, timeout=T)
    first = tour.locator("button.hit").first
    name = first.inner_text().split(" ")[0].rstrip(":")  # the parameter's name, not an id
    first.click()
    expect(page.locator("#explain-panel")).to_contain_text(f"name {name}", timeout=T)
    expect(page.locator("#range-text")).to_contain_text("steps", timeout=T)
    tour.screenshot(path=str(_shot("walkthrough")))


@pytest.mark.parametrize(("sample", "lesson"), [
    ("teach_order-b256-steady", "the order."),
    ("teach_layout-b512-steady", "the layout.")])
def test_teaching_sample_says_what_it_teaches(page_factory: Any, sample: str, lesson: str
                                              ) -> None:
    """A teach_* sample's walkthrough opens on the one line of what it teaches."""
    page = page_factory()
    _views_rendered(page)
    _upload(page, "#graph-upload", _sample(f"{sample}.json.gz"))
    expect(page.locator("#load-status")).to_contain_text(f"loaded {sample}", timeout=T)
    tour = page.locator("#walkthrough details.walkthrough")
    expect(tour).to_have_attribute("open", "", timeout=T)
    expect(tour).to_contain_text(f"What this graph teaches: {lesson}", timeout=T)
    _views_rendered(page)
    for view in ("curves-graph", "layout-graph", "base-layout-graph"):
        page.locator(f"#{view}").screenshot(path=str(_shot(f"{sample}-{view}")))
    tour.screenshot(path=str(_shot(f"{sample}-walkthrough")))


def test_merge_casts_is_offered_for_autocast_precisions_only(page_factory: Any) -> None:
    """The trace panel (built when opened) offers "merge autocast's repeated casts" only in
    a mixed precision; going back to fp32 clears and disables it, with the reason."""
    page = page_factory()
    _views_rendered(page)
    page.click("details.zoo summary")
    box = page.locator("#zoo-merge-casts input[type=checkbox]")
    note = page.locator("#zoo-merge-casts-note")
    expect(box).to_be_disabled(timeout=T)
    expect(note).to_contain_text("only for autocast precisions")

    def precision(name: str) -> None:
        page.click("#zoo-precision")
        page.locator(".dash-dropdown-content .dash-dropdown-option",
                     has_text=name).first.click()

    precision("bf16-mixed")
    expect(box).to_be_enabled(timeout=T)
    expect(note).to_contain_text("eager PyTorch makes every copy")
    box.check()
    expect(box).to_be_checked()
    precision("fp32")
    expect(box).to_be_disabled(timeout=T)
    expect(box).not_to_be_checked()
    expect(note).to_contain_text("fp32 makes no casts to merge")
