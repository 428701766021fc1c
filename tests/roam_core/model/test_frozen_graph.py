"""A graph is deeply immutable: its tables cannot be edited in place, so its cached
fingerprint always describes it."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from roam_core.model.frozen import FrozenDict, FrozenList, freeze
from roam_core.model.graph import Graph, Op, Phase, Tensor, TensorKind
from roam_core.model.samples import tiny_train_step


def test_tables_are_read_only() -> None:
    g = tiny_train_step()
    fp = g.fingerprint()
    t = next(iter(g.tensors))
    with pytest.raises(TypeError):
        g.tensors[t] = g.tensors[t]  # type: ignore[index]
    for edit in (lambda: g.tensors.pop(t), lambda: g.tensors.clear(),  # type: ignore[attr-defined]
                 lambda: g.tensors.update({}), lambda: g.tensors.setdefault(t, None)):  # type: ignore[attr-defined]
        with pytest.raises(TypeError):
            edit()
    with pytest.raises(TypeError):
        g.origin["source"] = "zoo"  # type: ignore[index]
    assert isinstance(g.ops, tuple)
    assert g.fingerprint() == fp


def test_nested_origin_is_frozen_and_still_json() -> None:
    g = Graph.build([], [], origin={"source": "zoo", "shapes": [[5, 8]], "kw": {"a": 1}})
    assert g.origin["shapes"] == [[5, 8]]
    with pytest.raises(TypeError):
        g.origin["shapes"].append([1])
    with pytest.raises(TypeError):
        g.origin["kw"]["a"] = 2
    assert json.loads(json.dumps(g.origin)) == {"source": "zoo", "shapes": [[5, 8]],
                                                "kw": {"a": 1}}


def test_lists_given_become_tuples() -> None:
    op = Op("a", "aten.relu.default", Phase.FORWARD, [], ["x"])  # type: ignore[arg-type]
    t = Tensor("x", 4, "float32", [1], TensorKind.ACTIVATION, "a")  # type: ignore[arg-type]
    g = Graph(ops=[op], tensors={"x": t})  # type: ignore[arg-type]
    assert type(g.ops) is tuple
    assert type(g.ops[0].outputs) is tuple
    assert type(g.tensors["x"].shape) is tuple
    assert isinstance(g.tensors, FrozenDict)


def test_frozen_graphs_pickle_and_copy() -> None:
    g = tiny_train_step()
    for h in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g)):
        assert h.fingerprint() == g.fingerprint()
        assert isinstance(h.tensors, FrozenDict)
    assert pickle.loads(pickle.dumps(freeze({"a": [1]}))) == {"a": [1]}
    assert isinstance(pickle.loads(pickle.dumps(FrozenList([1]))), FrozenList)


def test_not_a_table_is_a_graph_error() -> None:
    from roam_core.base.errors import GraphError

    with pytest.raises(GraphError, match="tensors"):
        Graph(ops=(), tensors=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(GraphError, match="Op"):
        Graph(ops=("a",), tensors={})  # type: ignore[arg-type]
