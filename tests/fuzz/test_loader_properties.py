"""Hypothesis strategies for the loaders: any JSON value in any field of a valid graph or
plan, any bytes, any snapshot-shaped structure.  A loader returns its record or raises its
own error type (GraphError, PlanFormatError, SnapshotError), never anything else; a plan it
accepts goes through the validator without an exception."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roam_core.base.errors import GraphError, PlanFormatError, SnapshotError
from tests.fuzz.corpus import BASE_GRAPH, base_graph_dict

_SETTINGS = settings(max_examples=150, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])

scalars = (st.none() | st.booleans() | st.integers() | st.integers(2**62 - 2, 2**70)
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(st.characters(codec=None), max_size=12))
json_values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3)
                           | st.dictionaries(st.text(max_size=5), kids, max_size=3),
                           max_leaves=8)


def _mutate(d: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """``d`` with one field, of the top level or of one record, replaced by any value."""
    d = copy.deepcopy(d)
    lists = [k for k, v in d.items() if isinstance(v, list) and v and isinstance(v[0], dict)]
    where = data.draw(st.sampled_from(["top", *lists]))
    target = d if where == "top" else data.draw(st.sampled_from(d[where]))
    key = data.draw(st.sampled_from(sorted(target)) | st.text(max_size=6))
    target[key] = data.draw(json_values)
    return d


@pytest.mark.slow
@_SETTINGS
@given(st.data())
def test_any_value_in_any_graph_field(data: st.DataObject) -> None:
    from roam_core.formats.graph_io import graph_from_dict, loads_graph

    d = _mutate(base_graph_dict(), data)
    for load in (lambda: graph_from_dict(d), lambda: loads_graph(json.dumps(d))):
        message = ""
        try:
            load()
        except GraphError as e:
            message = str(e)
        assert "\n" not in message


@pytest.mark.slow
@_SETTINGS
@given(st.data())
def test_any_value_in_any_plan_field(data: st.DataObject) -> None:
    from roam_core.formats.graph_io import load_graph
    from roam_core.formats.plan_io import loads_plan, plan_to_dict
    from roam_core.oracle.validate import check_plan
    from tests.fuzz.corpus import base_plan

    d = _mutate(plan_to_dict(base_plan()), data)
    try:
        plan = loads_plan(json.dumps(d))
    except PlanFormatError:
        return
    check_plan(load_graph(BASE_GRAPH), plan)  # a list of violations, never an exception


@_SETTINGS
@given(st.binary(max_size=200))
def test_any_bytes(data: bytes) -> None:
    from roam_core.formats.dsa_csv import loads_problem
    from roam_core.formats.graph_io import loads_graph
    from roam_core.formats.plan_io import loads_plan
    from roam_core.formats.snapshot import load_snapshot

    for load, error in ((loads_graph, GraphError), (loads_plan, PlanFormatError),
                        (load_snapshot, SnapshotError),
                        (lambda b: loads_problem(b.decode("utf-8", "replace")),
                         PlanFormatError)):
        try:
            load(data)
        except error:
            pass


entries = st.fixed_dictionaries({}, optional={
    "action": st.sampled_from(["alloc", "free_completed", "free_requested", "segment_alloc",
                               "segment_free"]) | json_values,
    "addr": json_values | st.integers(0, 2**20), "size": json_values | st.integers(0, 2**20),
    "frames": json_values, "line": json_values})
snapshots = st.fixed_dictionaries({"device_traces": st.lists(st.lists(entries | json_values,
                                                                      max_size=6), max_size=2)},
                                  optional={"segments": json_values, "roam": json_values})


@pytest.mark.slow
@_SETTINGS
@given(snapshots)
def test_any_snapshot_shape(snap: dict[str, Any]) -> None:
    from roam_core.formats.snapshot_analysis import analyze_snapshot

    try:
        m = analyze_snapshot(pickle.dumps(snap))
    except SnapshotError:
        return
    assert m.peak_allocated_bytes >= 0
