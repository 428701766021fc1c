"""Module names in the views and the per-module memory view (services, figures, analysis)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from app import analysis, callbacks, figures, planning, services, state
from roam_core.formats.graph_io import load_graph
from roam_core.oracle.attribution import bytes_at_peak_by_module, in_module, tensor_module

SAMPLE = Path(__file__).resolve().parents[2] / "sample_graphs" / "tiny_gpt-b2-t32-steady.json.gz"


@pytest.fixture
def planned(cache_dir: Path) -> tuple[str, str]:
    key = state.put_graph(load_graph(SAMPLE))
    plan = services.plan_graph(key, planning.PlanSettings(method="roam", time_limit_s=2.0))
    return key, plan


def test_module_view_rows_add_up_to_both_peaks(planned) -> None:
    key, plan = planned
    g = state.get_graph(key)
    p = state.get_plan(plan)
    before = bytes_at_peak_by_module(g, services.before_data(key, "eager").order)
    after = bytes_at_peak_by_module(g, p.order, alignment_bytes=p.alignment_bytes)
    for depth in (1, 2, "full"):
        rows, fig, title = services.module_view(key, plan, "eager", depth, "after")
        mib = 2**20
        assert sum(r["after_mib"] for r in rows) == pytest.approx(after.total_bytes / mib,
                                                                   abs=1e-3 * len(rows))
        assert sum(r["before_mib"] for r in rows) == pytest.approx(before.total_bytes / mib,
                                                                    abs=1e-3 * len(rows))
        assert "by module" in title
    rows, fig, _ = services.module_view(key, plan, "eager", 2, "after")
    mods = {r["module"] for r in rows}
    assert {"h.0", "h.1", "wte"} <= mods
    assert all(in_module(g.op(o).module, "h.0") for o in analysis.module_members(g, "h.0")[0])
    kinds = sum(r[f"{k}_mib"] for r in rows for k in (*analysis.MODULE_KINDS, "other"))
    assert kinds == pytest.approx(after.total_bytes / 2**20, abs=1e-2)
    # the icicle's root is the peak, each node its subtree
    ice = fig.data[0]
    assert ice.type == "icicle"
    vals = dict(zip(ice.ids, ice.values, strict=True))
    assert vals["all"] == after.total_bytes
    assert vals["h"] >= vals["h.0"] + vals["h.1"]
    # the baseline side swaps whose kinds are shown, not what the columns mean
    rows_b, fig_b, _ = services.module_view(key, plan, "eager", 2, "before")
    by = {r["module"]: r for r in rows}
    for r in rows_b:
        assert r["before_mib"] == pytest.approx(by[r["module"]]["before_mib"])
        assert r["after_mib"] == pytest.approx(by[r["module"]]["after_mib"])
    assert dict(zip(fig_b.data[0].ids, fig_b.data[0].values, strict=True))["all"] == \
        before.total_bytes


def test_selecting_a_module_highlights_it_everywhere(planned) -> None:
    key, plan = planned
    g = state.get_graph(key)
    sel = {"kind": "module", "id": "h.0"}
    ops, _tensors = analysis.module_members(g, "h.0")
    assert ops
    assert all(in_module(g.op(o).module, "h.0") for o in ops)
    tl = services.timeline_fig(key, plan, "eager", None, sel)
    marks = [t for t in tl.data if t.name == "selected module"]
    assert len(marks) == 1
    lay, base = services.layout_figures(key, plan, "eager", None, sel)
    for f in (lay, base):
        assert any(t.name == "selected module" for t in f.data)
    # no module selected: no marks
    tl0 = services.timeline_fig(key, plan, "eager", None, None)
    assert not any(t.name == "selected module" for t in tl0.data)
    curves = services.curves_figure(key, plan, "eager", None, None, sel)
    names = [t.name for t in curves.data]
    assert "module h.0 (before)" in names
    assert "module h.0 (planned)" in names
    total = next(t for t in curves.data if t.name and t.name.startswith("planned"))
    mine = next(t for t in curves.data if t.name == "module h.0 (planned)")
    assert 0 < max(mine.y) <= max(total.y)
    assert not any((t.name or "").startswith("module") for t in
                   services.curves_figure(key, plan, "eager", None, None, None).data)
    ex = services.explain_sections(key, plan, "eager", sel)
    assert ex[0].title == "module h.0"
    assert any("live at the planned" in s.title for s in ex)
    assert services.range_of(key, plan, "eager", "module", "h.0") is not None
    style = services.module_highlight_style(sel)
    assert 'contains "h.0."' in style[0]["if"]["filter_query"]
    assert services.module_highlight_style(None) == []
    _, ice, _ = services.module_view(key, plan, "eager", 3, "after", sel)
    widths = dict(zip(ice.data[0].ids, ice.data[0].marker.line.width, strict=True))
    assert widths["h.0"] == 3


def test_names_in_hover_live_table_search_and_explain(planned) -> None:
    key, plan = planned
    g = state.get_graph(key)
    rows, _ = services.live_table(key, plan, "eager", None)
    assert all("name" in r and "module" in r for r in rows)
    assert any(r["module"].startswith("h.") for r in rows)
    # hover of the timeline names the module, hover of the layout the parameter name
    tl = services.timeline_fig(key, plan, "eager", None, None)
    assert any("module h.0" in h for h in tl.data[0].hovertext[-1])
    lay, _ = services.layout_figures(key, plan, "eager", None, None)
    hover = next(t for t in lay.data if t.name == "tensors")
    assert any("wte.weight" in h for h in hover.hovertext)
    # search by module path and by parameter name
    hits = analysis.search(g, "h.1.c_attn")
    assert ("module", "h.1.c_attn", hits[0][2]) == hits[0]
    assert any(k == "op" for k, _, _ in hits)
    w = next(t for t in g.tensors.values() if t.name == "h.0.c_fc.weight")
    assert ("tensor", w.id) in [h[:2] for h in analysis.search(g, "c_fc.weight$")]
    assert any(h[0] == "tensor" and h[2].startswith("tensor h.0.c_fc.weight.exp_avg (")
               for h in analysis.search(g, "exp_avg"))
    # explain names the op's module and the tensor's name
    op = next(o for o in g.ops if o.module == "h.0.c_fc")
    sec = analysis.explain_op(g, state.get_plan(plan), g.op_ids, op.id)
    assert "module h.0.c_fc" in sec[0].lines
    sec = analysis.explain_tensor(g, state.get_plan(plan), g.op_ids, w.id)
    assert sec[0].lines[0] == "name h.0.c_fc.weight"
    assert tensor_module(g, w) == "h.0.c_fc"


def test_module_pick_callback(planned, monkeypatch) -> None:
    class Ctx:
        triggered_id = "module-table"
        triggered: ClassVar = [{"value": {"row": 0, "column": 0, "row_id": "h.0"}}]

    monkeypatch.setattr(callbacks.dash, "ctx", Ctx)
    assert callbacks.on_module_pick({"row_id": "h.0"}, None) == {"kind": "module", "id": "h.0"}
    Ctx.triggered = [{"value": {"row_id": "(top level)"}}]
    assert callbacks.on_module_pick(None, None) == {"kind": "module", "id": ""}
    Ctx.triggered_id = "module-icicle"
    Ctx.triggered = [{"value": {"points": [{"id": "all"}]}}]
    assert callbacks.on_module_pick(None, None) is None


def test_graph_without_modules_says_so(cache_dir: Path) -> None:
    from roam_core.model.samples import tiny_train_step

    key = state.put_graph(tiny_train_step())
    rows, _fig, title = services.module_view(key, None, "eager", 2, "after")
    assert "no module paths" in title
    assert [r["module"] for r in rows] == [analysis.TOP_LEVEL]


def test_icicle_of_nothing_is_an_empty_figure() -> None:
    fig = figures.module_icicle_figure({})
    assert "no bytes" in fig.layout.annotations[0].text


def test_report_has_the_module_icicle_and_named_live_rows(planned) -> None:
    key, plan = planned
    figs = services.report_figures(key, plan, "eager")
    ice = figs["modules"].data[0]
    assert ice.type == "icicle"
    assert "h.0" in ice.ids
    html = services.export_payload("html", key, plan, "eager")["content"]
    assert "Bytes at the peak by module" in html
    assert "h.0.c_fc.weight" in html
    assert "<td><b>module</b></td>" in html
