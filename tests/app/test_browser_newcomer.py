"""Browser: what a newcomer misread or could not do (issue "The app, honest and readable").

One test per numbered defect; each failed on the app before its fix.  Playwright drives
Debian chromium against the shared served app (``tests/app/conftest.py``); console errors
fail a test (``page_factory``).  Set ``ROAM_SCREENSHOTS=DIR`` to keep screenshots.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from roam_core.formats import plan_io
from roam_core.formats.graph_io import load_graph
from roam_core.model.samples import chain3, diamond
from tests.app import test_browser as _tb
from tests.app.helpers import click_plot_until, open_lazy_card
from tests.app.job_doubles import slow_fit, slow_frontier, slow_planner
from tests.app.test_browser import _load, _sample, _upload, _views_rendered

pytestmark = pytest.mark.browser
page_factory = _tb.page_factory  # the shared fixture (console errors fail the test)
T = 60_000  # ms: generous for a shared 2-core machine
expect: Any = None


@pytest.fixture(autouse=True)
def _expect() -> None:
    global expect
    expect = _tb.expect = pytest.importorskip("playwright.sync_api").expect


def _plot_box(page: Any, gid: str) -> dict[str, float]:
    """The plot area of a figure in page pixels."""
    return page.evaluate("""gid => {
        const gd = document.querySelector('#' + gid + ' .js-plotly-plot');
        const s = gd._fullLayout._size, r = gd.getBoundingClientRect();
        return {left: r.left + s.l, top: r.top + s.t, right: r.left + s.l + s.w,
                bottom: r.top + s.t + s.h, width: r.width, x0: r.left}; }""", gid)


def test_1_big_upload_is_refused_in_the_browser_and_files_stream(page_factory: Any,
                                                                 tmp_path: Path) -> None:
    """A file over the cap is refused before it is read (the tab lives, nothing is sent);
    one within the cap streams to the upload route, not through a callback."""
    page = page_factory()
    posts: list[tuple[str, int]] = []
    page.on("request", lambda r: r.method == "POST" and posts.append(
        (r.url, len(r.post_data_buffer or b""))))
    _views_rendered(page)
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(201 * 2**20)  # the cap is 200 MiB (sparse: no disk used)
    _upload(page, "#graph-upload", big)
    expect(page.locator("#load-status")).to_contain_text("larger than the upload limit",
                                                         timeout=T)
    expect(page.locator("#load-status")).to_contain_text("nothing was sent")
    assert max((n for _, n in posts), default=0) < 2**20, posts
    _load(page, tmp_path, diamond())
    expect(page.locator("#summary-card")).to_contain_text("diamond: 4 ops", timeout=T)
    assert any("/_roam/upload/graph" in u for u, _ in posts), posts
    callbacks = [n for u, n in posts if "_dash-update-component" in u]
    assert max(callbacks) < 64 * 2**10, "a file went through a callback"


def test_2_clicking_the_eager_curve_lists_the_eager_order(page_factory: Any) -> None:
    """A click on the before (eager) curve lists what eager holds at that step."""
    page = page_factory()
    _views_rendered(page)
    page.locator("#curves-graph").scroll_into_view_if_needed()
    # the step where eager holds the most more than the plan, and its pixel on eager's curve
    where = """() => {
        const gd = document.querySelector('#curves-graph .js-plotly-plot');
        const lines = gd._fullData.filter(t => t.mode === 'lines');
        const eager = lines.find(t => t.name.startsWith('eager'));
        const plan = lines.find(t => t.name.startsWith('planned'));
        let best = 0, gap = -1;
        eager.x.forEach((x, i) => {
            const j = Array.from(plan.x).indexOf(x);
            if (j >= 0 && eager.y[i] - plan.y[j] > gap) { gap = eager.y[i] - plan.y[j]; best = i; }
        });
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, r = gd.getBoundingClientRect();
        return [r.left + xa._offset + xa.l2p(eager.x[best]),
                r.top + ya._offset + ya.l2p(eager.y[best]), eager.x[best], eager.y[best]]; }"""
    step = page.evaluate(where)[2]
    title = page.locator("#live-title")
    xy = click_plot_until(page, where, lambda ms: expect(title).to_contain_text(
        f"Live at step {int(step)}", timeout=ms))
    expect(title).to_contain_text("in the eager (program order): ")
    total = float(re.search(r"order\): ([\d.]+) GiB", title.inner_text()).group(1))
    assert total == pytest.approx(xy[3], abs=0.01)  # what the eager curve reads there


def test_3_cancel_keeps_what_was_made_and_says_so(page_factory: Any, tmp_path: Path) -> None:
    """Frontier Cancel keeps the finished plans and stops its progress text; a cancelled plan
    is marked in the summary."""
    page = page_factory()
    _views_rendered(page)
    _load(page, tmp_path, load_graph(_sample("teach_recompute-b256-steady.json.gz")))
    _views_rendered(page)
    page.locator("#budget-card").scroll_into_view_if_needed()
    open_lazy_card(page, "budget-card")
    expect(page.locator("#frontier-btn")).to_be_enabled(timeout=T)
    page.uncheck("#frontier-min-cut input")
    with slow_frontier(1.5):
        page.click("#frontier-btn")
        expect(page.locator("#frontier-progress-text")).to_contain_text("plan 3", timeout=T)
        page.click("#frontier-cancel-btn")
        expect(page.locator("#frontier-status")).to_contain_text(
            "cancelled: showing the", timeout=T)
    expect(page.locator("#frontier-table td").first).to_be_visible(timeout=T)
    text = page.locator("#frontier-progress-text").inner_text()
    assert text.startswith("cancelled after"), text
    time.sleep(1.0)
    assert page.locator("#frontier-progress-text").inner_text() == text  # stopped
    n = page.evaluate("""() => document.querySelector('#frontier-graph .js-plotly-plot')
        ._fullData.reduce((k, t) => k + (t.x ? t.x.length : 0), 0)""")
    assert n >= 2
    # a plan cut short by Cancel says so where its numbers are read
    page.locator("#plan-btn").scroll_into_view_if_needed()
    _load(page, tmp_path, chain3())
    with slow_planner(60, then_real=False):
        page.fill("#plan-time-limit", "9")
        page.press("#plan-time-limit", "Enter")
        page.click("#plan-btn")
        expect(page.locator("#cancel-btn")).to_be_enabled(timeout=T)
        expect(page.locator("#plan-progress-text")).to_contain_text("slow test planner",
                                                                    timeout=T)
        page.click("#cancel-btn")
        expect(page.locator("#plan-status")).to_contain_text("cancelled", timeout=T)
    expect(page.locator("#summary-card .warning")).to_contain_text(
        "best plan found before the cancel", timeout=T)


def test_4_verify_says_what_a_pass_on_a_zero_loss_proves(page_factory: Any) -> None:
    """The start-up graph (the paper's setting: loss 0, every gradient 0) passes, and the
    result says how little that proves."""
    pytest.importorskip("torch")
    page = page_factory()
    _views_rendered(page)
    page.click("#verify-device >> text=CPU")
    expect(page.locator("#verify-btn")).to_be_enabled(timeout=T)
    page.click("#verify-btn")
    expect(page.locator("#verify-status")).to_contain_text("verified", timeout=120_000)
    expect(page.locator("#verify-status")).to_contain_text("the loss is 0: it proves little")
    result = page.locator("#verify-result")
    expect(result).to_contain_text("PASS, but it proves little")
    expect(result).to_contain_text("every gradient is then zero")
    assert "-0" not in result.inner_text()


def test_5_teaching_text_matches_the_charts(page_factory: Any, tmp_path: Path) -> None:
    """The timeline's note says which row is on top, as drawn; an unplanned graph's one row
    and curve are the baseline's; teach_updates opens planned with its walkthrough; Explain
    on a re-run has no "None" and names who reads it."""
    page = page_factory()
    _views_rendered(page)
    top = page.evaluate("""() => {
        const ya = document.querySelector('#timeline-graph .js-plotly-plot')._fullLayout.yaxis;
        const i = ya.tickvals.indexOf(Math.max(...ya.tickvals));
        return ya.ticktext[i]; }""")
    assert top == "planned"
    page.click("#howto-timeline summary")
    expect(page.locator("#howto-timeline")).to_contain_text("the planned order on top")
    # teach_updates (307 ops) is planned on load and opens its walkthrough
    _upload(page, "#graph-upload", _sample("teach_updates-b8-steady.json.gz"))
    tour = page.locator("#walkthrough details.walkthrough")
    expect(tour).to_have_attribute("open", "", timeout=T)
    expect(tour).to_contain_text("What this graph teaches: weight-update placement")
    # a graph too big to plan on load: the one row and curve are the baseline's
    _upload(page, "#graph-upload", _sample("mobilenet_v2-b8-steady.json.gz"))
    expect(page.locator("#summary-card")).to_contain_text("not planned yet", timeout=T)
    page.wait_for_function("""() => {
        const gd = document.querySelector('#timeline-graph .js-plotly-plot');
        return gd && gd._fullLayout.yaxis.ticktext.length === 1; }""", timeout=T)
    row, curve = page.evaluate("""() => {
        const tl = document.querySelector('#timeline-graph .js-plotly-plot')._fullLayout;
        const cv = document.querySelector('#curves-graph .js-plotly-plot')._fullData[0];
        return [tl.yaxis.ticktext[0], [cv.name, cv.line.color]]; }""")
    assert row == "before"
    assert curve == ["eager (program order)", "#4c72b0"]
    # a budget plan: Explain on a re-run
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    g = load_graph(_sample("teach_recompute-b256-steady.json.gz"))
    plan = make_plan(g, config=PlannerConfig(time_limit_s=5, budget_bytes=6 * 2**20))
    assert plan.recompute
    path = tmp_path / "budget.plan.json"
    path.write_text(plan_io.dumps_plan(plan))
    _upload(page, "#graph-upload", _sample("teach_recompute-b256-steady.json.gz"))
    expect(page.locator("#load-status")).to_contain_text("loaded teach_recompute", timeout=T)
    _upload(page, "#plan-upload", path)
    expect(page.locator("#import-status")).to_contain_text("valid for this graph", timeout=T)
    page.locator("#timeline-graph").scroll_into_view_if_needed()
    page.wait_for_function("""() => {
        const gd = document.querySelector('#timeline-graph .js-plotly-plot');
        return gd && gd._fullData.some(t => t.name === 'recomputed' && t.type === 'heatmap');
    }""", timeout=T)
    panel = page.locator("#explain-panel")
    click_plot_until(page, """() => {
        const gd = document.querySelector('#timeline-graph .js-plotly-plot');
        const hm = gd._fullData.find(t => t.name === 'recomputed' && t.type === 'heatmap');
        const k = hm.text[1].findIndex(t => t && t.endsWith('@r'));
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, r = gd.getBoundingClientRect();
        return [r.left + xa._offset + xa.l2p(k + 0.5), r.top + ya._offset + ya.l2p(1)]; }""",
        lambda ms: expect(panel).to_contain_text("a re-run the plan adds", timeout=ms))
    text = panel.inner_text()
    assert "None" not in text
    read_by = re.search(r"read by: (.*)", text).group(1)
    assert read_by != "(none)"


def test_6_figures_read(page_factory: Any, browser: Any, app_url: str,
                        tmp_path: Path) -> None:
    """Peak labels do not cover the curves or each other and are not clipped; row names are
    whole; no grey marker column; the tree says what it is; the page fits 900 px and leads
    with its headline at 1280x720; the report's task tree has readable text or none."""
    page = page_factory()
    _views_rendered(page)
    boxes = page.evaluate("""() => [...document.querySelectorAll(
        '#curves-graph g.annotation')].filter(a => a.textContent.includes('peak'))
        .map(a => { const r = a.getBoundingClientRect();
                    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; })""")
    assert len(boxes) == 2
    plot = _plot_box(page, "curves-graph")
    for b in boxes:
        assert b["bottom"] <= plot["top"] + 1  # above the curves
        assert b["left"] >= plot["x0"]  # whole: not clipped on either side
        assert b["right"] <= plot["x0"] + plot["width"]
    a, b = boxes
    assert a["bottom"] <= b["top"] + 1 or b["bottom"] <= a["top"] + 1  # not on each other
    ticks = page.evaluate("""() => document.querySelector('#timeline-graph .js-plotly-plot')
        ._fullLayout.yaxis.ticktext""")
    assert not any(t.endswith("…") for t in ticks), ticks
    # the layouts render last (a fresh-clone run read them before their first draw)
    page.wait_for_function("""() => {
        const gd = document.querySelector('#layout-graph .js-plotly-plot');
        return gd && gd._fullData && gd._fullData.length > 0; }""", timeout=T)
    marker = page.evaluate("""() => {
        const gd = document.querySelector('#layout-graph .js-plotly-plot');
        const t = gd._fullData[gd._fullData.length - 1];
        return [t.marker.color, t.marker.opacity]; }""")
    assert marker[0] == "rgba(0,0,0,0)" or marker[1] == 0, marker
    root = page.locator("#task-tree button.node").first.inner_text()
    assert "n/a" not in root, root
    assert " 0 ops" not in root, root
    head = page.locator("#headline")
    expect(head).to_contain_text("peak", timeout=T)
    for width, height in ((1280, 720), (900, 720)):
        ctx = browser.new_context(viewport={"width": width, "height": height})
        p2 = ctx.new_page()
        try:
            p2.goto(app_url)
            expect(p2.locator("#headline")).to_contain_text("peak", timeout=T)
            assert p2.evaluate("document.documentElement.scrollWidth") <= width
            assert p2.locator("#headline").bounding_box()["y"] < height  # above the fold
        finally:
            ctx.close()
    # the HTML report's task tree: text at least 10 px, and no green legend without green
    from app.analysis.planner import run_planner
    from app.analysis.settings import PlanSettings
    from app.report import build_report
    from roam_core.model.samples import tiny_train_step

    graph = tiny_train_step()
    plan = run_planner(graph, PlanSettings(time_limit_s=2.0, node_limit=3))
    out = tmp_path / "report.html"
    out.write_text(build_report(graph, plan))
    rep = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        rep.goto(out.as_uri())
        rep.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 5",
                              timeout=T)
        sizes, title, greens = rep.evaluate("""() => {
            const gd = [...document.querySelectorAll('.js-plotly-plot')]
                .find(g => g._fullData[0] && g._fullData[0].type === 'icicle'
                      && Array.from(g._fullData[0].ids).includes('root'));
            const txt = [...gd.querySelectorAll('g.slice text.slicetext')]
                .filter(t => t.textContent && getComputedStyle(t).display !== 'none'
                        && t.getBBox().width > 0);
            return [txt.map(t => parseFloat(t.style.fontSize || getComputedStyle(t).fontSize)),
                    gd._fullLayout.title.text,
                    gd._fullData[0].marker.colors.filter(c => c === '#55a868').length]; }""")
        assert all(s >= 10 for s in sizes), sizes
        assert ("green" in title) == (greens > 0), (title, greens)
    finally:
        rep.close()


def test_7_the_headline_card_speaks_plainly(page_factory: Any) -> None:
    """No solver jargon in the summary, no raw op ids in the walkthrough, and what lives
    outside every module is named."""
    page = page_factory()
    _views_rendered(page)
    card = page.locator("#summary-card")
    expect(card).to_contain_text("lower bound", timeout=T)
    text = card.inner_text()
    for jargon in ("calls (", "proven gap", "heuristic 1", "stage "):
        assert jargon not in text, jargon
    page.click("#walkthrough summary")
    buttons = page.locator("#walkthrough button.hit").all_inner_texts()
    assert buttons
    raw = [b for b in buttons if re.match(r"^_?[a-z_]+_\d+[: (]", b)]
    assert not raw, raw  # e.g. "mm_1: 12 -> 4 steps": a label names what made it
    _upload(page, "#graph-upload", _sample("tiny_gpt-b2-t32-steady.json.gz"))
    expect(page.locator("#summary-card")).to_contain_text("tiny_gpt", timeout=T)
    page.locator("#module-card").scroll_into_view_if_needed()
    expect(page.locator("#module-title")).to_contain_text(
        "(outside modules): storages made outside every nn.Module", timeout=T)


def test_8_what_fits_remembers_earlier_sweeps_and_cancel_keeps_rows(page_factory: Any
                                                                     ) -> None:
    """A sweep of batch 2 after one of batch 1 answers from both; a cancelled sweep keeps
    the configurations it measured."""
    pytest.importorskip("torch")
    page = page_factory()
    _views_rendered(page)
    page.locator("#fit-card").scroll_into_view_if_needed()
    open_lazy_card(page, "fit-card")
    expect(page.locator("#fit-btn")).to_be_enabled(timeout=T)
    page.click("#fit-model")
    page.locator(".dash-dropdown-content").get_by_text("mlp", exact=True).click()
    expect(page.locator("#fit-model")).to_contain_text("mlp", timeout=T)

    def sweep(batches: str) -> None:
        page.fill("#fit-batches", batches)
        page.press("#fit-batches", "Enter")
        page.click("#fit-btn")

    sweep("1")
    expect(page.locator("#fit-status")).to_contain_text(
        "swept mlp in fp32 (the default for this model): 1 configurations", timeout=120_000)
    with slow_fit(3.0):
        sweep("2 3 4 5 6 7 8")
        expect(page.locator("#fit-progress-text")).to_contain_text("1/7", timeout=120_000)
        page.click("#fit-cancel-btn")
        expect(page.locator("#fit-status")).to_contain_text("cancelled:", timeout=120_000)
    expect(page.locator("#fit-answer")).not_to_contain_text("(of the 1 configurations",
                                                            timeout=T)
    xs = page.evaluate("""() => { const gd = document.querySelector('#fit-graph');
        const p = gd.matches(".js-plotly-plot") ? gd : gd.querySelector(".js-plotly-plot");
        return Array.from(p._fullData[0].x); }""")
    assert 1 in xs, xs  # batch 1 from the first sweep is kept
    assert 2 in xs, xs
    assert len(xs) < 8, xs
    expect(page.locator("#fit-answer")).to_contain_text("measured so far")


def test_9_small_ones(page_factory: Any, tmp_path: Path) -> None:
    """An invalid regex is named; after a plan import the status names the imported plan."""
    page = page_factory()
    _views_rendered(page)
    page.fill("#search-input", "features.0(")
    page.press("#search-input", "Enter")
    expect(page.locator("#search-results")).to_contain_text(
        "not a valid regular expression", timeout=T)
    _load(page, tmp_path, chain3())
    expect(page.locator("#summary-card")).to_contain_text("chain3:", timeout=T)
    from app.analysis.planner import run_planner
    from app.analysis.settings import PlanSettings

    plan = run_planner(chain3(), PlanSettings(method="eager", time_limit_s=1.0))
    path = tmp_path / "chain3.plan.json"
    path.write_text(plan_io.dumps_plan(plan))
    page.click("#plan-btn")
    expect(page.locator("#plan-status")).to_contain_text("planned with roam", timeout=T)
    _upload(page, "#plan-upload", path)
    expect(page.locator("#import-status")).to_contain_text("valid for this graph", timeout=T)
    expect(page.locator("#plan-status")).to_contain_text(
        "showing the imported plan chain3.plan.json", timeout=T)



def test_use_this_plan_shows_code_and_the_command_lines(page_factory: Any) -> None:
    """The card under the views names the plan file, PlannedStep and the roam commands."""
    page = page_factory()
    _views_rendered(page)
    page.locator("#use-plan-card").scroll_into_view_if_needed()
    open_lazy_card(page, "use-plan-card")
    expect(page.locator("#use-plan-python")).to_contain_text("rc.PlannedStep(model, plan",
                                                             timeout=T)
    expect(page.locator("#use-plan-cli")).to_contain_text("roam plan ")


def test_a_link_reopens_the_same_view(page_factory: Any, tmp_path: Path) -> None:
    """The address names graph, plan, zoom and selection; opening it shows them again."""
    page = page_factory()
    _views_rendered(page)
    assert "graph=" not in page.url  # the start-up view's address is the bare one
    _load(page, tmp_path, load_graph(_sample("tiny_gpt-b2-t32-steady.json.gz")))
    expect(page.locator("#summary-card")).to_contain_text("tiny_gpt", timeout=T)
    page.wait_for_function("() => location.search.includes('plan=')", timeout=T)
    graph_key = re.search(r"graph=([^&]+)", page.url).group(1)
    op = load_graph(_sample("tiny_gpt-b2-t32-steady.json.gz")).ops[5].id
    link = f"{page.url}&x0=10&x1=60&sel=op:{op}"
    # the same browser (its session cookie): graphs are private to a session, so a link
    # reopens the view for whoever made it, not for another browser
    again = page.context.new_page()
    again.goto(link)
    expect(again.locator("#summary-card")).to_contain_text("tiny_gpt", timeout=T)
    expect(again.locator("#load-status")).to_contain_text("from the link")
    again.wait_for_function("""() => {
        const gd = document.querySelector('#curves-graph .js-plotly-plot');
        return gd && gd._fullLayout && gd._fullLayout.xaxis.range[0] === 10
               && gd._fullLayout.xaxis.range[1] === 60; }""", timeout=T)
    expect(again.locator("#explain-panel")).to_contain_text(op, timeout=T)
    assert f"graph={graph_key}" in again.url
    # a key this server does not have opens the default graph and says why
    gone = page_factory()
    gone.goto(link.replace(graph_key, "g-" + "0" * 64))
    expect(gone.locator("#load-status")).to_contain_text("no longer on this server",
                                                         timeout=T)
