"""Measured memory: a snapshot's curves, segments and fragmentation; unsafe pickles refused."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from app.analysis.settings import PlanSettings
from app.core import formatting, state
from app.services import planning as planning_service
from app.views.snapshot import view as snapshot_view
from roam_core.formats.snapshot import plan_snapshot
from tests.app.helpers import uploaded
from tests.builders import two_param_step

S = PlanSettings(time_limit_s=1)


def _snapshot_bytes(graph_key: str, plan_key: str) -> bytes:
    g, p = state.get_graph(graph_key), state.get_plan(plan_key)
    snap = plan_snapshot(g, p)
    # a measured run reserves more than it allocates: an extra cached segment, freed blocks
    snap["segments"].append({"device": 0, "address": 1 << 40, "total_size": 2 << 20,
                             "blocks": [{"address": 1 << 40, "size": 2 << 20,
                                         "state": "inactive"}]})
    snap["device_traces"][0].insert(0, {"action": "segment_alloc", "addr": 1 << 40,
                                        "size": 2 << 20})
    return pickle.dumps(snap)


def test_snapshot_overlay_segments_and_fragmentation(cache_dir: Path) -> None:
    g = two_param_step()
    gk = state.put_graph(g)
    pk = planning_service.plan_graph(gk, S)
    plan = state.get_plan(pk)
    data, msg = snapshot_view.on_snapshot_upload(uploaded(_snapshot_bytes(gk, pk), "run.pickle"))
    assert msg == "loaded snapshot run.pickle"
    curves, segs, summary, style = snapshot_view.render_snapshot(data, {"key": gk}, pk,
                                                                 "eager")
    assert style == {}  # the charts show once a snapshot is loaded
    *_, none_summary, none_style = snapshot_view.render_snapshot(None, {"key": gk}, pk, "eager")
    assert none_style == {"display": "none"}
    assert "drop a memory snapshot" in str(none_summary)
    names = [t.name for t in curves.data]
    assert names[:2] == ["simulated: eager (program order)", "simulated: planned (roam)"]
    measured = curves.data[names.index("exported allocated")]  # roam wrote it: not measured
    div, unit = formatting.byte_unit(plan.arena_bytes + (2 << 20))  # the top: measured reserved
    assert curves.layout.yaxis.title.text == unit
    assert max(measured.y) * div == pytest.approx(plan.planned_peak_bytes)
    assert max(measured.x) < len(plan.order)  # on the plan's step axis
    assert list(segs.layout.xaxis.ticktext) == ["planned arena", "segment 1", "segment 2"]
    text = " ".join(li.children for li in summary)
    frag = plan.arena_bytes + (2 << 20) - plan.planned_peak_bytes
    assert "fragmentation at the peak (reserved − allocated)" in text

    assert formatting.fmt_bytes(frag) in text


@pytest.mark.slow
def test_snapshot_upload_refuses_a_pickle_with_a_class(cache_dir: Path) -> None:
    import os

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    data, msg = snapshot_view.on_snapshot_upload(uploaded(pickle.dumps(Evil()), "evil.pickle"))
    assert data is not None
    assert msg.startswith("Snapshot not loaded: evil.pickle: refusing")
