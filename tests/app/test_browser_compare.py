"""Browser: Compare two plans (Playwright, Debian chromium).

Set ``ROAM_SCREENSHOTS=DIR`` to keep a screenshot of the card.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from app.views.compare.model import signed_bytes
from roam_core.base.units import format_bytes
from roam_core.formats.graph_io import load_graph
from roam_core.planner import make_plan
from roam_core.planner.config import PlannerConfig
from tests.app import test_browser as _tb
from tests.app.helpers import open_lazy_card
from tests.app.test_browser import _sample, _upload, _views_rendered

pytestmark = pytest.mark.browser
page_factory = _tb.page_factory  # the shared fixture (console errors fail the test)
T = 60_000  # ms; generous for a shared 2-core machine
SAMPLE = "teach_order-b256-steady.json.gz"


@pytest.fixture(autouse=True)
def _expect() -> None:
    global expect
    expect = _tb.expect = pytest.importorskip("playwright.sync_api").expect  # its helpers too


expect: Any = None


def _pick(page: Any, dropdown: str, text: str) -> None:
    """Choose the option whose label contains ``text`` in a ``dcc.Dropdown``."""
    page.click(f"#{dropdown}")
    page.locator(".dash-dropdown-content .dash-dropdown-option", has_text=text).first.click()


def _cell(page: Any, table: str, row: int, column: str) -> Any:
    return page.locator(f"#{table} td[data-dash-column={column}]").nth(row)


def test_compare_two_plans_shows_the_difference(page_factory: Any, tmp_path: Path) -> None:
    page = page_factory()
    _views_rendered(page)
    _upload(page, "#graph-upload", _sample(SAMPLE))
    expect(page.locator("#load-status")).to_contain_text("loaded teach_order", timeout=T)
    _views_rendered(page)  # small: planned on load
    g = load_graph(_sample(SAMPLE))
    peak = {m: make_plan(g, PlannerConfig(workers=1), method=m).planned_peak_bytes
            for m in ("eager", "lescea")}

    page.locator("#compare-card").scroll_into_view_if_needed()
    open_lazy_card(page, "compare-card")  # the card is mounted when opened
    status = page.locator("#compare-status")
    # by default: the compared baseline against the plan shown
    expect(status).to_contain_text("A: baseline: eager (program order)", timeout=T)
    expect(status).to_contain_text("B: plan shown: roam")
    expect(_cell(page, "compare-metrics", 0, "metric")).to_have_text("planned peak",
                                                                    timeout=T)
    expect(_cell(page, "compare-metrics", 0, "a")).to_have_text(format_bytes(peak["eager"]))
    expect(_cell(page, "compare-metrics", 0, "diff")).to_contain_text("−")  # roam saves
    names = page.evaluate("""() => document.querySelector('#compare-graph .js-plotly-plot')
        .data.filter(t => t.showlegend !== false).map(t => t.name)""")
    assert names[0] == "A: baseline: eager (program order)"
    assert names[1].startswith("B: plan shown: roam")
    expect(page.locator("#compare-modules td").first).to_be_visible(timeout=T)
    expect(page.locator("#compare-lifetimes td").first).to_be_visible(timeout=T)
    d = os.environ.get("ROAM_SCREENSHOTS")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        page.locator("#compare-card").screenshot(path=str(Path(d) / "compare.png"))

    # pick another plan B: the table gives the difference of these two
    _pick(page, "compare-b", "LESCEA")
    expect(status).to_contain_text("B: baseline: LESCEA", timeout=T)
    expect(_cell(page, "compare-metrics", 0, "b")).to_have_text(format_bytes(peak["lescea"]),
                                                               timeout=T)
    want = signed_bytes(peak["lescea"] - peak["eager"])
    expect(_cell(page, "compare-metrics", 0, "diff")).to_contain_text(want)
    expect(_cell(page, "compare-metrics", 4, "diff")).to_have_text("+0")  # no re-runs
    # the HTML report adds the comparison shown: its curves and tables, A and B named
    with page.expect_download(timeout=T) as dl:
        page.click("#export-html-btn")
    dl.value.save_as(tmp_path / "report.html")
    report = (tmp_path / "report.html").read_text()
    assert report.count("Plotly.newPlot") == 7  # the six views and the compare curves
    assert ("Largest lifetime changes (A: baseline: eager (program order) · B: baseline: "
            "LESCEA") in report
