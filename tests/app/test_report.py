"""``roam report GRAPH PLAN -o REPORT.html``: the app's report from the CLI, tree not blank."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from roam_core.cli import main
from roam_core.formats.graph_io import dumps_graph
from roam_core.formats.plan_io import dumps_plan
from roam_core.model.samples import diamond, tiny_train_step


def _figures(html_text: str) -> list[dict[str, Any]]:
    """Every ``Plotly.newPlot(id, data, layout, config)`` data array embedded in the page."""
    out = []
    for m in re.finditer(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\])\s*,\s*\{', html_text,
                         re.S):
        out.append({"data": json.loads(m.group(1))})
    return out


def _plan_files(tmp_path: Path) -> tuple[Path, Path, Any]:
    from app.analysis.planner import run_planner
    from app.analysis.settings import PlanSettings

    graph = tiny_train_step()
    plan = run_planner(graph, PlanSettings(method="roam", time_limit_s=2.0, node_limit=3))
    assert plan.task_tree  # a tree with sub-tasks
    assert plan.task_tree["children"]
    gp, pp = tmp_path / "g.json", tmp_path / "p.plan.json"
    gp.write_bytes(dumps_graph(graph))
    pp.write_text(dumps_plan(plan))
    return gp, pp, plan


@pytest.mark.slow
def test_report_command_writes_a_report_with_a_drawn_tree(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    gp, pp, plan = _plan_files(tmp_path)
    out = tmp_path / "r.html"
    assert main(["report", str(gp), str(pp), "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    text = out.read_text()
    assert text.count("window.PlotlyConfig") == 1  # plotly.js inlined once: works offline
    ice = [t for f in _figures(text) for t in f["data"] if t.get("type") == "icicle"
           and "root" in t["ids"]]  # the task tree (the module icicle is another)
    assert len(ice) == 1
    ids, parents, values = ice[0]["ids"], ice[0]["parents"], ice[0]["values"]
    value = dict(zip(ids, values))
    for i, p in zip(ids, parents):  # "total" branch values: a parent covers its children
        if p:
            assert value[p] >= value[i] > 0 or value[i] == 0
    kids: dict[str, int] = {}
    for i, p in zip(ids, parents):
        if p:
            kids[p] = kids.get(p, 0) + value[i]
    assert all(value[p] >= s for p, s in kids.items())
    assert value["root"] == len(plan.order)  # every op is in exactly one sub-task


def test_report_command_refuses_a_plan_for_another_graph(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    _, pp, _ = _plan_files(tmp_path)
    other = tmp_path / "d.json"
    other.write_bytes(dumps_graph(diamond()))
    assert main(["report", str(other), str(pp), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "plan was made for graph 'tiny_train_step', not for this graph 'diamond'" in err
    assert not (tmp_path / "x.html").exists()


@pytest.mark.slow
def test_tree_png_is_not_blank(tmp_path: Path) -> None:
    """The tree PNG (kaleido) has painted pixels besides the background."""
    pytest.importorskip("kaleido")
    import io
    import shutil

    if shutil.which("chromium") is None:
        pytest.skip("kaleido needs chromium")
    import numpy as np
    from PIL import Image

    from app.views.export.data import figure_png
    from app.views.tree.figure import task_tree_figure

    _, _, plan = _plan_files(tmp_path)
    png = figure_png(task_tree_figure(plan.task_tree), width_px=600, height_px=300)
    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    body = img[60:-20, 20:-20]  # below the title
    assert (np.abs(body - 255).sum(axis=2) > 30).mean() > 0.3  # mostly painted tiles


def test_a_png_export_kaleido_cannot_render_is_one_roam_error() -> None:
    """A render that fails twice (kaleido or chromium gone) is one clear error, after one
    retry: the first failure under load is kaleido's page load, and the retry works."""
    from app.views.export.data import figure_png
    from roam_core.base.errors import RoamError

    class Flaky:
        calls = 0

        def to_image(self, **kw: object) -> bytes:
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise ValueError("kaleido_scopes is not defined")
            return b"png"

    assert figure_png(Flaky(), width_px=10, height_px=10) == b"png"  # type: ignore[arg-type]  # a stand-in for go.Figure
    assert Flaky.calls == 2

    class Gone:
        def to_image(self, **kw: object) -> bytes:
            raise RuntimeError("chromium not found")

    with pytest.raises(RoamError, match=r"PNG export failed.*chromium not found"):
        figure_png(Gone(), width_px=10, height_px=10)  # type: ignore[arg-type]  # a stand-in
