"""What fits (fit_row, largest_fitting) and the measured-snapshot analysis."""

from __future__ import annotations

import os
import pickle

import pytest

from roam_core.base.errors import PlanFormatError
from roam_core.formats.snapshot import plan_snapshot
from roam_core.formats.snapshot_analysis import analyze_snapshot
from roam_core.model.graph import round_size
from roam_core.oracle.simulate import lifetimes
from roam_core.planner import make_plan
from roam_core.planner.config import PlannerConfig
from roam_core.planner.whatfits import FIT_METHODS, FitRow, fit_row, largest_fitting
from tests.builders import random_train_graph, two_param_step


@pytest.mark.slow
def test_fit_row_orders_the_methods_and_respects_the_time_limits() -> None:
    g = random_train_graph(2, 6)
    r = fit_row(g, PlannerConfig(workers=1, time_limit_s=1), batch_size=1)
    p = r.peak_bytes
    assert set(p) == set(FIT_METHODS)
    assert p["roam_recompute_25pct"] <= p["roam_recompute_5pct"] <= p["roam"]
    assert p["roam_recompute_25pct"] < p["roam"]  # this graph has a real frontier
    assert 0 <= r.extra_time_pct["roam_recompute_5pct"] <= 5.0
    assert 0 < r.extra_time_pct["roam_recompute_25pct"] <= 25.0
    assert r.step_flops > 0
    assert r.step_seconds > 0
    assert r.device_profile == "h100-sxm"  # the planner's default profile, recorded
    assert FitRow.from_dict(r.to_dict()) == r
    # a row written before the time estimate (FLOP shares) is not read as time
    old = {k: v for k, v in r.to_dict().items() if k != "extra_time_pct"}
    assert FitRow.from_dict({**old, "extra_flops_pct": {"roam": 1.0}}).extra_time_pct == {}


def test_largest_fitting_stops_at_the_first_miss() -> None:
    rows = [FitRow(b, None, "g", {"roam": 10 * b, "eager_reserved": 30 * b})
            for b in (1, 2, 4, 8)]
    rows.append(FitRow(16, None, "g", {"roam": 5, "eager_reserved": 5}))  # a blip
    best = largest_fitting(rows, 45)
    assert best["roam"].batch_size == 4
    assert best["eager_reserved"].batch_size == 1
    assert largest_fitting(rows, 1)["roam"] is None
    seq = [FitRow(2, 128, "g", {"roam": 10}), FitRow(4, 64, "g", {"roam": 10}),
           FitRow(1, 1024, "g", {"roam": 10})]
    assert largest_fitting(seq, 10)["roam"].seq_len == 1024  # most tokens


def _plan():
    g = two_param_step()
    return g, make_plan(g, PlannerConfig(workers=1, time_limit_s=1))


def test_exported_plan_snapshot_reads_back_as_the_plan() -> None:
    g, plan = _plan()
    m = analyze_snapshot(pickle.dumps(plan_snapshot(g, plan, base_address=1 << 20)))
    assert m.peak_allocated_bytes == plan.planned_peak_bytes
    assert m.peak_reserved_bytes == plan.arena_bytes
    assert m.fragmentation_bytes == plan.arena_bytes - plan.planned_peak_bytes
    assert m.event_steps is not None
    assert max(m.event_steps) < len(plan.order)
    (seg,) = m.segments
    assert (seg.addr, seg.size_bytes) == (1 << 20, plan.arena_bytes)
    # the blocks live at the measured peak are the plan's storages at their offsets
    step = m.event_steps[m.peak_index]
    a = plan.alignment_bytes
    lts = lifetimes(g, plan.order)
    got = {(b.addr - seg.addr, b.size_bytes) for b in seg.blocks}
    live = {(plan.offsets[t], round_size(g.tensors[t].size_bytes, a)) for t, lt in lts.items()
            if round_size(g.tensors[t].size_bytes, a) and lt.start <= step < lt.end}
    assert live <= got
    assert seg.allocated_bytes == m.peak_allocated_bytes


def test_reserved_curve_undoes_later_segments_and_fragmentation() -> None:
    seg = lambda addr, size, blocks: {"address": addr, "total_size": size,  # noqa: E731
                                      "blocks": blocks, "device": 0}
    trace = [{"action": "segment_alloc", "addr": 0, "size": 8192},
             {"action": "alloc", "addr": 0, "size": 2048, "frames": [{"name": "a"}]},
             {"action": "alloc", "addr": 2048, "size": 4096, "frames": [{"name": "b"}]},
             {"action": "free_completed", "addr": 2048, "size": 4096},
             {"action": "segment_alloc", "addr": 1 << 20, "size": 2 << 20},
             {"action": "alloc", "addr": 1 << 20, "size": 1024}]
    snap = {"segments": [seg(0, 8192, [{"address": 0, "size": 2048,
                                       "state": "active_allocated"}]),
                         seg(1 << 20, 2 << 20, [{"address": 1 << 20, "size": 1024,
                                                 "state": "active_allocated"}])],
            "device_traces": [trace]}
    m = analyze_snapshot(pickle.dumps(snap))
    assert m.allocated_bytes == (2048, 6144, 2048, 3072)
    assert m.reserved_bytes == (8192, 8192, 8192, 8192 + (2 << 20))
    assert m.peak_index == 1
    assert m.fragmentation_bytes == 8192 - 6144
    assert [s.addr for s in m.segments] == [0]  # the second segment came after the peak
    assert [(b.name, b.size_bytes) for b in m.segments[0].blocks] == [("a", 2048), ("b", 4096)]
    assert m.event_steps is None
    assert m.steps_on(10) == [0, 3, 6, 9]


def test_snapshot_analysis_refuses_classes_and_empty_traces(tmp_path) -> None:
    class Evil:
        def __reduce__(self):
            return (os.getcwd, ())

    with pytest.raises(PlanFormatError, match="refusing"):
        analyze_snapshot(pickle.dumps({"segments": [], "device_traces": [[Evil()]]}))
    with pytest.raises(PlanFormatError, match="no alloc/free"):
        analyze_snapshot(pickle.dumps({"segments": [], "device_traces": [[]]}))
    p = tmp_path / "big.pickle"
    p.write_bytes(b"x" * 100)
    with pytest.raises(PlanFormatError, match="limit"):
        analyze_snapshot(p, max_bytes=10)
