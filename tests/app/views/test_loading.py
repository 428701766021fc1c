"""The Graph card: samples, uploads, the zoo trace job, the sample dropdown."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import dash
import pytest

from app.core import ids, state
from app.services.uploads import UploadError, save_upload, upload_dir
from app.views.casts import AUTOCAST_PRECISIONS, merge_casts_state
from app.views.loading import data as loading_data
from app.views.loading import view as loading_view
from app.views.planning import view as planning_view
from app.views.uploads import result_id
from roam_core.base.errors import GraphError
from roam_core.formats.graph_io import dumps_graph
from roam_core.model.samples import chain3, diamond
from tests.app.helpers import data_url, run, uploaded

UPLOADED = result_id(ids.UPLOAD)


def test_load_graph_from_upload_and_sample(cache_dir: Path) -> None:
    ref = uploaded(dumps_graph(diamond()), "d.json")
    data, msg = run(loading_view.load_graph, UPLOADED, ref, None, ref, None)
    assert data["name"] == "diamond"
    assert msg == "loaded diamond: 4 ops"
    data, msg = run(loading_view.load_graph, ids.SAMPLE_PICK, "hand:chain3", "hand:chain3",
                    None, None)
    assert data["name"] == "chain3"
    data, msg = run(loading_view.load_graph, UPLOADED, ref, None, ref, None)  # read once
    assert data is dash.no_update
    assert msg.startswith("Error: the upload is no longer on the server")


def test_load_graph_bad_upload_keeps_the_graph(cache_dir: Path) -> None:
    ref = uploaded(b'{"format": "roam-graph", "schema_version": 99}', "bad.json")
    data, msg = run(loading_view.load_graph, UPLOADED, ref, None, ref, None)
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
    key = loading_data.graph_from_upload(dumps_graph(diamond(), compress=compress), "d.json")
    assert state.get_graph(key).name == "diamond"


@pytest.mark.parametrize(("raw", "match"), [
    (b"{not json", "d.json: graph file is not valid JSON"),
    (gzip.compress(b"[1, 2]", mtime=0), "d.json: "),
    (json.dumps({"format": "roam-graph", "schema_version": 1, "ops": [
        {"id": "a", "target": "x", "phase": "forward", "inputs": ["ghost"], "outputs": []}],
        "tensors": []}).encode(), "ghost"),
])
def test_upload_errors_name_the_problem(cache_dir: Path, raw: bytes, match: str) -> None:
    with pytest.raises(GraphError, match=match):
        loading_data.graph_from_upload(raw, "d.json")


def test_upload_size_cap(cache_dir: Path) -> None:
    import io

    with pytest.raises(UploadError, match=r"big\.json is larger than the upload limit"):
        save_upload(io.BytesIO(b"x" * 5000), 1000, "big.json")
    with pytest.raises(UploadError, match="empty"):
        save_upload(io.BytesIO(b""), 1000, "e.json")
    assert not list(upload_dir().iterdir())  # nothing kept


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
    assert texts[0] == "tracing gpt2 (batch 1, fp32)…"
    assert any(t.startswith("tracing gpt2 (batch 1, fp32): 1 s") for t in texts[1:-1])
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


def test_a_dropped_hf_config_is_offered_and_traced(cache_dir: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = {"model_type": "llama", "hidden_size": 32}
    opts = ["mlp", "gpt2"]
    stored, status, options, value = loading_view.hf_config_dropped(
        data_url(json.dumps(cfg).encode()), "config.json", opts)
    assert stored == cfg
    assert value == loading_data.HF_CHOICE
    assert options[0]["value"] == loading_data.HF_CHOICE
    assert options[1:] == opts
    assert "llama" in status
    bad, status, options, value = loading_view.hf_config_dropped(
        data_url(b'{"hidden_size": 4}'), "x.json", opts)
    assert bad is None
    assert status == "Error: x.json is not a Hugging Face config (no 'model_type')"
    assert value is dash.no_update
    seen: list[Any] = []

    def fake_hf(config, task, *args):  # type: ignore[no-untyped-def]
        seen.append((config, task, args))
        return state.put_graph(diamond())

    monkeypatch.setattr(loading_data, "trace_hf_graph", fake_hf)
    _out, msg = loading_view.trace_job(lambda _: None, 1, loading_data.HF_CHOICE, 2, 64,
                                       "adamw", "steady", "bf16-mixed", "flash", ["merge"],
                                       cfg, "causal-lm")
    assert msg == "traced llama"
    assert seen == [(cfg, "causal-lm",
                     (2, 64, "adamw", "steady", "bf16-mixed", "flash", True))]
    _, msg = loading_view.trace_job(lambda _: None, 1, loading_data.HF_CHOICE, 2, 64,
                                    "adamw", "steady", "fp32", "sdpa", [], None, "causal-lm")
    assert msg == "Trace failed: drop a Hugging Face config.json first"


def test_the_app_offers_roam_cores_precisions_and_tasks() -> None:
    pytest.importorskip("transformers")
    from roam_core.base.catalog import TRANSFORMER_NAMES
    from roam_core.commands import model_args
    from roam_core.trace.attention import ATTENTION_BACKENDS
    from roam_core.trace.precision import PRECISIONS
    from roam_core.zoo.hf import HF_TASKS
    from roam_core.zoo.sources import TRANSFORMER_ZOO

    assert loading_data.PRECISIONS == PRECISIONS == model_args.PRECISION_CHOICES
    assert loading_data.HF_TASKS == tuple(HF_TASKS) == model_args.HF_TASK_CHOICES
    assert model_args.ATTENTION_CHOICES == ATTENTION_BACKENDS
    assert set(TRANSFORMER_NAMES) == TRANSFORMER_ZOO


def test_the_start_up_sample_has_source_lines_on_its_forward_ops(cache_dir: Path) -> None:
    """The sample the app opens on (the first of ``DEFAULT_SAMPLE`` present) was traced with
    source lines, so the source column, Explain and hover show where each op came from."""
    from app import DEFAULT_SAMPLE
    from roam_core.model.graph import Phase

    values = [o["value"] for o in loading_data.sample_options()]
    pick = next(v for p in DEFAULT_SAMPLE for v in values if v.startswith(p))
    g = state.get_graph(loading_data.load_choice(pick))
    forward = [o for o in g.ops if o.phase is Phase.FORWARD]
    assert forward
    missing = [o.id for o in forward if not o.source]
    assert not missing, f"{pick}: forward ops without a source line: {missing[:5]}"
    assert all(o.source.startswith("roam_core/zoo/") for o in forward), forward[0].source


def test_merge_casts_is_offered_only_for_autocast_precisions() -> None:
    """The trace panel's checkbox is disabled and cleared outside autocast, and a stale
    form that still asks to merge in fp32 is refused before anything is traced."""
    for prec in ("fp32", "bf16"):
        options, value, note = merge_casts_state(prec, ["merge"])
        assert options[0]["disabled"] is True
        assert value == []
        assert "only for autocast precisions" in note
    for prec in AUTOCAST_PRECISIONS:
        options, value, note = merge_casts_state(prec, ["merge"])
        assert options[0]["disabled"] is False
        assert value == ["merge"]
        assert "eager PyTorch makes every copy" in note
    out, msg = loading_view.trace_job(lambda _: None, 1, "tiny_llama", 1, 0, "adamw",
                                      "steady", "fp32", "sdpa", ["merge"])
    assert out is dash.no_update
    assert msg.startswith("Trace failed: merge autocast's repeated casts: precision fp32")


@pytest.mark.slow
def test_trace_job_with_merged_casts_records_it_in_the_origin(cache_dir: Path) -> None:
    """Ticked in the trace panel, the casts reach the tracer: the traced graph's origin
    records ``merge_casts`` (what every way of running a plan rebuilds the step from), and
    tiny_llama's q/k/v casts are made once, so the step has fewer storages."""
    pytest.importorskip("torch")
    graphs = {}
    for merge in ([], ["merge"]):
        out, msg = loading_view.trace_job(lambda _: None, 1, "tiny_llama", 1, 0, "adamw",
                                          "steady", "bf16-mixed", "sdpa", merge)
        assert msg == "traced tiny_llama", msg
        graphs[bool(merge)] = state.get_graph(out["key"])
    plain, merged = graphs[False], graphs[True]
    assert merged.origin["merge_casts"] is True
    assert merged.origin["merged_casts"] > 0
    assert "merge_casts" not in plain.origin
    assert len(merged.tensors) < len(plain.tensors)
