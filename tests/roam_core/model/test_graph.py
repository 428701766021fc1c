"""The graph model: derived indexes, invariants and errors of Graph construction."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roam_core.base.errors import GraphError
from roam_core.model.graph import (
    Alias,
    ControlEdge,
    EdgeReason,
    Graph,
    Op,
    OpId,
    Phase,
    Tensor,
    TensorId,
    TensorKind,
    round_size,
)
from roam_core.model.samples import SAMPLES, diamond, tiny_train_step
from tests.strategies import random_graphs

F, ACT = Phase.FORWARD, TensorKind.ACTIVATION


def _t(tid: str, size: int = 8, producer: str | None = None) -> Tensor:
    return Tensor(TensorId(tid), size, "float32", (size // 4,), ACT,
                  OpId(producer) if producer else None)


def test_round_size():
    assert [round_size(x) for x in (0, 1, 511, 512, 513, 1024)] == [0, 512, 512, 512, 1024, 1024]
    assert round_size(7, 1) == 7
    assert round_size(7, 0) == 7  # alignment below 1 means exact bytes
    assert round_size(-3) == 0


def test_tiny_train_step_indexes():
    g = tiny_train_step()
    assert g.op_ids == ("mm", "relu", "loss", "ones", "relu_bw", "t", "grad_w", "update")
    # consumers: direct reads, reads through the alias t, and the in-place write
    assert g.tensors["x"].consumers == ("mm", "t", "grad_w")
    assert g.tensors["w"].consumers == ("mm", "update")
    assert g.tensors["relu"].consumers == ("loss", "relu_bw")
    assert g.storage_of("t") == "x"
    assert g.storage_of("update") == "w"
    assert g.value_producer("t") == "t"
    assert g.value_producer("x") is None
    assert g.predecessors("grad_w") == ("t", "relu_bw")
    assert g.predecessors("update") == ("grad_w", "mm")  # data edge, then mutation edge
    assert g.successors("mm") == ("relu", "update")
    assert g.storages_read("grad_w") == ("x", "relu_bw")
    assert g.storages_read("update") == ("w", "grad_w")
    assert g.storages_created("relu_bw") == ("relu_bw",)
    assert g.storages_created("t") == ()
    assert g.resident_ids == ("w", "x")
    assert g.resident_bytes() == 1024
    assert g.resident_bytes(1) == 600
    assert len(g) == 8
    d = EdgeReason.DATA
    assert list(g.edges()) == [
        ("mm", "relu", d), ("relu", "loss", d), ("loss", "ones", d), ("ones", "relu_bw", d),
        ("relu", "relu_bw", d), ("t", "grad_w", d), ("relu_bw", "grad_w", d),
        ("grad_w", "update", d), ("mm", "update", EdgeReason.MUTATION)]


def test_tensor_resident_flag():
    assert _t("a").resident
    assert not _t("a", producer="p").resident


def test_lookups_raise_graph_error():
    g = diamond()
    with pytest.raises(GraphError, match="'zz'"):
        g.op("zz")
    with pytest.raises(GraphError, match="'zz'"):
        g.storage_of("zz")


def test_fingerprint_ignores_name_but_not_sizes():
    g = diamond()
    assert dataclasses.replace(g, name="other").fingerprint() == g.fingerprint()
    h = Graph.build(
        g.ops, [dataclasses.replace(t, size_bytes=t.size_bytes + (t.id == "b"))
                for t in g.tensors.values()], name=g.name)
    assert h.fingerprint() != g.fingerprint()
    e = g.with_control_edges([ControlEdge(OpId("b"), OpId("c"), EdgeReason.RNG)])
    assert e.fingerprint() != g.fingerprint()
    assert len({f().fingerprint() for f in SAMPLES.values()}) == len(SAMPLES)


def test_with_control_edges():
    g = diamond()
    e = g.with_control_edges([ControlEdge(OpId("c"), OpId("b"), EdgeReason.WEIGHT_UPDATE)])
    assert e.predecessors("b") == ("a", "c")
    assert g.predecessors("b") == ("a",)  # the original is untouched
    with pytest.raises(GraphError, match="cycle"):
        g.with_control_edges([ControlEdge(OpId("d"), OpId("a"), EdgeReason.RNG)])


def test_duplicate_tensor_in_build():
    with pytest.raises(GraphError, match="duplicate tensor id 'x'"):
        Graph.build([Op(OpId("a"), "x", F, (), ("x",))], [_t("x", producer="a"), _t("x")])


def test_duplicate_op_id():
    with pytest.raises(GraphError, match="duplicate op id 'a'"):
        Graph.build([Op(OpId("a"), "x", F), Op(OpId("a"), "x", F)], [])


def test_empty_op_id():
    with pytest.raises(GraphError, match="non-empty"):
        Graph.build([Op(OpId(""), "x", F)], [])


def test_tensor_key_mismatch():
    with pytest.raises(GraphError, match=r"'k'.*'x'"):
        Graph(ops=(), tensors={TensorId("k"): _t("x")})


def test_consumers_must_match_when_constructed_directly():
    a = Op(OpId("a"), "x", F, (), ("x",))
    b = Op(OpId("b"), "x", F, ("x",), ())
    with pytest.raises(GraphError, match=r"'x'.*consumers"):
        Graph(ops=(a, b), tensors={TensorId("x"): _t("x", producer="a")})
    g = Graph(ops=(a, b), tensors={TensorId("x"): dataclasses.replace(
        _t("x", producer="a"), consumers=(OpId("b"),))})
    assert g.successors("a") == ("b",)


def test_dangling_consumer_direct():
    with pytest.raises(GraphError, match=r"'x'.*'ghost'"):
        Graph(ops=(), tensors={TensorId("x"): dataclasses.replace(
            _t("x"), consumers=(OpId("ghost"),))})


def test_cycle_is_named():
    ops = [Op(OpId("a"), "x", F, ("vb",), ("va",)), Op(OpId("b"), "x", F, ("va",), ("vb",))]
    with pytest.raises(GraphError, match=r"cycle through op '[ab]'"):
        Graph.build(ops, [_t("va", producer="a"), _t("vb", producer="b")])


def test_alias_of_resident_and_empty_graph():
    g = Graph.build([], [_t("p")], [Alias("pv", TensorId("p"), None)])
    assert g.storage_of("pv") == "p"
    assert g.value_producer("pv") is None
    assert g.op_ids == ()
    assert g.resident_bytes() == 512


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(random_graphs(max_ops=12), st.data())
def test_with_control_edges_equals_a_graph_built_from_scratch(g: Graph, data) -> None:
    """The copy re-indexes only the edges: every index, the fingerprint and the errors (cycle,
    self-loop, unknown op) equal those of ``Graph`` built with the longer edge tuple."""
    ops = [*g.op_ids, "no such op"]
    extra = [ControlEdge(data.draw(st.sampled_from(ops)), data.draw(st.sampled_from(ops)),
                         EdgeReason.WEIGHT_UPDATE)
             for _ in range(data.draw(st.integers(0, 4)))]

    def build(how):  # the graph, or the error's message
        try:
            return how()
        except GraphError as e:
            return str(e)

    full = build(lambda: dataclasses.replace(g, control_edges=g.control_edges + tuple(extra)))
    fast = build(lambda: g.with_control_edges(extra))
    if isinstance(full, str):
        assert fast == full
        return
    assert fast == full
    assert fast.fingerprint() == full.fingerprint()
    assert {k: v for k, v in vars(fast).items() if not k.startswith("_fingerprint")} == \
        {k: v for k, v in vars(full).items() if not k.startswith("_fingerprint")}


@pytest.mark.slow
def test_a_copy_with_control_edges_knows_its_original_weakly() -> None:
    """``derived_from`` names the original while it lives, keeps nothing alive, and the copy
    still pickles (what it was made from is not part of it)."""
    import gc
    import pickle

    g = diamond()
    copy = g.with_control_edges([ControlEdge(OpId("b"), OpId("c"), EdgeReason.RNG)])
    base, extra = copy.derived_from()
    assert base is g
    assert extra == (ControlEdge(OpId("b"), OpId("c"), EdgeReason.RNG),)
    again = pickle.loads(pickle.dumps(copy))
    assert again == copy
    assert again.derived_from() is None
    del g, base
    gc.collect()
    assert copy.derived_from() is None
