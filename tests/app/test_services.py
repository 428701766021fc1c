"""Services and the cache: loading, planning cache, import checks, exports, linking."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from app import planning, services, state
from roam_core.base.errors import GraphError, PlanFormatError, PlanInvalidError
from roam_core.formats import plan_io
from roam_core.formats.graph_io import dumps_graph
from roam_core.model.samples import chain3, diamond, tiny_train_step
from tests.app.helpers import planned_with_tree


def _data_url(raw: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(raw).decode()


def test_graph_cache_round_trip(cache_dir: Path) -> None:
    key = state.put_graph(diamond())
    assert key == state.put_graph(diamond()) == state.graph_key_of(diamond())
    assert state.get_graph(key).fingerprint() == diamond().fingerprint()
    with pytest.raises(GraphError, match="no longer in the cache"):
        state.get_graph("g-missing")


def test_private_cache_is_this_threads_only(cache_dir: Path, tmp_path: Path) -> None:
    """A report's private cache never moves another thread (a serving app's requests) off
    the shared cache, and the private one is closed afterwards."""
    import threading

    shared = state.put_graph(chain3())
    seen: list[Path] = []
    inside, leave = threading.Event(), threading.Event()

    def report_thread() -> None:
        with state.private_cache(tmp_path / "private") as d:
            assert state.cache_dir() == d
            state.put_graph(diamond())
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=report_thread)
    t.start()
    assert inside.wait(10)
    seen.append(state.cache_dir())  # this thread, while the other is inside
    assert state.get_json("absent", "default") == "default"
    assert shared in state.cache()
    assert state.graph_key_of(diamond()) not in state.cache()
    leave.set()
    t.join(10)
    assert seen == [cache_dir]
    assert state.cache_dir() == cache_dir


def test_sample_options_and_load_choice(cache_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "x.json.gz").write_bytes(dumps_graph(chain3(), compress=True))
    opts = services.sample_options(tmp_path)
    assert opts[0]["value"] == "file:x.json.gz"
    assert "hand:diamond" in [o["value"] for o in opts]
    key = services.load_choice("file:x.json.gz", tmp_path)
    assert state.get_graph(key).name == "chain3"
    with pytest.raises(GraphError, match="unknown sample"):
        services.load_choice("file:../etc/passwd", tmp_path)


@pytest.mark.parametrize("compress", [False, True])
def test_upload_json_and_gzip(cache_dir: Path, compress: bool) -> None:
    key = services.graph_from_upload(_data_url(dumps_graph(diamond(), compress=compress)),
                                     "d.json", 2**20)
    assert state.get_graph(key).name == "diamond"


@pytest.mark.parametrize(("raw", "match"), [
    (b"{not json", "d.json: graph file is not valid JSON"),
    (gzip.compress(b"[1, 2]"), "d.json: "),
    (json.dumps({"format": "roam-graph", "schema_version": 1, "ops": [
        {"id": "a", "target": "x", "phase": "forward", "inputs": ["ghost"], "outputs": []}],
        "tensors": []}).encode(), "ghost"),
])
def test_upload_errors_name_the_problem(cache_dir: Path, raw: bytes, match: str) -> None:
    with pytest.raises(GraphError, match=match):
        services.graph_from_upload(_data_url(raw), "d.json", 2**20)


def test_upload_size_cap(cache_dir: Path) -> None:
    with pytest.raises(GraphError, match="larger than the upload limit"):
        services.graph_from_upload(_data_url(b"x" * 5000), "big.json", 1000)
    with pytest.raises(GraphError, match="empty"):
        services.graph_from_upload("", "e.json", 1000)


def test_plan_graph_is_cached_by_graph_and_settings(cache_dir: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = planning.run_planner

    def counting(graph, settings, progress=None):
        calls.append(settings)
        return real(graph, settings, progress)

    monkeypatch.setattr(planning, "run_planner", counting)
    gk = state.put_graph(tiny_train_step())
    s = planning.PlanSettings(time_limit_s=1.0)
    k1 = services.plan_graph(gk, s)
    assert services.plan_graph(gk, s) == k1 == services.cached_plan_key(gk, s)
    assert len(calls) == 1
    k2 = services.plan_graph(gk, dataclasses.replace(s, alignment_bytes=256))
    assert k2 != k1
    assert len(calls) == 2
    assert services.cached_plan_key(gk, dataclasses.replace(s, workers=3)) is None


def test_progress_values() -> None:
    from roam_core.planner import PlanProgress

    p = PlanProgress("order", 2, 5, 3 * 2**20, "sub-task t3")
    assert services.progress_values(p) == (
        2, 5, "order: 2/5 sub-tasks, best peak 3.00 MiB (sub-task t3)")


def test_import_plan_checks_fingerprint_and_validity(cache_dir: Path) -> None:
    graph, plan = planned_with_tree()
    gk = state.put_graph(graph)
    text = plan_io.dumps_plan(plan)
    key = services.import_plan(_data_url(text.encode()), "p.json", gk, 2**20)
    assert state.get_plan(key).task_tree["id"] == "root"
    other = state.put_graph(diamond())
    with pytest.raises(PlanFormatError, match=r"p\.json: .*"):
        services.import_plan(_data_url(text.encode()), "p.json", other, 2**20)
    bad = dataclasses.replace(plan, order=tuple(reversed(plan.order)))
    with pytest.raises(PlanInvalidError, match="plan is invalid"):
        services.import_plan(_data_url(plan_io.dumps_plan(bad).encode()), "bad.json", gk, 2**20)
    with pytest.raises(PlanFormatError):
        services.import_plan(_data_url(b"{}"), "empty.json", gk, 2**20)


def _planned(cache_dir: Path) -> tuple[str, str]:
    graph, plan = planned_with_tree()
    return state.put_graph(graph), state.put_plan(plan)


def test_exports(cache_dir: Path) -> None:
    gk, pk = _planned(cache_dir)
    js = services.export_payload("json", gk, pk, "eager")
    assert js["filename"].endswith(".plan.json")
    assert plan_io.loads_plan(js["content"], state.get_graph(gk)).order == \
        state.get_plan(pk).order
    csv = services.export_payload("csv", gk, pk, "eager")["content"].splitlines()
    assert csv[0].startswith("id,lower,upper,size,")
    assert len(csv) > 1
    html = services.export_payload("html", gk, pk, "eager")["content"]
    assert html.count("window.PlotlyConfig") == 1  # plotly.js inlined once
    assert html.count("Plotly.newPlot") == 6  # curves, timeline, 2 layouts, tree, modules
    assert "Live at step" in html
    assert "<td>relu</td>" in html
    assert "<scriptsrc=" not in html.replace(" ", "")  # nothing fetched from a CDN
    with pytest.raises(Exception, match="plan the graph first"):
        services.export_payload("json", gk, None, "eager")


def test_views_with_and_without_plan(cache_dir: Path) -> None:
    gk, pk = _planned(cache_dir)
    for plan_key in (None, pk):
        fig = services.curves_figure(gk, plan_key, "lescea", None, None)
        assert fig.data
        _lay, base = services.layout_figures(gk, plan_key, "eager", [0, 3], None)
        assert base.layout.meta["lod"] == "vector"
        rows, title = services.live_table(gk, plan_key, "eager", None)
        assert rows
        assert "(the peak)" in title
        assert services.summary_rows(gk, plan_key, "xla")[0][0] == "graph"
    sel = {"kind": "tensor", "id": "relu"}
    assert services.explain_sections(gk, pk, "eager", sel)[0].title == "tensor relu"
    assert services.explain_sections(gk, None, "eager", sel)[0].title == "Explain"


def test_linking_ranges(cache_dir: Path) -> None:
    gk, pk = _planned(cache_dir)
    assert services.range_from_relayout({"xaxis.range[0]": 1, "xaxis.range[1]": 4}) == [1, 4]
    assert services.range_from_relayout({"xaxis.autorange": True}) is None
    assert services.range_from_relayout({"dragmode": "pan"}) == "keep"
    assert services.range_from_relayout({"autosize": True}) == "keep"  # first draw
    node = services.range_of(gk, pk, "eager", "node", "t1")
    assert node[0] < 4
    assert node[1] > 7
    op = services.range_of(gk, pk, "eager", "op", "update")
    assert op[0] < 7 < op[1]
    assert op[1] - op[0] >= services.MIN_RANGE_STEPS
    tensor = services.range_of(gk, pk, "eager", "tensor", "relu")
    assert tensor is not None
    assert services.range_of(gk, pk, "eager", "node", "nope") is None


@pytest.mark.browser
def test_png_export_uses_kaleido_and_chromium(cache_dir: Path) -> None:
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("/usr/bin/chromium is missing: kaleido needs it for PNG export")
    gk, pk = _planned(cache_dir)
    payload = services.export_payload("png", gk, pk, "eager", "layout")
    assert payload["base64"] is True
    assert payload["filename"].endswith("-layout.png")
    assert base64.b64decode(payload["content"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_zoo_names_match_the_zoo() -> None:
    zoo = pytest.importorskip("roam_core.zoo")
    assert set(services.ZOO_NAMES) == set(zoo.ZOO)
    assert services.zoo_models()[0] == "mlp"


@pytest.mark.slow
def test_zoo_trace_job_stores_a_graph(cache_dir: Path) -> None:
    pytest.importorskip("torch")
    key = services.trace_zoo_graph("mlp", 2, None, "adamw", "steady")
    g = state.get_graph(key)
    assert g.name == "mlp-b2-steady"
    assert g.origin["model"] == "mlp"
