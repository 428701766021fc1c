"""Planning into the cache: one plan per graph and settings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.analysis import planner, settings
from app.core import state
from app.services import planning as planning_service
from roam_core.model.samples import tiny_train_step


def test_plan_graph_is_cached_by_graph_and_settings(cache_dir: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = planner.run_planner

    def counting(graph, settings, progress=None):
        calls.append(settings)
        return real(graph, settings, progress)

    monkeypatch.setattr(planner, "run_planner", counting)
    gk = state.put_graph(tiny_train_step())
    s = settings.PlanSettings(time_limit_s=1.0)
    k1 = planning_service.plan_graph(gk, s)
    assert planning_service.plan_graph(gk, s) == k1 == planning_service.cached_plan_key(gk, s)
    assert len(calls) == 1
    k2 = planning_service.plan_graph(gk, dataclasses.replace(s, alignment_bytes=256))
    assert k2 != k1
    assert len(calls) == 2
    assert planning_service.cached_plan_key(gk, dataclasses.replace(s, workers=3)) is None
