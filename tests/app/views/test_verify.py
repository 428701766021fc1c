"""The Verify card: which devices may run a plan, the CPU run itself, the callbacks."""

from __future__ import annotations

import doctest
import subprocess
import sys
from pathlib import Path
from typing import Any

import dash
import pytest
from dash.exceptions import PreventUpdate

from app.analysis.settings import PlanSettings
from app.core import state
from app.services import planning as planning_service
from app.views.loading import data as loading_data
from app.views.verify import data as verify_data
from app.views.verify import view as verify_view
from roam_core.base.errors import ExecutorError
from roam_core.model.samples import tiny_train_step
from tests.app.helpers import (
    planned_with_tree,
)

MLP = "file:mlp-b8-steady.json.gz"


NO = verify_data.CudaStatus(False, verify_data.NO_CUDA)


YES = verify_data.CudaStatus(True, "", "Fake GPU")


@pytest.fixture
def mlp(cache_dir: Path) -> tuple[str, str]:
    """The small zoo sample, planned with a short time limit: ``(graph key, plan key)``."""
    key = loading_data.load_choice(MLP)
    return key, planning_service.plan_graph(key, PlanSettings(time_limit_s=1.0))


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify_data, "cuda_status", lambda: NO)


@pytest.mark.slow
def test_cpu_verify_of_a_zoo_sample_passes_bit_equal(mlp: tuple[str, str]) -> None:
    pytest.importorskip("torch")
    gkey, pkey = mlp
    res = verify_data.run_verify(gkey, pkey, "cpu")
    rep = res["report"]
    assert rep["device"] == "cpu"
    assert rep["max_abs_diff"] == 0.0
    assert rep["numerics_ok"] is True
    assert rep["loss_eager"] == rep["loss_planned"]
    assert rep["arena_bytes"] == state.get_plan(pkey).arena_bytes
    assert rep["eager_peak_allocated_bytes"] is None  # CUDA-only figures
    assert verify_data.cached_result(gkey, pkey, "cpu") == res
    assert verify_data.cached_result(gkey, pkey, "cuda") is None
    ok, rows = verify_data.report_rows(rep)
    table = dict(rows)
    assert ok
    assert table["result"] == "pass"
    assert table["max |eager − planned|"] == "0"
    assert table["peak allocated eager / planned"] == "n/a / n/a"
    assert table["ops out= / factory / fallback"].endswith("/ 0")


def test_custom_graph_cannot_be_verified(cache_dir: Path) -> None:
    graph, plan = planned_with_tree()
    av = verify_data.availability(graph, "p-any", YES)
    assert av.allowed == ()
    assert av.note().startswith("Verify is off: custom graph: it cannot be rebuilt")
    gkey, pkey = state.put_graph(graph), state.put_plan(plan)
    with pytest.raises(ExecutorError, match="custom graph"):
        verify_data.run_verify(gkey, pkey, "cpu")


def test_unplanned_graph_and_no_graph(mlp: tuple[str, str], no_cuda: None) -> None:
    o = verify_data.verify_options(mlp[0], None)
    assert o["note"] == "Verify is off: plan the graph first"
    assert o["value"] is None
    assert o["disabled"]
    assert all(opt["disabled"] for opt in o["options"])
    assert verify_data.verify_options(None, None)["note"] == "Verify is off: load a graph first"


def test_no_cuda_disables_the_gpu_with_the_reason(mlp: tuple[str, str], no_cuda: None
                                                  ) -> None:
    gkey, pkey = mlp
    o = verify_data.verify_options(gkey, pkey, "cuda")
    assert o["options"] == [{"label": "GPU (CUDA)", "value": "cuda", "disabled": True},
                            {"label": "CPU", "value": "cpu", "disabled": False}]
    assert o["value"] == "cpu"
    assert not o["disabled"]
    assert o["note"] == f"GPU (CUDA): {verify_data.NO_CUDA}"
    av = verify_data.availability(state.get_graph(gkey), pkey, YES)
    assert av.allowed == ("cuda", "cpu")
    assert av.note() == ""
    with pytest.raises(ExecutorError, match=verify_data.NO_CUDA):
        verify_data.run_verify(gkey, pkey, "cuda")


def test_large_graphs_are_not_run_on_cpu(mlp: tuple[str, str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    big = state.get_graph(loading_data.load_choice("file:gpt2-b1-t128-steady.json.gz"))
    assert len(big.ops) > verify_data.MAX_CPU_OPS
    av = verify_data.availability(big, "p-any", YES)
    assert av.allowed == ("cuda",)
    assert av.reasons["cpu"] == f"too large for CPU: {len(big.ops):,} ops (limit 3,000)"
    small = state.get_graph(mlp[0])
    monkeypatch.setattr(verify_data, "MAX_CPU_RESIDENT_BYTES", small.resident_bytes() - 1)
    reason = verify_data.availability(small, "p-any", NO).reasons["cpu"]
    assert reason is not None
    assert reason.startswith("too large for CPU: 3.11 MiB resident")
    with pytest.raises(ExecutorError, match="too large for CPU"):
        verify_data.run_verify(*mlp, "cpu")


def test_probe_cuda_honours_an_empty_device_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    st = verify_data.probe_cuda()
    assert not st.available
    assert st.reason.startswith(verify_data.NO_CUDA)


@pytest.mark.slow
def test_server_probes_cuda_without_importing_torch(tmp_path: Path) -> None:
    code = ("import sys\nfrom app import create_app\n"
            "from app.views.verify import data as verify_data\n"
            f"create_app(cache_dir={str(tmp_path)!r}, plan_on_start=False)\n"
            "assert verify_data.cuda_status.cache_info().currsize == 1\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_callbacks(mlp: tuple[str, str], no_cuda: None,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    gkey, pkey = mlp
    graph = {"key": gkey, "name": "mlp-b8-steady"}
    _options, value, note, disabled = verify_view.verify_options(graph, pkey, None)
    assert value == "cpu"
    assert not disabled
    assert verify_data.NO_CUDA in note
    assert verify_view.verify_label(value) == "Verify on CPU"
    assert verify_view.verify_label("cuda") == "Verify on GPU"
    assert "not verified yet" in str(verify_view.render_verify(None, graph, pkey, "cpu"))
    # the page's first answer: the whole card at once (no chain of four callbacks)
    idle = {"plan": False, "trace": False, "verify": False}
    first = verify_view.verify_card_state(graph, pkey, None, idle)
    assert first[1:5] == ("cpu", note, False, "Verify on CPU")
    assert "not verified yet" in str(first[5])
    assert first[6:] == (False, True)  # Verify on, Cancel off
    again = verify_view.verify_card_state(graph, pkey, "cpu", {**idle, "verify": True})
    assert again[1] is dash.no_update  # unchanged: what listens to the device stays quiet
    assert again[6:] == (True, False)  # a verify job runs: Verify off, Cancel on

    rep = {"device": "cpu", "numerics_ok": True, "max_abs_diff": 0.0, "arena_bytes": 4096,
           "loss_eager": 1.5, "loss_planned": 1.5}

    def fake_run(g: str, p: str, d: str) -> dict[str, Any]:
        res = {"key": verify_data.result_key(g, p, d), "device": d, "report": rep,
               "wall_time_s": 0.25}
        state.put_json(res["key"], res)
        return res

    monkeypatch.setattr(verify_data, "run_verify", fake_run)
    done, msg = verify_view.verify_job(1, graph, pkey, "cpu")
    assert msg == "verified mlp-b8-steady on cpu: pass (0.2 s)"
    body = str(verify_view.render_verify(done, graph, pkey, "cpu"))
    assert "PASS" in body
    assert "4.00 KiB" in body

    def broken(*_: Any) -> Any:
        raise ExecutorError("no luck")

    monkeypatch.setattr(verify_data, "run_verify", broken)
    done, msg = verify_view.verify_job(1, graph, pkey, "cpu")
    assert msg == "Verify failed: ExecutorError: no luck"
    with pytest.raises(PreventUpdate):
        verify_view.verify_job(None, graph, pkey, "cpu")
    # a hand-built graph: every device off, with the reason
    key = state.put_graph(tiny_train_step())
    _, value, note, disabled = verify_view.verify_options({"key": key}, "p-x", "cpu")
    assert value is None
    assert disabled
    assert "custom graph" in note


def test_docstring_examples() -> None:
    result = doctest.testmod(verify_data)
    assert result.attempted > 0
    assert result.failed == 0
