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
    planned_with_tree,
    put_planned,
    run,
    uploaded,
)


def test_export_and_import(planned: dict[str, Any]) -> None:
    g, pk = planned["graph"], planned["plan"]
    payload, msg = run(export_view.on_export, ids.EXPORT_JSON, 1, 1, None, None, None, g, pk,
                       "eager", "curves")
    assert msg.startswith("exported")
    assert payload["filename"].endswith(".plan.json")
    data, msg, status = export_view.on_plan_upload(uploaded(payload["content"].encode(),
                                                            "p.json"), g)
    assert data["graph"] == g["key"]
    assert "valid for this graph" in msg
    assert status.startswith("showing the imported plan p.json")  # no stale "planned with"
    data, msg, status = export_view.on_plan_upload(uploaded(b"garbage", "g.json"), g)
    assert status is dash.no_update
    assert data is dash.no_update
    assert msg.startswith("Import failed: g.json:")
    _, msg = run(export_view.on_export, ids.EXPORT_CSV, 1, None, 1, None, None, g, None,
                 "eager", "curves")
    assert msg == "Export failed: RoamError: nothing to export: plan the graph first"


def test_import_plan_checks_fingerprint_and_validity(cache_dir: Path) -> None:
    graph, plan = planned_with_tree()
    gk = state.put_graph(graph)
    text = plan_io.dumps_plan(plan)
    key = export_data.import_plan(text.encode(), "p.json", gk)
    assert state.get_plan(key).task_tree["id"] == "root"
    other = state.put_graph(diamond())
    with pytest.raises(PlanFormatError, match=r"p\.json: .*"):
        export_data.import_plan(text.encode(), "p.json", other)
    bad = dataclasses.replace(plan, order=tuple(reversed(plan.order)))
    with pytest.raises(PlanInvalidError, match="plan is invalid"):
        export_data.import_plan(plan_io.dumps_plan(bad).encode(), "bad.json", gk)
    with pytest.raises(PlanFormatError):
        export_data.import_plan(b"{}", "empty.json", gk)


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


def _compared(two: dict[str, Any]) -> dict[str, str]:
    """The Compare card's store after comparing the eager baseline (A) with roam (B)."""
    from app.views.compare import data as compare_data

    return compare_data.compared_ref(two["gk"], two["ka"], "baseline: eager (program order)",
                                     two["kb"], "plan shown: roam")


@pytest.fixture
def two_plans(cache_dir: Path) -> dict[str, Any]:
    """A stored graph with two plans: the eager baseline and roam's."""
    from app.analysis.settings import PlanSettings
    from app.views.compare import data as compare_data

    gk, kb = put_planned()
    ka = compare_data.resolve_choice(gk, "base:eager", PlanSettings(time_limit_s=1.0))
    return {"gk": gk, "ka": ka, "kb": kb}


@pytest.mark.slow
def test_the_report_has_the_compare_section_when_two_plans_are_compared(
        two_plans: dict[str, Any]) -> None:
    gk, kb = two_plans["gk"], two_plans["kb"]
    plain = export_data.export_payload("html", gk, kb, "eager")["content"]
    assert "Compare two plans" not in plain  # nothing compared: no section
    ref = _compared(two_plans)
    html = export_data.export_payload("html", gk, kb, "eager", compared=ref)["content"]
    assert html.count("Plotly.newPlot") == 7  # the six views and the compare curves
    assert "Compare two plans: memory of plan A and plan B" in html
    names = "A: baseline: eager (program order) · B: plan shown: roam"
    assert f"Compare two plans ({names}): B − A" in html
    assert f"Largest lifetime changes ({names})" in html
    assert "<td>planned peak</td>" in html
    assert "B: plan shown: roam" in html.split("Compare two plans: memory")[1]  # the legend
    # a comparison of another graph (a stale store) is left out
    other = {**ref, "graph": "another"}
    assert "Compare two plans" not in export_data.export_payload(
        "html", gk, kb, "eager", compared=other)["content"]


def test_the_png_export_draws_the_compare_figure(two_plans: dict[str, Any],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[Any] = []
    monkeypatch.setattr(export_data, "figure_png",
                        lambda fig, **_: drawn.append(fig) or b"png")
    gk, kb = two_plans["gk"], two_plans["kb"]
    assert "compare" in export_view.PNG_FIGURES
    payload, msg = run(export_view.on_export, ids.EXPORT_PNG, 1, None, None, None, 1,
                       {"key": gk, "name": "g"}, kb, "eager", "compare", _compared(two_plans))
    assert msg == f"exported {payload['filename']}"
    assert payload["filename"].endswith("-compare.png")
    names = [t.name for t in drawn[0].data if t.showlegend is not False]
    assert names[:2] == ["A: baseline: eager (program order)", "B: plan shown: roam"]
    with pytest.raises(Exception, match="open \"Compare two plans\""):
        export_data.export_payload("png", gk, kb, "eager", "compare")


@pytest.mark.slow
@pytest.mark.browser
def test_png_export_of_the_compare_figure_renders_with_kaleido(
        two_plans: dict[str, Any]) -> None:
    """The compare figure through the real kaleido + chromium render (not a stub): a PNG
    with both plans' curves painted (colours besides the white and grey of the axes)."""
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("/usr/bin/chromium is missing: kaleido needs it for PNG export")
    import io

    import numpy as np
    from PIL import Image

    gk, kb = two_plans["gk"], two_plans["kb"]
    payload = export_data.export_payload("png", gk, kb, "eager", "compare",
                                         compared=_compared(two_plans))
    assert payload["filename"].endswith("-compare.png")
    raw = base64.b64decode(payload["content"])
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    img = np.asarray(Image.open(io.BytesIO(raw)).convert("RGB")).astype(int)
    assert img.shape[0] > 200
    assert img.shape[1] > 400
    # a coloured pixel: its channels differ (white, black and greys have equal channels)
    coloured = (img.max(axis=2) - img.min(axis=2)) > 60
    assert coloured.sum() > 500, "the compare PNG has no curves drawn"
