"""Memory snapshots: plan export round trip and the restricted loader (no torch needed)."""

from __future__ import annotations

import pickle

import pytest

from roam_core.base.errors import PlanFormatError
from roam_core.formats.snapshot import (
    dumps_plan_snapshot,
    load_snapshot,
    loads_snapshot_dict,
    plan_snapshot,
    save_plan_snapshot,
)
from roam_core.model.graph import round_size
from roam_core.model.samples import diamond, tiny_train_step
from roam_core.oracle.simulate import lifetimes
from tests.roam_core.runtime.exec_helpers import first_fit_plan, random_order

BASE = 0x7F00_0000_0000


@pytest.fixture(params=["diamond", "tiny_train_step"])
def graph_plan(request):
    g = {"diamond": diamond, "tiny_train_step": tiny_train_step}[request.param]()
    return g, first_fit_plan(g, random_order(g, seed=7))


def test_export_loads_back_with_the_plans_allocations(graph_plan, tmp_path) -> None:
    g, plan = graph_plan
    path = save_plan_snapshot(tmp_path / "plan.pickle", g, plan, base_address=BASE)
    curve = load_snapshot(path)
    sized = {t for t, x in g.tensors.items() if x.size_bytes}
    # one alloc per storage, at base + offset, with the rounded size
    got = sorted((e.addr - BASE, e.size) for e in curve.events if e.action == "alloc")
    want = sorted((plan.offsets[t], round_size(g.tensors[t].size_bytes, plan.alignment_bytes))
                  for t in sized)
    assert got == want
    # every planned, non-output storage is freed at the address it was allocated at
    frees = sorted(e.addr - BASE for e in curve.events if e.action == "free")
    planned = sorted(plan.offsets[t] for t in lifetimes(g, plan.order)
                     if t in sized and t not in g.outputs)
    assert frees == planned
    # the replayed curve peaks at the plan's simulated peak, never below zero
    assert curve.peak_bytes == plan.planned_peak_bytes
    assert curve.baseline_bytes == 0
    assert min(curve.allocated_bytes) >= 0
    assert curve.reserved_bytes == plan.arena_bytes


def test_export_is_plain_containers_with_memory_viz_fields(graph_plan) -> None:
    g, plan = graph_plan
    snap = plan_snapshot(g, plan)
    (seg,) = snap["segments"]
    assert seg["total_size"] == plan.arena_bytes
    assert sum(b["size"] for b in seg["blocks"]) == plan.arena_bytes
    entry = snap["device_traces"][0][1]
    assert {"action", "addr", "size", "stream", "frames"} <= set(entry)
    assert {"filename", "line", "name"} <= set(entry["frames"][0])
    # the stdlib pickle of the export loads through the restricted loader unchanged
    assert loads_snapshot_dict(dumps_plan_snapshot(g, plan)) == snap


def test_free_events_follow_lifetimes(graph_plan) -> None:
    g, plan = graph_plan
    trace = plan_snapshot(g, plan)["device_traces"][0]
    lts = lifetimes(g, plan.order)
    for e in trace:
        if e["action"] == "alloc" and e["tensor"] in lts:
            assert e["time_us"] == lts[e["tensor"]].start
        if e["action"] == "free_completed":
            assert e["time_us"] == lts[e["tensor"]].end - 1


class _Payload:
    """Pickles to a call that would write a marker file when unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        code = f"open({self.path!r}, 'w').write('pwned')"
        return (exec, (code,))


def test_pickle_with_a_class_is_refused_without_running(tmp_path) -> None:
    marker = tmp_path / "marker"
    evil = pickle.dumps({"segments": [], "device_traces": [[_Payload(str(marker))]]})
    with pytest.raises(PlanFormatError, match="refusing"):
        load_snapshot(evil)
    assert not marker.exists()
    # the standard unpickler would have run it: the test payload is real
    pickle.loads(evil)
    assert marker.exists()


def test_os_system_reduce_is_refused(tmp_path) -> None:
    import os

    class Sys:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'x'}",))

    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps(Sys()))
    with pytest.raises(PlanFormatError, match=r"system"):
        load_snapshot(path)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(("data", "match"), [
    (b"not a pickle", "not a memory snapshot"),
    (pickle.dumps([1, 2, 3]), "device_traces"),
    (pickle.dumps({"device_traces": []}), "no device traces"),
    (pickle.dumps({"device_traces": [["x"]]}), "non-dict"),
])
def test_malformed_snapshots_are_format_errors(data, match) -> None:
    with pytest.raises(PlanFormatError, match=match):
        load_snapshot(data)


def test_size_cap(tmp_path) -> None:
    data = pickle.dumps({"device_traces": [[]], "pad": "x" * 5000})
    with pytest.raises(PlanFormatError, match=r"exceeds|over the limit"):
        load_snapshot(data, max_bytes=1000)
    (tmp_path / "big.pickle").write_bytes(data)
    with pytest.raises(PlanFormatError, match="over the limit"):
        load_snapshot(tmp_path / "big.pickle", max_bytes=1000)


def test_measured_style_snapshot_curve() -> None:
    """A trace like torch's: frees of blocks allocated before recording shift the curve."""
    trace = [
        {"action": "free_requested", "addr": 0, "size": 1024, "stream": 0, "frames": []},
        {"action": "free_completed", "addr": 0, "size": 1024, "stream": 0, "frames": []},
        {"action": "segment_alloc", "addr": 4096, "size": 2 << 20, "stream": 0, "frames": []},
        {"action": "alloc", "addr": 4096, "size": 512, "stream": 0,
         "frames": [{"filename": "f.py", "line": 3, "name": "fwd"}]},
        {"action": "alloc", "addr": 4608, "size": 2048, "stream": 0, "frames": []},
        {"action": "free_requested", "addr": 4096, "size": 512, "stream": 0, "frames": []},
        {"action": "free_completed", "addr": 4096, "size": 512, "stream": 0, "frames": []},
    ]
    snap = {"segments": [{"total_size": 2 << 20, "blocks": []}],
            "device_traces": [[], trace]}
    curve = load_snapshot(pickle.dumps(snap))
    assert curve.device == 1  # the busiest trace
    assert curve.allocated_bytes == (0, 512, 2560, 2048)
    assert curve.baseline_bytes == 1024
    assert curve.peak_bytes == 2560
    assert curve.events[1].name == "fwd"
    assert curve.steps == (0, 1, 2, 3)
    assert curve.reserved_bytes == 2 << 20


def test_torch_memory_viz_reads_the_export(graph_plan) -> None:
    """PyTorch's own snapshot tooling parses the exported plan (trace text, segment summary)."""
    mv = pytest.importorskip("torch.cuda._memory_viz")
    g, plan = graph_plan
    snap = plan_snapshot(g, plan, base_address=BASE)
    text = mv.trace(snap)
    n_alloc = sum(e["action"] == "alloc" for e in snap["device_traces"][0])
    assert text.count(" = a[") == n_alloc  # every alloc sits inside the one arena segment
    assert "segments: 1" in mv.segsum(snap)
    assert "<html" in mv.trace_plot(snap).lower()


def test_measured_curve_counts_blocks_allocated_before_recording() -> None:
    """Params allocated before recording are still allocated at dump time: counted."""
    trace = [
        {"action": "alloc", "addr": 8192, "size": 512, "stream": 0, "frames": []},
        {"action": "free_completed", "addr": 8192, "size": 512, "stream": 0, "frames": []},
    ]
    blocks = [{"address": 0, "size": 4096, "state": "active_allocated", "frames": []},
              {"address": 4096, "size": 4096, "state": "inactive", "frames": []}]
    snap = {"segments": [{"total_size": 8192 + 512, "blocks": blocks}], "device_traces": [trace]}
    curve = load_snapshot(pickle.dumps(snap))
    assert curve.baseline_bytes == 4096
    assert curve.allocated_bytes == (4608, 4096)
    assert curve.peak_bytes == 4608

