"""Browser: the Budget view, What fits and the snapshot overlay (Playwright, Debian chromium).

Set ``ROAM_SCREENSHOTS=DIR`` to keep a screenshot of each view.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from app.analysis.settings import PlanSettings
from app.core import state
from app.services.planning import plan_graph
from roam_core.formats.snapshot import plan_snapshot
from tests.app import test_browser as _tb
from tests.app.helpers import click_plot_until, open_lazy_card
from tests.app.test_browser import _load, _upload, _views_rendered
from tests.builders import random_train_graph, two_param_step

pytestmark = pytest.mark.browser
page_factory = _tb.page_factory  # the shared fixture (console errors fail the test)
T = 120_000  # ms: the frontier plans ~10 budgets on a shared 2-core machine


@pytest.fixture(autouse=True)
def _expect() -> None:
    global expect
    expect = _tb.expect = pytest.importorskip("playwright.sync_api").expect  # its helpers too


expect: Any = None


def _shot(page: Any, selector: str, name: str) -> None:
    d = os.environ.get("ROAM_SCREENSHOTS")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        page.locator(selector).screenshot(path=str(Path(d) / f"{name}.png"))


def test_budget_frontier_click_loads_the_plan(page_factory: Any, tmp_path: Path) -> None:
    page = page_factory()
    _views_rendered(page)
    _load(page, tmp_path, random_train_graph(2, 6))
    _views_rendered(page)
    page.locator("#budget-card").scroll_into_view_if_needed()
    open_lazy_card(page, "budget-card")  # the card is mounted when opened
    # on a loaded machine the mount (a server round trip) can take longer than a click's 30 s
    expect(page.locator("#frontier-btn")).to_be_enabled(timeout=T)
    page.click("#frontier-btn", timeout=T)
    expect(page.locator("#frontier-status")).to_contain_text("plans", timeout=T)
    expect(page.locator("#frontier-progress-text")).to_contain_text("done", timeout=T)
    expect(page.locator("#frontier-table td").first).to_be_visible(timeout=T)
    n = page.evaluate("""() => {
        const gd = document.querySelector('#frontier-graph .js-plotly-plot');
        return gd.data[0].x.length; }""")
    assert n >= 4
    _shot(page, "#budget-card", "budget")
    # click the cheapest-memory roam point: its plan (with re-runs) is shown everywhere
    page.locator("#frontier-graph").scroll_into_view_if_needed()  # the opened card is tall
    click_plot_until(page, """() => {
        const gd = document.querySelector('#frontier-graph .js-plotly-plot');
        const tr = gd._fullData[0];
        let i = 0; for (let j = 0; j < tr.y.length; j++) if (tr.y[j] < tr.y[i]) i = j;
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const r = gd.getBoundingClientRect();
        return [r.left + xa._offset + xa.l2p(tr.x[i]), r.top + ya._offset + ya.l2p(tr.y[i])];
    }""", lambda ms: page.wait_for_function("""() => {
        const gd = document.querySelector('#timeline-graph .js-plotly-plot');
        return gd && gd.data.some(t => t.name === 'recomputed'); }""", timeout=ms))
    names = page.evaluate("""() => document.querySelector('#frontier-graph .js-plotly-plot')
        .data.map(t => t.name)""")
    assert "shown in the views" in names
    _shot(page, "#timeline-graph", "timeline_recompute")


def test_what_fits_sweep(page_factory: Any) -> None:
    page = page_factory()
    page.locator("#fit-card").scroll_into_view_if_needed()
    open_lazy_card(page, "fit-card")  # the card is mounted when opened
    expect(page.locator("#fit-btn")).to_be_enabled(timeout=T)
    page.fill("#fit-batches", "1 2")
    page.press("#fit-batches", "Enter")
    page.click("#fit-btn")
    # a transformer sweeps in bf16-mixed by default, and the status says so
    expect(page.locator("#fit-status")).to_contain_text(
        "swept tiny_gpt in bf16-mixed (the default for transformers): 2 configurations",
        timeout=T * 2)
    expect(page.locator("#fit-answer")).to_contain_text("Largest batch that fits 16 GiB")
    expect(page.locator("#fit-answer")).to_contain_text("roam: batch 2")
    assert page.get_attribute("#fit-progress", "value") == page.get_attribute(
        "#fit-progress", "max") == "2"
    lines = page.evaluate("""() => document.querySelector('#fit-graph .js-plotly-plot')
        .layout.shapes.map(s => s.y0)""")
    assert sorted(lines) == [16, 24, 40, 80, 141]
    _shot(page, "#fit-card", "what_fits")
    page.fill("#fit-memory-gib", "0.001")
    page.press("#fit-memory-gib", "Enter")
    expect(page.locator("#fit-answer")).to_contain_text("Largest batch that fits 0.001 GiB")


def test_snapshot_overlay(page_factory: Any, tmp_path: Path) -> None:
    g = two_param_step()
    page = page_factory()
    _views_rendered(page)
    _load(page, tmp_path, g)
    _views_rendered(page)
    gk = state.put_graph(g)
    pk = plan_graph(gk, PlanSettings(time_limit_s=2.0))
    snap = plan_snapshot(g, state.get_plan(pk))
    snap["segments"].append({"device": 0, "address": 1 << 40, "total_size": 16 << 10,
                             "blocks": [{"address": 1 << 40, "size": 16 << 10,
                                         "state": "inactive"}]})
    path = tmp_path / "run.pickle"
    path.write_bytes(pickle.dumps(snap))
    page.locator("#snapshot-card").scroll_into_view_if_needed()
    open_lazy_card(page, "snapshot-card")  # the card is mounted when opened
    expect(page.locator("#snapshot-upload")).to_be_visible(timeout=T)
    _upload(page, "#snapshot-upload", path)
    expect(page.locator("#snapshot-status")).to_contain_text("loaded snapshot run.pickle",
                                                             timeout=T)
    expect(page.locator("#snapshot-summary")).to_contain_text("fragmentation at the peak")
    page.wait_for_function("""() => {
        const gd = document.querySelector('#snapshot-curves .js-plotly-plot');
        return gd && gd.data.some(t => t.name === 'exported allocated'); }""", timeout=T)
    ticks = page.evaluate("""() => document.querySelector('#snapshot-segments .js-plotly-plot')
        .layout.xaxis.ticktext""")
    assert ticks == ["planned arena", "segment 1", "segment 2"]
    _shot(page, "#snapshot-card", "snapshot")
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"not a pickle")
    _upload(page, "#snapshot-upload", bad)
    expect(page.locator("#snapshot-status")).to_contain_text("Snapshot not loaded: bad.pickle",
                                                             timeout=T)
