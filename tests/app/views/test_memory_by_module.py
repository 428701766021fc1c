"""Module names in every view and the per-module memory view (table, icicle, selection)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dash.exceptions import PreventUpdate

from app.analysis import modules as module_paths
from app.analysis import settings
from app.core import state
from app.services import plan_data
from app.services import planning as planning_service
from app.views.curves import data as curves_data
from app.views.explain import data as explain_data
from app.views.explain import model as explain_model
from app.views.export import data as export_data
from app.views.layouts import data as layouts_data
from app.views.linking import data as linking_data
from app.views.live import data as live_data
from app.views.memory_by_module import data as modules_data
from app.views.memory_by_module import figure as modules_figure
from app.views.memory_by_module import model as modules_model
from app.views.memory_by_module import view as modules_view
from app.views.search import model as search_model
from app.views.timeline import data as timeline_data
from roam_core.formats.graph_io import load_graph
from roam_core.model.samples import tiny_train_step
from roam_core.oracle.attribution import bytes_at_peak_by_module, in_module, tensor_module
from tests.app.helpers import (
    trace_values,
)

SAMPLE = Path(__file__).resolve().parents[3] / "sample_graphs" / "tiny_gpt-b2-t32-steady.json.gz"


@pytest.fixture
def planned(cache_dir: Path) -> tuple[str, str]:
    key = state.put_graph(load_graph(SAMPLE))
    plan = planning_service.plan_graph(key, settings.PlanSettings(method="roam", time_limit_s=2.0))
    return key, plan


def test_module_view_rows_add_up_to_both_peaks(planned) -> None:
    key, plan = planned
    g = state.get_graph(key)
    p = state.get_plan(plan)
    before = bytes_at_peak_by_module(g, plan_data.before_data(key, "eager").order)
    after = bytes_at_peak_by_module(g, p.order, alignment_bytes=p.alignment_bytes)
    for depth in (1, 2, "full"):
        rows, fig, title = modules_data.module_view(key, plan, "eager", depth, "after")
        mib = 2**20
        assert sum(r["after_mib"] for r in rows) == pytest.approx(after.total_bytes / mib,
                                                                   abs=1e-3 * len(rows))
        assert sum(r["before_mib"] for r in rows) == pytest.approx(before.total_bytes / mib,
                                                                    abs=1e-3 * len(rows))
        assert "by module" in title
    rows, fig, _ = modules_data.module_view(key, plan, "eager", 2, "after")
    mods = {r["module"] for r in rows}
    assert {"h.0", "h.1", "wte"} <= mods
    assert all(in_module(g.op(o).module, "h.0") for o in module_paths.module_members(g, "h.0")[0])
    kinds = sum(r[f"{k}_mib"] for r in rows for k in (*modules_model.MODULE_KINDS, "other"))
    assert kinds == pytest.approx(after.total_bytes / 2**20, abs=1e-2)
    # the icicle's root is the peak, each node its subtree
    ice = fig.data[0]
    assert ice.type == "icicle"
    vals = dict(zip(ice.ids, ice.values, strict=True))
    assert vals["all"] == after.total_bytes
    assert vals["h"] >= vals["h.0"] + vals["h.1"]
    # the baseline side swaps whose kinds are shown, not what the columns mean
    rows_b, fig_b, _ = modules_data.module_view(key, plan, "eager", 2, "before")
    by = {r["module"]: r for r in rows}
    for r in rows_b:
        assert r["before_mib"] == pytest.approx(by[r["module"]]["before_mib"])
        assert r["after_mib"] == pytest.approx(by[r["module"]]["after_mib"])
    assert dict(zip(fig_b.data[0].ids, fig_b.data[0].values, strict=True))["all"] == \
        before.total_bytes


@pytest.mark.slow
def test_selecting_a_module_highlights_it_everywhere(planned) -> None:
    key, plan = planned
    g = state.get_graph(key)
    sel = {"kind": "module", "id": "h.0"}
    ops, _tensors = module_paths.module_members(g, "h.0")
    assert ops
    assert all(in_module(g.op(o).module, "h.0") for o in ops)
    tl = timeline_data.timeline_fig(key, plan, "eager", None, sel)
    marks = [t for t in tl.data if t.name == "selected module"]
    assert len(marks) == 1
    lay, base = layouts_data.layout_figures(key, plan, "eager", None, sel)
    for f in (lay, base):
        assert any(t.name == "selected module" for t in f.data)
    # no module selected: no marks
    tl0 = timeline_data.timeline_fig(key, plan, "eager", None, None)
    assert not any(t.name == "selected module" for t in tl0.data)
    curves = curves_data.curves_figure(key, plan, "eager", None, None, sel)
    names = [t.name for t in curves.data]
    assert "module h.0 (before)" in names
    assert "module h.0 (planned)" in names
    total = next(t for t in curves.data if t.name and t.name.startswith("planned"))
    mine = next(t for t in curves.data if t.name == "module h.0 (planned)")
    assert 0 < trace_values(mine.y).max() <= trace_values(total.y).max()
    assert not any((t.name or "").startswith("module") for t in
                   curves_data.curves_figure(key, plan, "eager", None, None, None).data)
    ex = explain_data.explain_sections(key, plan, "eager", sel)
    assert ex[0].title == "module h.0"
    assert any("live at the planned" in s.title for s in ex)
    assert linking_data.range_of(key, plan, "eager", "module", "h.0") is not None
    style = modules_data.module_highlight_style(sel)
    assert 'contains "h.0."' in style[0]["if"]["filter_query"]
    assert modules_data.module_highlight_style(None) == []
    _, ice, _ = modules_data.module_view(key, plan, "eager", 3, "after", sel)
    widths = dict(zip(ice.data[0].ids, ice.data[0].marker.line.width, strict=True))
    assert widths["h.0"] == 3


@pytest.mark.slow
def test_names_in_hover_live_table_search_and_explain(planned) -> None:
    key, plan = planned
    g = state.get_graph(key)
    rows, _ = live_data.live_table(key, plan, "eager", None)
    assert all("name" in r and "module" in r for r in rows)
    assert any(r["module"].startswith("h.") for r in rows)
    # hover of the timeline names the module, hover of the layout the parameter name
    tl = timeline_data.timeline_fig(key, plan, "eager", None, None)
    assert any("module h.0" in h for h in tl.data[0].hovertext[-1])
    lay, _ = layouts_data.layout_figures(key, plan, "eager", None, None)
    hover = [t for t in lay.data if t.name == "tensors"][-1]  # the markers (grid first)
    assert any("wte.weight" in h for h in hover.hovertext)
    # search by module path and by parameter name
    hits = search_model.search(g, "h.1.c_attn")
    assert ("module", "h.1.c_attn", hits[0][2]) == hits[0]
    assert any(k == "op" for k, _, _ in hits)
    w = next(t for t in g.tensors.values() if t.name == "h.0.c_fc.weight")
    assert ("tensor", w.id) in [h[:2] for h in search_model.search(g, "c_fc.weight$")]
    assert any(h[0] == "tensor" and h[2].startswith("tensor h.0.c_fc.weight.exp_avg (")
               for h in search_model.search(g, "exp_avg"))
    # explain names the op's module and the tensor's name
    op = next(o for o in g.ops if o.module == "h.0.c_fc")
    sec = explain_model.explain_op(g, state.get_plan(plan), g.op_ids, op.id)
    assert "module h.0.c_fc" in sec[0].lines
    sec = explain_model.explain_tensor(g, state.get_plan(plan), g.op_ids, w.id)
    assert sec[0].lines[0] == "name h.0.c_fc.weight"
    assert tensor_module(g, w) == "h.0.c_fc"


def test_module_pick_callback() -> None:
    assert modules_view.on_module_pick({"row": 0, "column": 0, "row_id": "h.0"}) == {
        "kind": "module", "id": "h.0"}
    assert modules_view.on_module_pick({"row_id": "(top level)"}) == {"kind": "module", "id": ""}
    with pytest.raises(PreventUpdate):
        modules_view.on_module_pick(None)
    assert '"(top level)"' in modules_view.ICICLE_PICK_JS  # the icicle's top-level node id


def test_graph_without_modules_says_so(cache_dir: Path) -> None:

    key = state.put_graph(tiny_train_step())
    rows, _fig, title = modules_data.module_view(key, None, "eager", 2, "after")
    assert "no module paths" in title
    assert [r["module"] for r in rows] == [module_paths.TOP_LEVEL]


def test_icicle_of_nothing_is_an_empty_figure() -> None:
    fig = modules_figure.module_icicle_figure({})
    assert "no bytes" in fig.layout.annotations[0].text


@pytest.mark.slow
def test_report_has_the_module_icicle_and_named_live_rows(planned) -> None:
    key, plan = planned
    figs = export_data.report_figures(key, plan, "eager")
    ice = figs["modules"].data[0]
    assert ice.type == "icicle"
    assert "h.0" in ice.ids
    html = export_data.export_payload("html", key, plan, "eager")["content"]
    assert "Bytes at the peak by module" in html
    assert "h.0.c_fc.weight" in html
    assert "<td><b>module</b></td>" in html
