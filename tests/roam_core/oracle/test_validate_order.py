"""check_order: one test per violation kind, and agreement with random valid orders."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roam_core.base.errors import ViolationKind
from roam_core.model.graph import (
    ControlEdge,
    EdgeReason,
    Graph,
    Op,
    OpId,
    Phase,
    Tensor,
    TensorKind,
)
from roam_core.model.samples import diamond, tiny_train_step
from roam_core.oracle.validate import check_order
from tests.strategies import orders_of, random_graphs


def _kinds(graph, order):
    return [(v.kind, v.subject_id) for v in check_order(graph, order)]


def _rng_graph() -> Graph:
    f = Phase.FORWARD
    t = [Tensor(f"{x}", 4, "f", (1,), TensorKind.ACTIVATION, OpId(x)) for x in ("r1", "r2")]
    return Graph.build(
        [Op(OpId("r1"), "aten.rand.default", f, (), ("r1",), (), True),
         Op(OpId("r2"), "aten.rand.default", f, (), ("r2",), (), True)],
        t, control_edges=[ControlEdge(OpId("r1"), OpId("r2"), EdgeReason.RNG)])


def test_valid_orders():
    g = diamond()
    assert check_order(g, g.op_ids) == []
    assert check_order(g, ["a", "c", "b", "d"]) == []


def test_precedence():
    v = check_order(diamond(), ["a", "b", "d", "c"])
    assert [(x.kind, x.subject_id) for x in v] == [(ViolationKind.PRECEDENCE, "d")]
    assert "'c'" in v[0].message
    assert "'d'" in v[0].message


def test_mutation():
    """Swapping the forward read of w and the in-place update of w."""
    g = tiny_train_step()
    order = ["update" if o == "mm" else "mm" if o == "update" else o for o in g.op_ids]
    assert _kinds(g, order) == [(ViolationKind.PRECEDENCE, "relu"),
                                (ViolationKind.PRECEDENCE, "update"),
                                (ViolationKind.MUTATION_ORDER, "update")]


def test_mutation_only():
    """A pure write-after-read hazard: no data edge between the two ops."""
    f = Phase.FORWARD
    g = Graph.build(
        [Op(OpId("read"), "x", f, ("w",), ("y",)),
         Op(OpId("write"), "add_", f, ("w",), (), ("w",))],
        [Tensor("w", 4, "f", (1,), TensorKind.PARAMETER, None),
         Tensor("y", 4, "f", (1,), TensorKind.ACTIVATION, OpId("read"))],
        control_edges=[ControlEdge(OpId("read"), OpId("write"), EdgeReason.MUTATION)])
    assert check_order(g, ["read", "write"]) == []
    v = check_order(g, ["write", "read"])
    assert [(x.kind, x.subject_id) for x in v] == [(ViolationKind.MUTATION_ORDER, "write")]
    assert "'read'" in v[0].message


def test_rng():
    g = _rng_graph()
    assert check_order(g, ["r1", "r2"]) == []
    v = check_order(g, ["r2", "r1"])
    assert [x.kind for x in v] == [ViolationKind.RNG_ORDER]
    assert "'r1'" in v[0].message
    assert "'r2'" in v[0].message


def test_weight_update_edge_is_precedence():
    g = diamond().with_control_edges(
        [ControlEdge(OpId("c"), OpId("b"), EdgeReason.WEIGHT_UPDATE)])
    assert _kinds(g, ["a", "b", "c", "d"]) == [(ViolationKind.PRECEDENCE, "b")]


def test_missing():
    assert _kinds(diamond(), ["a", "b", "c"]) == [(ViolationKind.MISSING_OP, "d")]


def test_duplicate():
    assert _kinds(diamond(), ["a", "b", "c", "d", "b"]) == [(ViolationKind.DUPLICATE_OP, "b")]


def test_unknown():
    v = check_order(diamond(), ["a", "b", "c", "d", "zz"])
    assert [(x.kind, x.subject_id) for x in v] == [(ViolationKind.UNKNOWN_OP, "zz")]
    assert "'zz'" in v[0].message


def test_several_at_once():
    assert _kinds(diamond(), ["d", "zz", "b", "b"]) == [
        (ViolationKind.UNKNOWN_OP, "zz"), (ViolationKind.DUPLICATE_OP, "b"),
        (ViolationKind.MISSING_OP, "a"), (ViolationKind.MISSING_OP, "c"),
        (ViolationKind.PRECEDENCE, "d")]


@pytest.mark.slow
@given(st.data())
def test_random_valid_orders_pass_and_swaps_fail(data):
    g = data.draw(random_graphs(max_ops=10))
    order = data.draw(orders_of(g))
    assert check_order(g, order) == []
    # swapping two ops joined by an edge must be reported
    edges = [(s, d) for s, d, _ in g.edges()]
    if edges:
        s, d = data.draw(st.sampled_from(edges))
        bad = list(order)
        i, j = bad.index(s), bad.index(d)
        bad[i], bad[j] = bad[j], bad[i]
        assert check_order(g, bad) != []


@pytest.mark.slow
@given(random_graphs(max_ops=14), st.data())
def test_vectorised_pass_clears_exactly_the_orders_the_full_check_finds_valid(graph, data):
    """``check_order`` answers from a vectorised pass when it can: on random orders (valid
    ones, swaps, shuffles, drops, duplicates, unknown names) the pass clears an order iff the
    op-by-op check finds nothing, and ``check_order`` returns the op-by-op check's list."""
    from unittest import mock

    from roam_core.oracle.validate import order_rules as validate

    order = list(data.draw(orders_of(graph)))
    kind = data.draw(st.sampled_from(["valid", "swap", "shuffle", "drop", "dup", "unknown"]))
    if kind == "swap" and len(order) > 1:
        i = data.draw(st.integers(0, len(order) - 2))
        order[i], order[i + 1] = order[i + 1], order[i]
    elif kind == "shuffle":
        order = data.draw(st.permutations(order))
    elif kind == "drop" and order:
        order.pop(data.draw(st.integers(0, len(order) - 1)))
    elif kind == "dup" and order:
        order[data.draw(st.integers(0, len(order) - 1))] = order[0]
    elif kind == "unknown" and order:
        order[-1] = "no such op"
    with mock.patch.object(validate, "_obviously_valid", return_value=False):
        full = check_order(graph, order)
    assert validate._obviously_valid(graph, order) == (full == [])
    assert check_order(graph, order) == full


@pytest.mark.slow
@given(random_graphs(), st.data())
def test_a_copy_with_control_edges_checks_its_own_edges(g, data) -> None:
    """The edge index of ``g.with_control_edges(extra)`` (the original's, the new edges
    appended) holds the edges of the copy's own index, and orders that break only a new edge
    are caught as they are on the same graph built from scratch."""
    from roam_core.model.graph import ControlEdge, EdgeReason, Graph
    from roam_core.oracle.validate import order_rules as validate

    order = list(data.draw(orders_of(g)))
    pos = {op: i for i, op in enumerate(order)}
    pairs = [(a, b) for a in order for b in order if pos[a] < pos[b]]
    picked = data.draw(st.lists(st.sampled_from(pairs), max_size=4)) if pairs else []
    extra = [ControlEdge(a, b, EdgeReason.RNG) for a, b in picked]
    assert check_order(g, order) == []  # the original's index is built and cached
    copy = g.with_control_edges(extra)
    scratch = Graph(g.ops, g.tensors, g.aliases, g.control_edges + tuple(extra), g.outputs)
    base = validate._edge_index(g)
    mine = validate._edge_index(copy)
    assert mine.index is base.index  # extended, not rebuilt
    own = validate._edge_index(scratch)
    assert set(zip(mine.src.tolist(), mine.dst.tolist())) == set(
        zip(own.src.tolist(), own.dst.tolist()))
    for perm in (order, order[::-1], data.draw(st.permutations(order))):
        assert check_order(copy, perm) == check_order(scratch, perm)
