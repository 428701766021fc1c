"""The Export / import card: payloads, the offline report, plan import checks."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Any

import dash
import pytest

from app.core import ids, state
from app.views.export import data as export_data
from app.views.export import view as export_view
from roam_core.base.errors import PlanFormatError, PlanInvalidError
from roam_core.formats import plan_io
from roam_core.model.samples import diamond
from tests.app.helpers import (
    data_url,
    planned_with_tree,
    put_planned,
    run,
)


def test_export_and_import(planned: dict[str, Any]) -> None:
    g, pk = planned["graph"], planned["plan"]
    payload, msg = run(export_view.on_export, ids.EXPORT_JSON, 1, 1, None, None, None, g, pk,
                       "eager", "curves")
    assert msg.startswith("exported")
    assert payload["filename"].endswith(".plan.json")
    data, msg, _ = export_view.on_plan_upload(data_url(payload["content"].encode()), "p.json", g)
    assert data["graph"] == g["key"]
    assert "valid for this graph" in msg
    data, msg, _ = export_view.on_plan_upload(data_url(b"garbage"), "g.json", g)
    assert data is dash.no_update
    assert msg.startswith("Import failed: g.json:")
    _, msg = run(export_view.on_export, ids.EXPORT_CSV, 1, None, 1, None, None, g, None,
                 "eager", "curves")
    assert msg == "Export failed: RoamError: nothing to export: plan the graph first"


def test_import_plan_checks_fingerprint_and_validity(cache_dir: Path) -> None:
    graph, plan = planned_with_tree()
    gk = state.put_graph(graph)
    text = plan_io.dumps_plan(plan)
    key = export_data.import_plan(data_url(text.encode()), "p.json", gk, 2**20)
    assert state.get_plan(key).task_tree["id"] == "root"
    other = state.put_graph(diamond())
    with pytest.raises(PlanFormatError, match=r"p\.json: .*"):
        export_data.import_plan(data_url(text.encode()), "p.json", other, 2**20)
    bad = dataclasses.replace(plan, order=tuple(reversed(plan.order)))
    with pytest.raises(PlanInvalidError, match="plan is invalid"):
        export_data.import_plan(data_url(plan_io.dumps_plan(bad).encode()), "bad.json", gk, 2**20)
    with pytest.raises(PlanFormatError):
        export_data.import_plan(data_url(b"{}"), "empty.json", gk, 2**20)


@pytest.mark.slow
def test_exports(cache_dir: Path) -> None:
    gk, pk = put_planned()
    js = export_data.export_payload("json", gk, pk, "eager")
    assert js["filename"].endswith(".plan.json")
    assert plan_io.loads_plan(js["content"], state.get_graph(gk)).order == \
        state.get_plan(pk).order
    csv = export_data.export_payload("csv", gk, pk, "eager")["content"].splitlines()
    assert csv[0].startswith("id,lower,upper,size,")
    assert len(csv) > 1
    html = export_data.export_payload("html", gk, pk, "eager")["content"]
    assert html.count("window.PlotlyConfig") == 1  # plotly.js inlined once
    assert html.count("Plotly.newPlot") == 6  # curves, timeline, 2 layouts, tree, modules
    assert "Live at step" in html
    assert "<td>relu</td>" in html
    assert "<scriptsrc=" not in html.replace(" ", "")  # nothing fetched from a CDN
    with pytest.raises(Exception, match="plan the graph first"):
        export_data.export_payload("json", gk, None, "eager")


@pytest.mark.browser
def test_png_export_uses_kaleido_and_chromium(cache_dir: Path) -> None:
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("/usr/bin/chromium is missing: kaleido needs it for PNG export")
    gk, pk = put_planned()
    payload = export_data.export_payload("png", gk, pk, "eager", "layout")
    assert payload["base64"] is True
    assert payload["filename"].endswith("-layout.png")
    assert base64.b64decode(payload["content"])[:8] == b"\x89PNG\r\n\x1a\n"
