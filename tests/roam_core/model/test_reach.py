"""Reachability bitsets: hand-checked small graphs and properties on random DAGs."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
from roam_core.model.reach import iter_bits, reachability, topological_indices
from roam_core.model.samples import chain3, diamond, tiny_train_step
from tests.strategies import orders_of, random_graphs


def _closure(graph: Graph) -> set[tuple[str, str]]:
    """Naive transitive closure (Floyd–Warshall over op ids)."""
    ids = list(graph.op_ids)
    reach = {(s, d) for s, d, _ in graph.edges()}
    for k, i, j in itertools.product(ids, ids, ids):
        if (i, k) in reach and (k, j) in reach:
            reach.add((i, j))
    return reach


def test_chain3_spans_and_key_points():
    r = reachability(chain3())
    assert r.ancestors == (0b000, 0b001, 0b011)
    assert r.descendants == (0b110, 0b100, 0b000)
    assert [(r.asap(o), r.alap(o)) for o in "abc"] == [(1, 1), (2, 2), (3, 3)]
    assert r.key_points() == ("a", "b", "c")


def test_diamond_bitsets():
    r = reachability(diamond())
    assert r.ancestors == (0b0000, 0b0001, 0b0001, 0b0111)
    assert r.descendants == (0b1110, 0b1000, 0b1000, 0b0000)
    assert not r.comparable("b", "c")
    assert r.comparable("a", "d")
    assert r.comparable("b", "b")
    assert not r.is_ancestor("d", "a")
    assert [(r.asap(o), r.alap(o)) for o in "abcd"] == [(1, 1), (2, 3), (2, 3), (4, 4)]
    assert r.key_points() == ("a", "d")
    assert r.ids(0b0110) == ("b", "c")
    assert r.mask(["b", "c"]) == 0b0110


def test_control_edges_count():
    """A control edge b -> c makes the diamond a chain."""
    g = diamond().with_control_edges([ControlEdge(OpId("b"), OpId("c"), EdgeReason.RNG)])
    r = reachability(g)
    assert r.is_ancestor("b", "c")
    assert r.key_points() == ("a", "b", "c", "d")


def test_tiny_train_step_update_after_forward():
    g = tiny_train_step()
    r = reachability(g)
    assert r.is_ancestor("mm", "update")  # mutation control edge
    assert r.is_ancestor("t", "grad_w")
    assert not r.comparable("t", "mm")
    assert r.alap("update") == len(g.ops)


def test_non_topological_program_order():
    """Program order need not be topological; bits still index program positions."""
    f, act = Phase.FORWARD, TensorKind.ACTIVATION
    g = Graph.build(
        [Op(OpId("late"), "x", f, ("e",), ("l",)), Op(OpId("early"), "x", f, (), ("e",))],
        [Tensor("e", 8, "f", (2,), act, OpId("early")), Tensor("l", 8, "f", (2,), act,
                                                                  OpId("late"))],
    )
    assert topological_indices(g) == [1, 0]
    r = reachability(g)
    assert r.ancestors == (0b10, 0b00)
    assert r.is_ancestor("early", "late")
    assert r.key_points() == ("early", "late")


def test_iter_bits_roundtrip():
    assert list(iter_bits(0)) == []
    assert list(iter_bits(1 << 200 | 5)) == [0, 2, 200]


@pytest.mark.slow
@given(random_graphs(max_ops=9))
def test_matches_naive_closure(g):
    r = reachability(g)
    closure = _closure(g)
    for a in g.op_ids:
        for b in g.op_ids:
            assert r.is_ancestor(a, b) == ((a, b) in closure), (a, b)
            assert r.is_ancestor(a, b) == bool(r.descendants[r.index[a]] >> r.index[b] & 1)


@pytest.mark.slow
@given(st.data())
def test_spans_bracket_random_orders(data):
    g = data.draw(random_graphs(max_ops=12))
    r = reachability(g)
    keys = r.key_points()
    for _ in range(3):
        order = data.draw(orders_of(g))
        for step, op in enumerate(order, start=1):
            assert r.asap(op) <= step <= r.alap(op)
        for op in keys:
            assert order.index(op) + 1 == r.asap(op)
    # program order is one valid order: key points sit where program order has them
    assert [g.op_ids.index(k) + 1 for k in keys] == [r.asap(k) for k in keys]


def test_constructed_from_index_only():
    r = reachability(diamond())
    s = type(r)(r.index, r.ancestors, r.descendants)
    assert s.op_ids == ("a", "b", "c", "d")
    assert s.key_points() == ("a", "d")


def test_forget_reachability_drops_the_cached_bitsets() -> None:
    from roam_core.model.reach import forget_reachability, reachability
    from roam_core.model.samples import diamond

    g = diamond()
    r = reachability(g)
    assert reachability(g) is r
    forget_reachability()
    again = reachability(g)
    assert again is not r
    assert again == r


def _shuffled(g: Graph, seed: int) -> Graph:
    """The same DAG with its ops in a random program order (not topological in general)."""
    import random

    ops = list(g.ops)
    random.Random(seed).shuffle(ops)
    return Graph.build(ops, g.tensors.values(), aliases=g.aliases,
                       control_edges=g.control_edges, outputs=g.outputs, name=g.name)


@pytest.mark.slow
@given(random_graphs(max_ops=14), st.integers(0, 3))
def test_closure_sizes_and_key_points_match_the_bitsets(g, seed):
    """The frontier pass (masks dropped after their last reader) counts exactly what the
    full bitsets hold, and gives the same key points, in any program order."""
    from roam_core.model.reach import closure_sizes, forget_reachability, key_points

    g = _shuffled(g, seed) if seed else g
    forget_reachability()
    anc, desc = closure_sizes(g)  # no cached bitsets: the frontier pass
    keys = key_points(g)
    r = reachability(g)
    assert anc.tolist() == [m.bit_count() for m in r.ancestors]
    assert desc.tolist() == [m.bit_count() for m in r.descendants]
    assert keys == r.key_points()
    cached = closure_sizes(g)  # now from the cached bitsets
    assert cached[0].tolist() == anc.tolist()
    assert cached[1].tolist() == desc.tolist()
    assert key_points(g) == keys


def test_decompose_without_bitsets_equals_decompose_with_them():
    from roam_core.model.reach import forget_reachability
    from roam_core.ordering.decompose import decompose

    g = tiny_train_step()
    forget_reachability()
    a = decompose(g, g.op_ids, node_limit=3)
    b = decompose(g, g.op_ids, node_limit=3, reach=reachability(g))
    assert [(t.id, t.kind, t.op_ids) for t in a.walk()] == [
        (t.id, t.kind, t.op_ids) for t in b.walk()]
    assert a.task_of_op() == b.task_of_op()


@pytest.mark.slow
@given(random_graphs(max_ops=10), st.integers(0, 3))
def test_shifted_descendants_are_the_plain_masks(g, seed):
    """Descendant masks are stored shifted (``Descendants``); every access gives the absolute
    mask of the naive closure, in topological and shuffled program orders."""
    from roam_core.model.reach import Descendants

    g = _shuffled(g, seed) if seed else g
    r = reachability(g)
    closure = _closure(g)
    ids = g.op_ids
    plain = tuple(sum(1 << j for j, b in enumerate(ids) if (a, b) in closure) for a in ids)
    assert isinstance(r.descendants, Descendants)
    assert isinstance(r.ancestors, Descendants)
    assert tuple(r.descendants) == plain
    assert r.descendants == plain
    assert [r.descendants[i] for i in range(len(ids))] == list(plain)
    assert [r.descendants.bit_count(i) for i in range(len(ids))] == [m.bit_count() for m in plain]
    assert Descendants(plain) == plain
    assert [r.alap(op) for op in ids] == [len(ids) - m.bit_count() for m in plain]


@pytest.mark.slow
@given(random_graphs(max_ops=14), st.integers(0, 3), st.sampled_from([1, 2, 16]))
def test_masks_on_shared_ints_are_the_plain_masks(g, seed, max_extra):
    """With any limit on the extra bits of a shared whole int (1: an int at every op), each
    access still gives the naive closure's absolute masks, both directions, in topological
    and shuffled program orders."""
    from unittest import mock

    from roam_core.model import reach as reach_mod

    g = _shuffled(g, seed) if seed else g
    with mock.patch.object(reach_mod, "_MAX_EXTRA", max_extra):
        reach_mod.forget_reachability()
        r = reachability(g)
    reach_mod.forget_reachability()
    closure = _closure(g)
    ids = g.op_ids
    desc = tuple(sum(1 << j for j, b in enumerate(ids) if (a, b) in closure) for a in ids)
    anc = tuple(sum(1 << j for j, a in enumerate(ids) if (a, b) in closure) for b in ids)
    assert tuple(r.ancestors) == anc
    assert tuple(r.descendants) == desc
    with mock.patch.object(reach_mod, "_CACHED_MASKS", 1):  # built again, from the cache too
        back = range(len(ids) - 1, -1, -1)
        for _ in range(2):
            assert [r.ancestors[i] for i in back] == [anc[i] for i in back]
            assert [r.descendants[i] for i in back] == [desc[i] for i in back]
    assert [r.ancestors.bit_count(i) for i in range(len(ids))] == [m.bit_count() for m in anc]
    assert [r.descendants.bit_count(i) for i in range(len(ids))] == [
        m.bit_count() for m in desc]
    assert r.key_points() == reachability(g).key_points()
    if max_extra == 16 and any(len(preds) == 1 and preds[0] != ids[0] for preds in
                               reach_mod.adjacency(g).preds):
        # a chain's ops share their input's int (extra bits listed, no int of their own)
        assert any(r.ancestors._extra)


@pytest.mark.slow
@given(random_graphs(max_ops=40), st.integers(0, 3), st.sampled_from([1, 3, 16]))
def test_joins_of_branches_on_different_ints_are_exact(g, seed, max_extra):
    """Joins of inputs whose whole ints differ (branches that built ints of their own, at
    small extra-bit limits, on graphs wide enough for both kinds of join) still give the
    naive closure, both directions."""
    from unittest import mock

    from roam_core.model import reach as reach_mod

    g = _shuffled(g, seed) if seed else g
    with mock.patch.object(reach_mod, "_MAX_EXTRA", max_extra):
        r = reach_mod._reachability(g)
    closure = _closure(g)
    ids = g.op_ids
    assert tuple(r.ancestors) == tuple(
        sum(1 << j for j, a in enumerate(ids) if (a, b) in closure) for b in ids)
    assert tuple(r.descendants) == tuple(
        sum(1 << j for j, b in enumerate(ids) if (a, b) in closure) for a in ids)


@pytest.mark.slow
@given(random_graphs(max_ops=12), st.integers(0, 2), st.sampled_from([1, 3]))
def test_mask_bit_queries_match_the_masks(g, seed, max_extra):
    """``Masks.has`` (the extra bits, then the whole int) answers every bit of every mask,
    and ``is_ancestor`` with it."""
    from unittest import mock

    from roam_core.model import reach as reach_mod

    g = _shuffled(g, seed) if seed else g
    with mock.patch.object(reach_mod, "_MAX_EXTRA", max_extra):
        reach_mod.forget_reachability()
        r = reachability(g)
    reach_mod.forget_reachability()
    n = len(g.op_ids)
    for masks in (r.ancestors, r.descendants):
        for i in range(n):
            assert [masks.has(i, j) for j in range(n)] == [bool(masks[i] >> j & 1)
                                                           for j in range(n)]
    closure = _closure(g)
    assert all(r.is_ancestor(a, b) == ((a, b) in closure) for a in g.op_ids for b in g.op_ids)


@pytest.mark.slow
@given(random_graphs(), st.data())
def test_adjacency_of_a_copy_with_control_edges_equals_its_own(g, data) -> None:
    """The adjacency of ``g.with_control_edges(extra)``, derived from ``g``'s cached one,
    equals the one computed from the copy's own indices (neighbour order included), for
    edges already present, repeated, new, and a program order no longer topological."""
    from roam_core.model import reach
    from roam_core.model.graph import ControlEdge, EdgeReason

    order = data.draw(orders_of(g))
    pos = {op: i for i, op in enumerate(order)}
    pairs = [(a, b) for a in order for b in order if pos[a] < pos[b]]
    picked = data.draw(st.lists(st.sampled_from(pairs), max_size=6)) if pairs else []
    extra = [ControlEdge(a, b, EdgeReason.RNG) for a, b in picked]
    base = reach.adjacency(g)
    copy = g.with_control_edges(extra)
    derived = reach.adjacency(copy)
    assert derived.index is base.index  # shared, not rebuilt
    reach._ADJ.clear()
    own = reach.adjacency(copy)  # computed from the copy's own neighbour lists
    assert own is not derived
    assert own.preds is not derived.preds
    assert (derived.index, derived.preds, derived.succs, derived.topo) == (
        own.index, own.preds, own.succs, own.topo)
    assert reachability(copy).ancestors == reach._reachability(copy).ancestors


@pytest.mark.slow
@given(random_graphs(), st.data())
def test_compact_views_take_the_graphs_neighbours(g, data) -> None:
    """A compact view's predecessor / successor indices (taken from the cached adjacency)
    are the graph's own, in its order, also for a copy with more control edges."""
    from roam_core.model.dag_view import compact
    from roam_core.model.graph import ControlEdge, EdgeReason

    order = data.draw(orders_of(g))
    pos = {op: i for i, op in enumerate(order)}
    pairs = [(a, b) for a in order for b in order if pos[a] < pos[b]]
    picked = data.draw(st.lists(st.sampled_from(pairs), max_size=4)) if pairs else []
    for graph in (g, g.with_control_edges([ControlEdge(a, b, EdgeReason.RNG)
                                           for a, b in picked])):
        cg = compact(graph)
        ix = {op: i for i, op in enumerate(graph.op_ids)}
        assert cg.preds == tuple(tuple(ix[p] for p in graph.predecessors(op))
                                 for op in graph.op_ids)
        assert cg.succs == tuple(tuple(ix[s] for s in graph.successors(op))
                                 for op in graph.op_ids)


def _ladder(rungs: int):
    """Two chains, each op feeding the next op of both: every join meets two branches
    whose closures differ by the other branch's last op."""
    from roam_core.model.graph import ControlEdge, EdgeReason, Graph, Op, Phase

    ops = tuple(Op(id=f"{c}{k}", target="aten.mm.default", phase=Phase.FORWARD, inputs=(),
                   outputs=()) for k in range(rungs) for c in "ab")
    edges = tuple(ControlEdge(f"{s}{k - 1}", f"{d}{k}", EdgeReason.RNG)
                  for k in range(1, rungs) for s in "ab" for d in "ab")
    return Graph(ops=ops, tensors={}, control_edges=edges)


def test_a_ladder_shares_its_whole_ints() -> None:
    """Joins whose inputs grew ints of their own keep the top input's int plus the few ops
    past it: the masks are exact and the whole ints stay a fraction of the plain masks'
    ``N^2 / 8`` bytes (every op building one would be all of it)."""
    from roam_core.model import reach as reach_mod

    g = _ladder(1500)
    r = reach_mod._reachability(g)
    n = len(g.ops)
    assert [r.ancestors.bit_count(i) for i in range(n)] == [i // 2 * 2 for i in range(n)]
    assert [r.descendants.bit_count(i) for i in range(n)] == [
        n - 2 - i // 2 * 2 for i in range(n)]
    assert r.ancestors[n - 1] == (1 << (n - 2)) - 1
    assert r.descendants[0] == ((1 << n) - 1) ^ 0b11
    plain = n * n // 8
    assert r.ancestors.stored_bytes() < plain // 4
    assert r.descendants.stored_bytes() < plain // 4
    small = _ladder(7)
    closure = _closure(small)
    ids = small.op_ids
    assert tuple(reach_mod._reachability(small).ancestors) == tuple(
        sum(1 << j for j, a in enumerate(ids) if (a, b) in closure) for b in ids)
