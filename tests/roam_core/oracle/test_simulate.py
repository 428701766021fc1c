"""The live-bytes oracle: hand-computed curves and a naive reference on random graphs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roam_core.base.errors import GraphError
from roam_core.model.graph import Graph, Op, OpId, Phase, Tensor, TensorId, TensorKind, round_size
from roam_core.model.samples import chain3, diamond, tiny_train_step
from roam_core.oracle.simulate import Lifetime, lifetimes, simulate
from tests.strategies import orders_of, random_graphs


def _naive(graph: Graph, order, alignment_bytes: int) -> list[int]:
    """Per step: walk every storage, decide liveness from first principles."""
    n = len(order)
    out = []
    for step in range(n):
        live = 0
        for t in graph.tensors.values():
            size = round_size(t.size_bytes, alignment_bytes)
            if t.producer is None:
                live += size
                continue
            made = order.index(t.producer)
            uses = [order.index(op.id) for op in graph.ops
                    if op.id != t.producer
                    and (any(graph.storage_of(v) == t.id for v in op.inputs)
                         or t.id in op.mutates)]
            last = n - 1 if t.id in graph.outputs else max([made, *uses])
            if made <= step <= last:
                live += size
        out.append(live)
    return out


def test_chain3():
    p = simulate(chain3(), alignment_bytes=1)
    assert (p.live_bytes, p.peak_bytes, p.peak_step) == ((100, 200, 200), 200, 1)
    assert simulate(chain3()).live_bytes == (512, 1024, 1024)


def test_diamond_both_orders():
    g = diamond()
    assert simulate(g, alignment_bytes=1).live_bytes == (100, 300, 350, 260)
    assert simulate(g, ["a", "c", "b", "d"], alignment_bytes=1).live_bytes == (
        100, 150, 350, 260)
    assert lifetimes(g, ["a", "c", "b", "d"]) == {
        "a": Lifetime(0, 3), "c": Lifetime(1, 4), "b": Lifetime(2, 4), "d": Lifetime(3, 4)}


def test_tiny_train_step_exact():
    g = tiny_train_step()
    p = simulate(g, alignment_bytes=1)
    # mm, relu, loss(out), ones, relu_bw, t (view: nothing new), grad_w, update
    assert p.live_bytes == (300, 600, 304, 604, 904, 304, 704, 404)
    assert (p.resident_bytes, p.peak_bytes, p.peak_step) == (600, 1504, 4)
    assert p.total_bytes() == (900, 1200, 904, 1204, 1504, 904, 1304, 1004)
    assert lifetimes(g, g.op_ids)["loss"] == Lifetime(2, 8)  # output: to the end


def test_unused_and_zero_sized():
    f, k = Phase.FORWARD, TensorKind.TEMPORARY
    g = Graph.build(
        [Op(OpId("a"), "x", f, (), ("u", "z")), Op(OpId("b"), "x", f, (), ("v",))],
        [Tensor(TensorId("u"), 10, "f", (), k, OpId("a")),
         Tensor(TensorId("z"), 0, "f", (0,), k, OpId("a")),
         Tensor(TensorId("v"), 1, "f", (), k, OpId("b"))],
    )
    assert lifetimes(g, ("a", "b"))["u"] == Lifetime(0, 1)
    assert simulate(g, alignment_bytes=1).live_bytes == (10, 1)
    assert simulate(g).live_bytes == (512, 512)


def test_empty_graph():
    p = simulate(Graph.build([], [Tensor(TensorId("p"), 3, "f", (), TensorKind.PARAMETER,
                                         None)]))
    assert (p.live_bytes, p.peak_bytes, p.peak_step) == ((), 512, -1)


@pytest.mark.parametrize("order", [("a", "b"), ("a", "b", "c", "d", "d"),
                                   ("a", "b", "c", "zz"), ("a", "b", "c", "c")])
def test_order_must_be_permutation(order):
    with pytest.raises(GraphError):
        simulate(diamond(), order)


def test_lifetimes_override():
    g = diamond()
    lts = lifetimes(g, g.op_ids)
    lts["d"] = Lifetime(0, 4)
    assert simulate(g, g.op_ids, alignment_bytes=1,
                    lifetimes_override=lts).live_bytes == (110, 310, 360, 260)


@given(st.data())
def test_matches_naive_reference(data):
    g = data.draw(random_graphs(max_ops=10))
    order = data.draw(orders_of(g))
    align = data.draw(st.sampled_from([1, 512]))
    p = simulate(g, order, alignment_bytes=align)
    assert list(p.total_bytes()) == _naive(g, list(order), align)
    if order:
        assert p.peak_bytes == max(p.total_bytes())
        assert p.total_bytes()[p.peak_step] == p.peak_bytes
        assert all(x < p.peak_bytes for x in p.total_bytes()[:p.peak_step])


@pytest.mark.slow
@given(random_graphs(), st.integers(0, 10**6), st.sampled_from([1, 512]))
def test_vectorised_simulate_equals_the_lifetimes_path(g: Graph, seed: int, a: int) -> None:
    """simulate's array path gives the curve of the per-storage lifetimes, step by step."""
    import random

    order = list(g.op_ids)
    random.Random(seed).shuffle(order)  # any permutation: validity is not simulate's business
    fast = simulate(g, order, alignment_bytes=a)
    ref = simulate(g, order, alignment_bytes=a, lifetimes_override=lifetimes(g, order))
    assert fast == ref


def test_simulate_rejects_orders_that_are_not_permutations() -> None:
    g = diamond()
    for bad in (["a", "b", "c"], ["a", "b", "c", "c"], ["a", "b", "c", "x"],
                ["a", "b", "c", "d", "d"]):
        with pytest.raises(GraphError):
            simulate(g, bad)


@pytest.mark.slow
@given(random_graphs(), st.data())
def test_a_copy_with_control_edges_shares_the_arrays_and_the_profile(g: Graph, data) -> None:
    """``Graph.with_control_edges`` keeps the ops and storages, so :func:`simulate` reuses the
    original's arrays for it; the profile equals that of the same graph built from scratch,
    which computes its own."""
    from roam_core.model.graph import ControlEdge, EdgeReason
    from roam_core.oracle import simulate as sim

    order = data.draw(orders_of(g))
    pos = {op: i for i, op in enumerate(order)}
    pairs = [(a, b) for a in order for b in order if pos[a] < pos[b]][:3]
    extra = [ControlEdge(a, b, EdgeReason.RNG) for a, b in pairs]
    a = data.draw(st.sampled_from([1, 512]))
    want = simulate(g, order, alignment_bytes=a)
    copy = g.with_control_edges(extra)
    assert sim._arrays(copy, a) is sim._arrays(g, a)
    assert simulate(copy, order, alignment_bytes=a) == want
    scratch = Graph(g.ops, g.tensors, g.aliases, g.control_edges + tuple(extra), g.outputs)
    assert sim._arrays(scratch, a) is not sim._arrays(g, a)
    assert simulate(scratch, order, alignment_bytes=a) == want


def _lifetimes_by_definition(g: Graph, order: list[str]) -> dict[str, Lifetime]:
    """From the producer's step to past the last consumer's (at least one step), outputs to
    the end: every storage with a producer, zero-size ones too."""
    pos = {op: i for i, op in enumerate(order)}
    out = {}
    for t in g.tensors.values():
        if t.producer is None:
            continue
        s = pos[t.producer]
        if t.id in g.outputs:
            e = len(order)
        else:
            e = max((pos[c] + 1 for c in t.consumers), default=s + 1)
        out[t.id] = Lifetime(s, max(e, s + 1))
    return out


@pytest.mark.slow
@given(random_graphs(), st.data())
def test_lifetimes_equal_their_definition(g: Graph, data) -> None:
    """The vectorised lifetimes (arrays shared with a copy that has more control edges)
    are the definition's, in any valid order; a non-permutation is refused by name."""
    order = list(data.draw(orders_of(g)))
    want = _lifetimes_by_definition(g, order)
    assert lifetimes(g, order) == want
    assert list(lifetimes(g, tuple(order))) == list(want)  # storage order kept
    assert lifetimes(g.with_control_edges([]), order) == want
    with pytest.raises(GraphError):
        lifetimes(g, order[:-1])
    if len(order) > 1:
        with pytest.raises(GraphError):
            lifetimes(g, [*order[:-1], order[0]])  # one twice, one missing
    with pytest.raises(GraphError):
        lifetimes(g, [*order[:-1], "no-such-op"])
