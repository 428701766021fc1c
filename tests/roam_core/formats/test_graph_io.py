"""Graph files: round trips, and one test per GraphError the loader raises."""

from __future__ import annotations

import copy
import gzip
import json

import pytest
from hypothesis import given

from roam_core.base import safe_gzip
from roam_core.base.errors import GraphError
from roam_core.formats.graph_io import (
    dumps_graph,
    graph_from_dict,
    graph_to_dict,
    load_graph,
    loads_graph,
    save_graph,
)
from roam_core.model.samples import SAMPLES, tiny_train_step
from tests.strategies import random_graphs


def _base() -> dict:
    return copy.deepcopy(graph_to_dict(tiny_train_step()))


def _raises(d, *needles: str) -> str:
    with pytest.raises(GraphError) as ei:
        graph_from_dict(d)
    msg = str(ei.value)
    for n in needles:
        assert n in msg, msg
    assert "\n" not in msg
    return msg


def _op(d, oid):
    return next(o for o in d["ops"] if o["id"] == oid)


def _tensor(d, tid):
    return next(t for t in d["tensors"] if t["id"] == tid)


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("name", sorted(SAMPLES))
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_sample_roundtrip(tmp_path, name, suffix):
    g = SAMPLES[name]()
    p = tmp_path / f"g{suffix}"
    save_graph(g, p)
    raw = p.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == suffix.endswith(".gz")
    h = load_graph(p)
    assert h == g
    assert h.fingerprint() == g.fingerprint()


@pytest.mark.slow
@given(random_graphs(max_ops=10))
def test_random_roundtrip(g):
    h = loads_graph(dumps_graph(g))
    assert h == g
    assert loads_graph(dumps_graph(g, compress=True)).fingerprint() == g.fingerprint()
    assert loads_graph(dumps_graph(g).decode()) == g  # str input


def test_listed_consumers_that_agree_are_accepted():
    d = _base()
    _tensor(d, "relu")["consumers"] = ["loss", "relu_bw"]
    assert graph_from_dict(d) == tiny_train_step()


# ------------------------------------------------------------------ file-level errors
def test_bad_json():
    with pytest.raises(GraphError, match="not valid JSON"):
        loads_graph(b'{"ops": [')


def test_bad_utf8():
    with pytest.raises(GraphError, match="not valid JSON"):
        loads_graph(b'\xff\xfe{}')


def test_bad_gzip():
    with pytest.raises(GraphError, match="not valid gzip"):
        loads_graph(b"\x1f\x8b\x08\x00garbage-garbage-garbage")


def test_gzip_bomb_guard(monkeypatch):
    monkeypatch.setattr(safe_gzip, "MAX_DECOMPRESSED_BYTES", 100)
    with pytest.raises(GraphError, match="expands beyond 100 bytes"):
        loads_graph(gzip.compress(dumps_graph(tiny_train_step())))


def test_unreadable_file(tmp_path):
    with pytest.raises(GraphError, match=r"nope\.json"):
        load_graph(tmp_path / "nope.json")


def test_not_an_object():
    with pytest.raises(GraphError, match="JSON object"):
        loads_graph(json.dumps([1, 2]))


def test_wrong_format():
    d = _base()
    d["format"] = "something-else"
    _raises(d, "'something-else'")


@pytest.mark.parametrize("version", [0, 3, "1", None, True])
def test_wrong_schema_version(version):
    d = _base()
    d["schema_version"] = version
    _raises(d, "schema_version", repr(version))


def test_missing_ops_list():
    d = _base()
    del d["ops"]
    _raises(d, "'ops'")


def test_ops_not_a_list():
    d = _base()
    d["tensors"] = {"a": 1}
    _raises(d, "'tensors'", "list")


# ------------------------------------------------------------------ field errors
def test_op_not_an_object():
    d = _base()
    d["ops"][2] = "loss"
    _raises(d, "op #2")


def test_op_bad_phase():
    d = _base()
    _op(d, "relu")["phase"] = "sideways"
    _raises(d, "'relu'", "'sideways'")


def test_op_bad_random_flag():
    d = _base()
    _op(d, "relu")["random"] = "yes"
    _raises(d, "'relu'", "random")


def test_op_inputs_not_strings():
    d = _base()
    _op(d, "relu")["inputs"] = [1]
    _raises(d, "'relu'", "inputs")


def test_tensor_bad_shape():
    d = _base()
    _tensor(d, "mm")["shape"] = [2, True]
    _raises(d, "'mm'", "shape")


def test_tensor_bad_kind():
    d = _base()
    _tensor(d, "mm")["kind"] = "ghost"
    _raises(d, "'mm'", "'ghost'")


def test_control_edge_bad_reason():
    d = _base()
    d["control_edges"][0]["reason"] = "because"
    _raises(d, "control edge #0", "'because'")


def test_bad_origin():
    d = _base()
    d["origin"] = "zoo"
    _raises(d, "origin")


# ------------------------------------------------------------------ sizes
def test_negative_size():
    d = _base()
    _tensor(d, "relu")["size_bytes"] = -4
    _raises(d, "'relu'", "negative", "-4")


@pytest.mark.parametrize("size", [1.5, "300", None, [300]])
def test_non_integer_size(size):
    d = _base()
    _tensor(d, "relu")["size_bytes"] = size
    _raises(d, "'relu'", "not an integer")


@pytest.mark.parametrize("size", [True, False])
def test_bool_size(size):
    d = _base()
    _tensor(d, "ones")["size_bytes"] = size
    _raises(d, "'ones'", "not an integer")


# ------------------------------------------------------------------ duplicates
def test_duplicate_op_id():
    d = _base()
    d["ops"].append(dict(_op(d, "relu"), outputs=[]))
    _raises(d, "duplicate op id", "'relu'")


def test_duplicate_tensor_id():
    d = _base()
    d["tensors"].append(dict(_tensor(d, "ones")))
    _raises(d, "duplicate tensor id", "'ones'")


def test_alias_id_clashes_with_tensor():
    d = _base()
    d["aliases"].append({"id": "mm", "storage": "x", "producer": None})
    _raises(d, "duplicate value id", "'mm'")


# ------------------------------------------------------------------ dangling ids
def test_dangling_op_input():
    d = _base()
    _op(d, "relu")["inputs"] = ["ghost"]
    _raises(d, "'relu'", "'ghost'")


def test_dangling_op_output():
    d = _base()
    _op(d, "relu")["outputs"] = ["relu", "ghost"]
    _raises(d, "'relu'", "'ghost'")


def test_output_claimed_by_other_op():
    d = _base()
    _op(d, "relu")["outputs"] = ["relu", "mm"]
    _raises(d, "'relu'", "'mm'", "another producer")


def test_dangling_mutated_storage():
    d = _base()
    _op(d, "update")["mutates"] = ["ghost"]
    _raises(d, "'update'", "'ghost'")


def test_dangling_tensor_producer():
    d = _base()
    _tensor(d, "relu")["producer"] = "ghost_op"
    _raises(d, "'relu'", "'ghost_op'")


def test_dangling_alias_storage():
    d = _base()
    d["aliases"][0]["storage"] = "ghost"
    _raises(d, "alias 't'", "'ghost'")


def test_dangling_alias_producer():
    d = _base()
    d["aliases"][0]["producer"] = "ghost_op"
    _raises(d, "alias 't'", "'ghost_op'")


@pytest.mark.parametrize("end", ["src", "dst"])
def test_dangling_control_edge_end(end):
    d = _base()
    d["control_edges"][0][end] = "ghost_op"
    _raises(d, "control edge", "'ghost_op'")


def test_self_control_edge():
    d = _base()
    d["control_edges"].append({"src": "mm", "dst": "mm", "reason": "rng"})
    _raises(d, "'mm'", "itself")


def test_dangling_graph_output():
    d = _base()
    d["outputs"] = ["ghost"]
    _raises(d, "'ghost'")


# ------------------------------------------------------------------ structure
def test_cycle_through_control_edge():
    d = _base()
    d["control_edges"].append({"src": "relu_bw", "dst": "relu", "reason": "mutation"})
    msg = _raises(d, "cycle")
    assert any(f"'{op}'" in msg for op in ("relu", "loss", "ones", "relu_bw"))


def test_cycle_through_data_edges():
    d = _base()
    _op(d, "mm")["inputs"] = ["x", "w", "relu"]
    msg = _raises(d, "cycle")
    assert "'mm'" in msg or "'relu'" in msg


def test_consumers_disagree():
    d = _base()
    _tensor(d, "relu")["consumers"] = ["loss"]
    _raises(d, "'relu'", "consumers")


def test_a_loaded_graph_names_each_id_with_one_object() -> None:
    """Every mention of an id in a loaded graph is the same string object (interned), so
    lookups by id compare pointers: producers and edge ends are the ops' ids, inputs and
    outputs the storages' or aliases' ids."""
    g = loads_graph(dumps_graph(tiny_train_step()))
    op_ids = {op.id: op.id for op in g.ops}
    values = {t.id: t.id for t in g.tensors.values()} | {a.id: a.id for a in g.aliases}
    for t in g.tensors.values():
        assert t.producer is None or t.producer is op_ids[t.producer]
        assert all(c is op_ids[c] for c in t.consumers)
    for op in g.ops:
        assert all(v is values[v] for v in (*op.inputs, *op.outputs))
    for e in g.control_edges:
        assert e.src is op_ids[e.src]
        assert e.dst is op_ids[e.dst]
    assert all(o is values[o] for o in g.outputs)
