"""The Plan card: the settings check, the Plan job, its progress and Cancel, which plan is shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dash
import pytest
from dash.exceptions import PreventUpdate

from app.analysis import planner, settings
from app.core import ids, state
from app.services import planning as planning_service
from app.views import running
from app.views.planning import model as planning_model
from app.views.planning import view as planning_view
from roam_core.model.samples import diamond, tiny_train_step
from tests.app.helpers import (
    run,
)


def test_plan_job_guard_and_progress(cache_dir: Path) -> None:
    with pytest.raises(PreventUpdate):
        planning_view.plan_job(print, None, {"key": "g"}, "roam", 1, 10, 1, 512)
    gk = state.put_graph(diamond())
    seen: list[tuple] = []
    out, status = planning_view.plan_job(seen.append, 1, {"key": gk}, "roam", 1, 10, 1, 512)
    assert out["graph"] == gk
    assert state.has_plan(out["key"])
    assert status.startswith("planned with roam")
    assert seen
    assert all(len(s) == 3 and s[0] <= s[1] for s in seen)


def test_plan_job_reports_a_planner_crash(cache_dir: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:

    def boom(*_: Any, **__: Any) -> None:
        raise ValueError("solver exploded")

    monkeypatch.setattr(planner, "run_planner", boom)
    gk = state.put_graph(diamond())
    out, status = planning_view.plan_job(print, 1, {"key": gk}, "roam", 1, 10, 1, 512)
    assert out is dash.no_update
    assert status == "Planning failed: ValueError: solver exploded"
    # the same failure on load leaves the graph unplanned instead of breaking the page
    g = {"key": gk, "name": "diamond"}
    assert run(planning_view.resolve_plan, ids.GRAPH_KEY, g, g, None, None, "roam", 1, 10, 1,
               512) is None


def test_resolve_plan_sources(planned: dict[str, Any]) -> None:
    g = planned["graph"]
    fresh = {"key": planned["plan"], "graph": g["key"]}
    args = ("roam", 1, 10, 1, 512)
    assert run(planning_view.resolve_plan, "plan-result", fresh, g, fresh, None, *args) == \
        planned["plan"]
    stale = {"key": "p-x", "graph": "g-other"}
    assert run(planning_view.resolve_plan, "plan-result", stale, g, stale, None, *args) is \
        dash.no_update
    # a new small graph is planned on load (cached afterwards)
    key = run(planning_view.resolve_plan, ids.GRAPH_KEY, g, g, None, None, *args)
    assert state.has_plan(key)


def test_plan_job_cancel_keeps_the_best_plan_so_far(cache_dir: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancel is cooperative: the planner stops, the best valid plan so far is shown."""

    real = planner.run_planner
    polled: list[bool] = []

    def stoppable(graph: Any, settings: Any, progress: Any = None, cancel: Any = None) -> Any:
        planning_view.cancel_plan(1, "page1", 1)  # the user presses Cancel mid-run
        polled.append(cancel())
        return real(graph, settings, progress, cancel)

    monkeypatch.setattr(planner, "run_planner", stoppable)
    gk = state.put_graph(tiny_train_step())
    seen: list[tuple] = []
    out, status = planning_view.plan_job(seen.append, 1, {"key": gk}, "roam", 5, 10, 1, 512,
                                     "page1")
    assert polled == [True]
    assert out["cancelled"] is True
    assert status.startswith("cancelled: showing the best plan found so far (peak ")
    assert state.get_plan(out["key"]).order  # a valid plan, shown in every view
    assert seen[-1][2].startswith("cancelled after")
    # not cached as the full plan of these settings: the next Plan press plans in full
    form = settings.settings_from_form("roam", 5, 10, 1, 512)
    assert planning_service.cached_plan_key(gk, form) is None
    # another page's run is not cancelled
    monkeypatch.setattr(planner, "run_planner", real)
    out2, status2 = planning_view.plan_job(seen.append, 1, {"key": gk}, "roam", 5, 10, 1, 512,
                                       "page2")
    assert "cancelled" not in out2
    assert status2.startswith("planned with roam")


def test_cancel_feedback_for_jobs_without_partial_results() -> None:
    assert running.cancelled(1) == "cancelled"
    with pytest.raises(PreventUpdate):
        running.cancelled(None)
    msg, progress = planning_view.cancel_plan(2, "s", 3)
    assert msg.startswith("cancelling")
    assert progress.startswith("cancelled")
    with pytest.raises(PreventUpdate):
        planning_view.cancel_plan(1, "s", None)  # nothing was started


def test_settings_are_checked_in_words(cache_dir: Path) -> None:
    assert planning_view.settings_message("roam", 5, 60, 1, 512) == ""
    msg = planning_view.settings_message("roam", -5, 60, 0, 512)
    assert msg == ("Settings: time limit must be more than 0 s (got -5 s); "
                   "workers must be at least 1 (got 0)")
    gk = state.put_graph(diamond())
    out, status = planning_view.plan_job(print, 1, {"key": gk}, "roam", -5, 60, 0, 512)
    assert out is dash.no_update
    assert status.startswith("Planning not started: time limit must be more than 0 s")
    g = {"key": gk, "name": "diamond"}
    assert run(planning_view.resolve_plan, ids.TIME_LIMIT, -5, g, None, None, "roam", -5, 60, 1,
               512) is dash.no_update


def test_progress_values() -> None:
    from roam_core.planner import PlanProgress

    p = PlanProgress("order", 2, 5, 3 * 2**20, "sub-task t3")
    assert planning_model.progress_values(p) == (
        2, 5, "order: 2/5 sub-tasks, best peak 3.00 MiB (sub-task t3)")
