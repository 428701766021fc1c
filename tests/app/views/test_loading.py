"""The Graph card: samples, uploads, the zoo trace job, the sample dropdown."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import dash
import pytest

from app.core import ids, state
from app.views.loading import data as loading_data
from app.views.loading import view as loading_view
from app.views.planning import view as planning_view
from roam_core.base.errors import GraphError
from roam_core.formats.graph_io import dumps_graph
from roam_core.model.samples import chain3, diamond
from tests.app.helpers import (
    data_url,
    run,
)


def test_load_graph_from_upload_and_sample(cache_dir: Path) -> None:
    url = data_url(dumps_graph(diamond()))
    data, msg, cleared = run(loading_view.load_graph, ids.UPLOAD, url, None, url, None, "d.json")
    assert data["name"] == "diamond"
    assert msg == "loaded diamond: 4 ops"
    assert cleared is None
    data, msg, _ = run(loading_view.load_graph, ids.SAMPLE_PICK, "hand:chain3", "hand:chain3",
                    None, None, None)
    assert data["name"] == "chain3"


def test_load_graph_bad_upload_keeps_the_graph(cache_dir: Path) -> None:
    url = data_url(b'{"format": "roam-graph", "schema_version": 99}')
    data, msg, _ = run(loading_view.load_graph, ids.UPLOAD, url, None, url, None, "bad.json")
    assert data is dash.no_update
    assert msg.startswith("Error: bad.json: ")
    assert "schema_version" in msg


def test_sample_options_and_load_choice(cache_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "x.json.gz").write_bytes(dumps_graph(chain3(), compress=True))
    opts = loading_data.sample_options(tmp_path)
    assert opts[0]["value"] == "file:x.json.gz"
    assert "hand:diamond" in [o["value"] for o in opts]
    key = loading_data.load_choice("file:x.json.gz", tmp_path)
    assert state.get_graph(key).name == "chain3"
    with pytest.raises(GraphError, match="unknown sample"):
        loading_data.load_choice("file:../etc/passwd", tmp_path)


@pytest.mark.parametrize("compress", [False, True])
def test_upload_json_and_gzip(cache_dir: Path, compress: bool) -> None:
    key = loading_data.graph_from_upload(data_url(dumps_graph(diamond(), compress=compress)),
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
        loading_data.graph_from_upload(data_url(raw), "d.json", 2**20)


def test_upload_size_cap(cache_dir: Path) -> None:
    with pytest.raises(GraphError, match="larger than the upload limit"):
        loading_data.graph_from_upload(data_url(b"x" * 5000), "big.json", 1000)
    with pytest.raises(GraphError, match="empty"):
        loading_data.graph_from_upload("", "e.json", 1000)


def test_new_graph_clears_status_and_sample_pick(cache_dir: Path) -> None:
    assert planning_view.clear_plan_status({"key": "g", "name": "x"}) == ("", "", 0)
    opts = [{"label": "mlp", "value": "file:mlp-b8-steady.json.gz"},
            {"label": "chain3", "value": "hand:chain3"}]
    assert loading_view.sample_pick_for({"key": "g", "name": "chain3"}, "hand:chain3",
                                     opts)[0] is dash.no_update
    value, placeholder = loading_view.sample_pick_for({"key": "g", "name": "mlp-b2-steady"},
                                                   "hand:chain3", opts)
    assert value is None
    assert "mlp-b2-steady" in placeholder


@pytest.mark.slow
def test_trace_job_reports_a_status_while_it_runs(cache_dir: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The zoo trace (17 s for GPT-2) shows a ticking status line, then how long it took."""
    import time


    def slow_trace(model: str, batch: int, *_: Any) -> str:
        time.sleep(1.3)
        return state.put_graph(diamond())

    monkeypatch.setattr(loading_data, "trace_zoo_graph", slow_trace)
    seen: list[tuple] = []
    out, status = loading_view.trace_job(seen.append, 1, "gpt2", 1, 0, "adamw", "steady")
    assert status == "traced gpt2"
    assert out["key"].startswith("g-")
    texts = [s[0] for s in seen]
    assert texts[0] == "tracing gpt2 (batch 1)…"
    assert any(t.startswith("tracing gpt2 (batch 1): 1 s") for t in texts[1:-1])
    assert texts[-1].startswith("traced in 1.")


def test_zoo_names_match_the_zoo() -> None:
    zoo = pytest.importorskip("roam_core.zoo")
    assert set(loading_data.ZOO_NAMES) == set(zoo.ZOO)
    assert loading_data.zoo_models()[0] == "mlp"


@pytest.mark.slow
def test_zoo_trace_job_stores_a_graph(cache_dir: Path) -> None:
    pytest.importorskip("torch")
    key = loading_data.trace_zoo_graph("mlp", 2, None, "adamw", "steady")
    g = state.get_graph(key)
    assert g.name == "mlp-b2-steady"
    assert g.origin["model"] == "mlp"
