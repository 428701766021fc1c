"""The on-disk plan cache: JSON files keyed by graph, planner and roam version, validated on
load, written atomically."""

from __future__ import annotations

import json

import pytest

from roam_core.base.errors import PlanFormatError
from roam_core.formats.plan_cache import CACHE_ENV, PlanCache, default_cache_dir
from roam_core.model.plan import Plan
from roam_core.model.samples import chain3, tiny_train_step


def _plan(g) -> Plan:
    return Plan(g.fingerprint(), g.name, "eager", g.op_ids, {"a": 0, "b": 512, "c": 0}, 512,
                1024, 1024, 0, 1024, 1024)


def test_round_trip_and_keys(tmp_path) -> None:
    g, other = chain3(), tiny_train_step()
    cache = PlanCache(tmp_path / "plans")
    assert cache.load(g, "eager") is None
    path = cache.save(g, "eager", _plan(g))
    assert path.parent == tmp_path / "plans"
    assert json.loads(path.read_text())["graph_fingerprint"] == g.fingerprint()
    assert cache.load(g, "eager") == _plan(g)
    assert cache.load(g, "roam:PlannerConfig()") is None  # another planner, another key
    assert cache.key(g, "eager") != cache.key(other, "eager")
    assert [p.name for p in (tmp_path / "plans").iterdir()] == [path.name]  # no temp files


def test_bad_files_are_ignored_and_wrong_plans_refused(tmp_path) -> None:
    g = chain3()
    cache = PlanCache(tmp_path)
    path = cache.save(g, "eager", _plan(g))
    path.write_text("{not json")
    assert cache.load(g, "eager") is None
    bad = Plan(g.fingerprint(), g.name, "eager", g.op_ids, {"a": 0, "b": 0, "c": 0}, 512,
               512, 512, 0, 512, 512)  # b overlaps a while both are live
    cache.save(g, "eager", bad)
    assert cache.load(g, "eager") is None  # fails the validator
    with pytest.raises(PlanFormatError, match="not cached"):
        cache.save(tiny_train_step(), "eager", _plan(g))


def test_default_directory(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "roam" / "plans"
