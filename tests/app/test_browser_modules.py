"""End-to-end: module names in the hover, the live table and search; the per-module view.

Playwright drives Debian chromium against the shared served app (``tests/app/conftest.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser
T = 30_000  # ms; generous for a shared 2-core machine
SAMPLE = Path(__file__).resolve().parents[2] / "sample_graphs" / "tiny_gpt-b2-t32-steady.json.gz"


@pytest.fixture
def page(browser: Any, app_url: str) -> Iterator[Any]:
    """One page in a fresh context; fails the test on any console error."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("console", lambda m: m.type == "error" and errors.append(m.text))
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(app_url)
    yield pg
    ctx.close()
    assert not errors, f"browser console errors: {errors}"


def _has_trace(page: Any, graph_id: str, name: str) -> bool:
    return page.evaluate("""([gid, name]) => {
        const gd = document.querySelector('#' + gid + ' .js-plotly-plot');
        return gd._fullData.some(t => t.name === name);
    }""", [graph_id, name])


def _row_of(page: Any, module: str) -> int:
    """Index of the module table's row showing ``module``."""
    cells = page.locator("#module-table td[data-dash-column=module]").all_inner_texts()
    return cells.index(module)


def test_module_names_in_hover_table_search_and_the_module_view(page: Any) -> None:
    expect = pytest.importorskip("playwright.sync_api").expect
    page.locator("#graph-upload input[type=file]").set_input_files(str(SAMPLE))
    expect(page.locator("#load-status")).to_contain_text("loaded tiny_gpt", timeout=T)
    page.fill("#plan-time-limit", "1.5")
    page.press("#plan-time-limit", "Enter")
    page.click("#plan-btn")
    expect(page.locator("#plan-status")).to_contain_text("planned with roam", timeout=T)
    expect(page.locator("#summary-card")).to_contain_text("planned peak", timeout=T)

    # the per-module table: modules by path, sortable (drawn once scrolled into view)
    page.locator("#module-card").scroll_into_view_if_needed()
    table = page.locator("#module-table")
    expect(table).to_contain_text("h.0", timeout=T)
    expect(table).to_contain_text("wte")
    expect(page.locator("#module-title")).to_contain_text("planned peak")
    expect(page.locator("#module-icicle .main-svg").first).to_be_visible(timeout=T)
    first = page.locator("#module-table td[data-dash-column=module]").first
    expect(first).to_have_text("h.0")  # largest first
    header = page.locator("#module-table th[data-dash-column=module]").first
    header.locator(".column-header--sort").click()
    expect(first).to_have_text("(outside modules)", timeout=T)  # sorted by name

    # the live table names parameters and modules
    expect(page.locator("#live-table")).to_contain_text("h.0.c_fc.weight", timeout=T)
    expect(page.locator("#live-table")).to_contain_text("h.1.mlp_proj")

    # the timeline hover names an op's module
    page.locator("#timeline-graph").scroll_into_view_if_needed()
    xy = page.evaluate("""([gid, needle]) => {
        const gd = document.querySelector('#' + gid + ' .js-plotly-plot');
        const tr = gd._fullData[0];
        const r = tr.hovertext.length - 1;
        const i = tr.hovertext[r].findIndex(h => h.includes(needle));
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const box = gd.getBoundingClientRect();
        const x = (tr.x0 === undefined ? 0 : tr.x0) + i * (tr.dx === undefined ? 1 : tr.dx);
        return [box.left + xa._offset + xa.l2p(x), box.top + ya._offset + ya.l2p(r)];
    }""", ["timeline-graph", "module h.0.c_fc"])
    page.mouse.move(xy[0], xy[1])
    expect(page.locator("#timeline-graph .hovertext")).to_contain_text("module h.0.c_fc",
                                                                      timeout=T)

    # search by parameter name: the tensor, its name in Explain
    page.fill("#search-input", "c_fc.weight$")
    page.press("#search-input", "Enter")
    page.click("#search-results button >> text=/^tensor h.0.c_fc.weight \\(/", timeout=T)
    expect(page.locator("#explain-panel")).to_contain_text("name h.0.c_fc.weight", timeout=T)
    expect(page.locator("#explain-panel")).to_contain_text("module h.0.c_fc")

    # search by module path: selecting the module marks its ops and tensors
    page.fill("#search-input", "h.1.c_attn")
    page.press("#search-input", "Enter")
    page.click("#search-results button >> text=/^module h.1.c_attn /", timeout=T)
    expect(page.locator("#explain-panel")).to_contain_text("module h.1.c_attn", timeout=T)
    expect(page.locator("#range-text")).to_contain_text("steps", timeout=T)
    page.wait_for_function("""() => {
        const gd = document.querySelector('#timeline-graph .js-plotly-plot');
        return gd && gd._fullData.some(t => t.name === 'selected module');
    }""", timeout=T)

    # clicking a module in the per-module table selects it in every view
    page.locator("#module-table td[data-dash-column=module] >> text='wte'").click()
    expect(page.locator("#explain-panel")).to_contain_text("module wte", timeout=T)
    expect(page.locator("#explain-panel")).to_contain_text("wte.weight")
    page.wait_for_function("""() => {
        const gd = document.querySelector('#layout-graph .js-plotly-plot');
        return gd && gd._fullData.some(t => t.name === 'selected module');
    }""", timeout=T)
    assert _has_trace(page, "base-layout-graph", "selected module")
    assert _has_trace(page, "timeline-graph", "selected module")

    # clicking an icicle node selects its module too (and draws no broken paths)
    page.locator("#module-icicle").scroll_into_view_if_needed()
    box = page.evaluate("""(target) => {
        for (const el of document.querySelectorAll('#module-icicle g.slice')) {
            const d = el.__data__, id = d && d.data && d.data.data && d.data.data.id;
            if (id === target) { const r = el.getBoundingClientRect();
                                 return [r.left + r.width / 2, r.top + r.height / 2]; }
        }
        return null; }""", "h.1")
    assert box is not None
    page.mouse.click(box[0], box[1])
    expect(page.locator("#explain-panel")).to_contain_text("module h.1", timeout=T)
    expect(page.locator("#module-table td[data-dash-column=after_mib]").nth(
        _row_of(page, "h.1"))).to_have_css(
        "background-color", "rgb(255, 243, 196)", timeout=T)
