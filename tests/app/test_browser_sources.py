"""Browser: source lines of a traced zoo model in Explain and the live table (Playwright,
Debian chromium).

A forward op shows the user-code line that made it; a backward op shows its forward op's
line (``Op.source``, recorded by the tracer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roam_core.formats.graph_io import dumps_graph
from roam_core.model.graph import Phase
from tests.app import test_browser as _tb
from tests.app.helpers import click_until
from tests.app.test_browser import _upload, _views_rendered

pytestmark = pytest.mark.browser
page_factory = _tb.page_factory  # the shared fixture (console errors fail the test)
T = 60_000  # ms; generous for a shared 2-core machine


@pytest.fixture(autouse=True)
def _expect() -> None:
    global expect
    expect = _tb.expect = pytest.importorskip("playwright.sync_api").expect  # its helpers too


expect: Any = None


def _explain_op(page: Any, op_id: str) -> Any:
    """Search for ``op_id`` and click its hit: Explain shows the op."""
    page.fill("#search-input", op_id)
    page.press("#search-input", "Enter")
    panel = page.locator("#explain-panel")
    # the previous query's hits can still be on the page (``bmm`` lists ``bmm_10`` too)
    click_until(page, f"#search-results button >> text=/^op {op_id} \\(/",
                lambda ms: expect(panel).to_contain_text(f"op {op_id}", timeout=ms))
    return panel


def test_source_lines_in_explain_and_the_live_table(page_factory: Any,
                                                    tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from roam_core.zoo.steps import trace_zoo

    graph = trace_zoo("tiny_gpt", 1, attention="math").graph
    fwd = next(o for o in graph.ops
               if o.phase is Phase.FORWARD and o.target == "aten.bmm.default")
    bwd = next(o for o in graph.ops if o.phase is Phase.BACKWARD and o.module == fwd.module
               and o.target == "aten.bmm.default" and o.source == fwd.source)
    assert fwd.source.startswith("roam_core/zoo/transformer.py:")
    assert fwd.source.endswith(" in attend")
    path = tmp_path / f"{graph.name}.json"
    path.write_bytes(dumps_graph(graph))

    page = page_factory()
    _views_rendered(page)
    page.fill("#plan-time-limit", "1.5")  # the upload is planned on load: quickly
    page.press("#plan-time-limit", "Enter")
    _upload(page, "#graph-upload", path)
    expect(page.locator("#load-status")).to_contain_text(f"loaded {graph.name}", timeout=T)
    expect(page.locator("#summary-card")).to_contain_text(graph.name, timeout=T)
    _views_rendered(page)

    # a forward op: the line of the model code that ran it
    panel = _explain_op(page, fwd.id)
    expect(panel).to_contain_text(f"source {fwd.source}", timeout=T)
    # a backward op: its forward op's line, not autograd's
    panel = _explain_op(page, bwd.id)
    expect(panel).to_contain_text(f"op {bwd.id}", timeout=T)
    expect(panel).to_contain_text(f"source {fwd.source}")

    # the live table: the line of the op that made each tensor (sorted: lines first)
    header = page.locator("#live-table th[data-dash-column=source]").first
    header.locator(".column-header--sort").click()
    header.locator(".column-header--sort").click()
    first = page.locator("#live-table td[data-dash-column=source]").first
    expect(first).to_contain_text("roam_core/zoo/", timeout=T)
    expect(first).to_contain_text(" in ")
