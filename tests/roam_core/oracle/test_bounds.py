"""Lower bounds: hand-computed values and soundness against simulated orders."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
)
from roam_core.model.samples import chain3, diamond, tiny_train_step
from roam_core.oracle.bounds import (
    best_lower_bound,
    forced_live_masks,
    group_lower_bound,
    live_set_lower_bound,
    optimizer_groups,
    update_group_lower_bound,
)
from roam_core.oracle.simulate import simulate
from tests.strategies import orders_of, random_graphs


def _all_orders(graph: Graph):
    """Every valid order (small graphs only)."""
    preds = {op: set(graph.predecessors(op)) for op in graph.op_ids}

    def rec(done: list[str], left: set[str]):
        if not left:
            yield tuple(done)
            return
        for op in sorted(left):
            if preds[op] <= set(done):
                done.append(op)
                yield from rec(done, left - {op})
                done.pop()

    yield from rec([], set(graph.op_ids))


def _min_peak(graph: Graph, alignment_bytes: int) -> int:
    return min(simulate(graph, o, alignment_bytes=alignment_bytes).peak_bytes
               for o in _all_orders(graph))


def test_chain3_exact():
    lb = live_set_lower_bound(chain3(), alignment_bytes=1)
    assert lb.forced_bytes == (100, 200, 200)
    assert (lb.bound_bytes, lb.op_id, lb.storages) == (200, "b", ("a", "b"))
    assert lb.bytes == 200


def test_diamond_live_set_and_group():
    g = diamond()
    assert forced_live_masks(g) == {"a": 0b0111, "b": 0b1010, "c": 0b1100, "d": 0b1000}
    lb = live_set_lower_bound(g, alignment_bytes=1)
    # at b: a (read by b) and b; at c: a and c; at d: b, c, d
    assert lb.forced_bytes == (100, 300, 150, 260)
    assert (lb.bound_bytes, lb.op_id) == (300, "b")
    # the exact bound of the whole graph is its true optimum, 350 (both orders reach it)
    assert group_lower_bound(g, g.op_ids, alignment_bytes=1).bound_bytes == 350
    assert _min_peak(g, 1) == 350


def test_rounding_and_resident():
    g = tiny_train_step()
    lb = live_set_lower_bound(g)  # 512-byte rounding: every storage is one block
    assert lb.resident_bytes == 1024
    # at relu_bw: relu, loss (output), ones, relu_bw are forced: 4 blocks
    assert (lb.bound_bytes, lb.op_id) == (1024 + 4 * 512, "relu_bw")
    assert lb.bound_bytes <= simulate(g).peak_bytes


def test_output_and_unused_storage():
    """An unused storage is live at its producer only; an output until the end."""
    f, k = Phase.FORWARD, TensorKind.ACTIVATION
    g = Graph.build(
        [Op(OpId("a"), "x", f, (), ("u", "o")), Op(OpId("b"), "x", f, (), ("w",)),
         Op(OpId("c"), "x", f, ("w",), ("z",))],
        [Tensor("u", 10, "f", (), k, OpId("a")), Tensor("o", 20, "f", (), k, OpId("a")),
         Tensor("w", 40, "f", (), k, OpId("b")), Tensor("z", 80, "f", (), k, OpId("c"))],
        outputs=[TensorId("o")],
    )
    lb = live_set_lower_bound(g, alignment_bytes=1)
    # a: u+o; b: w (o is not forced: a may run after b); c: w+z
    assert lb.forced_bytes == (30, 40, 120)
    assert _min_peak(g, 1) == 120  # b, c, a: the output is made last


def test_alias_and_mutation_extend_lifetime():
    """Reading a storage through a view, or writing it in place, keeps it live."""
    f, k = Phase.FORWARD, TensorKind.ACTIVATION
    g = Graph.build(
        [Op(OpId("p"), "x", f, (), ("s",)), Op(OpId("v"), "view", f, ("s",), ("sv",)),
         Op(OpId("m"), "x", f, (), ("t",)), Op(OpId("use"), "x", f, ("sv", "t"), ("r",)),
         Op(OpId("w"), "add_", f, ("s",), (), (TensorId("s"),))],
        [Tensor("s", 100, "f", (), k, OpId("p")), Tensor("t", 10, "f", (), k, OpId("m")),
         Tensor("r", 1, "f", (), k, OpId("use"))],
        [Alias("sv", TensorId("s"), OpId("v"))],
        [ControlEdge(OpId("use"), OpId("w"), EdgeReason.MUTATION)],
    )
    lb = live_set_lower_bound(g, alignment_bytes=1)
    assert lb.forced_bytes == (100, 100, 10, 111, 100)


def _adam_like() -> Graph:
    """One parameter's Adam-like update: three storages of size E live at once somewhere.

    g (grad, from backward) feeds the m-chain and the v-chain; m and v are created by
    zero-fan-in ops; the v-chain makes a denominator d; the final update reads m and d.
    The live-set bound sees only two of them (m and d at the update); every order has
    three live at once (g with m and v, or g with v and d, ...), at different ops.
    """
    e, k, opt = 1000, TensorKind, Phase.OPTIMIZER
    ops = [
        Op(OpId("g"), "mm", Phase.BACKWARD, (), ("g",)),
        Op(OpId("zm"), "zeros_like", opt, ("p",), ("m",)),
        Op(OpId("lerp"), "lerp_", opt, ("m", "g"), (), (TensorId("m"),)),
        Op(OpId("zv"), "zeros_like", opt, ("p",), ("v",)),
        Op(OpId("addcmul"), "addcmul_", opt, ("v", "g"), (), (TensorId("v"),)),
        Op(OpId("sqrt"), "sqrt", opt, ("v",), ("d",)),
        Op(OpId("upd"), "addcdiv_", opt, ("p", "m", "d"), (), (TensorId("p"),)),
    ]
    tensors = [
        Tensor("p", e, "f", (), k.PARAMETER, None),
        Tensor("g", e, "f", (), k.GRADIENT, OpId("g")),
        Tensor("m", e, "f", (), k.OPTIMIZER_STATE, OpId("zm")),
        Tensor("v", e, "f", (), k.OPTIMIZER_STATE, OpId("zv")),
        Tensor("d", e, "f", (), k.TEMPORARY, OpId("sqrt")),
    ]
    edges = [ControlEdge(OpId("zm"), OpId("upd"), EdgeReason.MUTATION),
             ControlEdge(OpId("zv"), OpId("upd"), EdgeReason.MUTATION),
             ControlEdge(OpId("sqrt"), OpId("upd"), EdgeReason.DATA)]
    return Graph.build(ops, tensors, (), list(dict.fromkeys(edges)))


def test_update_group_beats_live_set():
    g = _adam_like()
    ls = live_set_lower_bound(g, alignment_bytes=1)
    ug = update_group_lower_bound(g, alignment_bytes=1)
    assert optimizer_groups(g) == [("zm", "lerp", "zv", "addcmul", "sqrt", "upd")]
    best = _min_peak(g, 1)
    assert ls.bound_bytes == 1000 + 2000
    assert ug.bound_bytes == best == 1000 + 3000
    assert ug.method == "update_group"
    assert best_lower_bound(g, alignment_bytes=1).bound_bytes == ug.bound_bytes


def test_group_too_large_gives_none():
    g = diamond()
    assert group_lower_bound(g, g.op_ids, max_states=2) is None


@given(st.data())
def test_live_set_bound_below_random_orders(data):
    g = data.draw(random_graphs(max_ops=12))
    align = data.draw(st.sampled_from([1, 512]))
    lb = live_set_lower_bound(g, alignment_bytes=align)
    ub = update_group_lower_bound(g, alignment_bytes=align)
    assert ub.bound_bytes >= lb.bound_bytes
    assert lb.bound_bytes == lb.resident_bytes + max(lb.forced_bytes, default=0)
    for _ in range(4):
        order = data.draw(orders_of(g))
        peak = simulate(g, order, alignment_bytes=align).peak_bytes
        assert lb.bound_bytes <= peak
        assert ub.bound_bytes <= peak


@given(random_graphs(max_ops=6))
def test_bounds_below_brute_force_min(g):
    best = _min_peak(g, 1)
    assert live_set_lower_bound(g, alignment_bytes=1).bound_bytes <= best
    exact = group_lower_bound(g, g.op_ids, alignment_bytes=1)
    assert exact is not None
    assert exact.bound_bytes <= best


@given(st.data())
def test_group_bound_of_any_subset_below_brute_force(data):
    """Any group (not only optimizer groups, outside producers included) gives a sound bound."""
    g = data.draw(random_graphs(max_ops=7))
    group = data.draw(st.lists(st.sampled_from(g.op_ids), unique=True))
    align = data.draw(st.sampled_from([1, 512]))
    gb = group_lower_bound(g, group, alignment_bytes=align)
    assert gb is not None
    assert gb.bound_bytes <= _min_peak(g, align)


def test_outside_producer_not_live_before_it_runs():
    """x may run before the producer of s (outside the group); s must not count at x."""
    f, k = Phase.FORWARD, TensorKind.ACTIVATION
    g = Graph.build(
        [Op(OpId("p"), "x", f, (), ("s",)), Op(OpId("x"), "x", f, (), ("t",)),
         Op(OpId("u"), "x", f, ("s", "t"), ("r",))],
        [Tensor("s", 100, "f", (), k, OpId("p")), Tensor("t", 10, "f", (), k, OpId("x")),
         Tensor("r", 1, "f", (), k, OpId("u"))],
    )
    # best order x, p, u: 10, 110, 111
    assert _min_peak(g, 1) == 111
    assert group_lower_bound(g, ["x", "u"], alignment_bytes=1).bound_bytes == 111
    # with only x in the group, s is not known to exist at x
    assert group_lower_bound(g, ["x"], alignment_bytes=1).bound_bytes == 10


def test_group_op_may_precede_outside_producer():
    """z (in the group) can run before p (outside), so s is not live at z in the best order."""
    f, k = Phase.FORWARD, TensorKind.ACTIVATION
    g = Graph.build(
        [Op(OpId("p"), "x", f, (), ("s",)), Op(OpId("z"), "x", f, (), ("Z",)),
         Op(OpId("u"), "x", f, ("s",), ("r",))],
        [Tensor("s", 50, "f", (), k, OpId("p")), Tensor("Z", 100, "f", (), k, OpId("z")),
         Tensor("r", 1, "f", (), k, OpId("u"))],
    )
    assert _min_peak(g, 1) == 100  # z first: Z alone; then s; then s + r
    assert group_lower_bound(g, ["z", "u"], alignment_bytes=1).bound_bytes == 100


def _shuffled(g: Graph, seed: int) -> Graph:
    """The same DAG with its ops in a random program order (not topological in general)."""
    import random

    ops = list(g.ops)
    random.Random(seed).shuffle(ops)
    return Graph.build(ops, g.tensors.values(), aliases=g.aliases,
                       control_edges=g.control_edges, outputs=g.outputs, name=g.name)


@pytest.mark.slow
@given(random_graphs(max_ops=14), st.integers(0, 2), st.sampled_from([0, 1, 3, 64]))
def test_local_forced_sets_equal_the_masks(g, seed, span) -> None:
    """The forced-live ops found by a walk over the producer's .. last user's steps of a
    topological order are exactly the bits of the storage's forced-live mask, in
    topological and shuffled program orders and for any span limit."""
    from roam_core.model.reach import iter_bits, reachability
    from roam_core.oracle.bounds import live_set as bounds

    g = _shuffled(g, seed) if seed else g
    r = reachability(g)
    masks = bounds.forced_live_masks(g, r)
    got = {}
    for tid, m, ops in bounds._iter_forced_sets(g, r, local_span=span):
        assert len(set(ops)) == len(ops)  # each op once
        assert not any(m >> i & 1 for i in ops)  # the mask and the ops are disjoint
        got[tid] = m | sum(1 << i for i in ops)
    assert got == masks
    # the masks by their definition: the ops on a path from the producer to a user (or
    # every descendant of the producer, for an output), from networkx's reachability
    import networkx as nx

    dag = nx.DiGraph()
    dag.add_nodes_from(g.op_ids)
    dag.add_edges_from((p, op) for op in g.op_ids for p in g.predecessors(op))
    outputs = set(g.outputs)
    for tid, m in masks.items():
        prod = g.tensors[tid].producer
        after = nx.descendants(dag, prod) | {prod}
        if tid in outputs:
            want = after
        else:
            users = set(bounds._users(g, tid))
            want = {op for op in after if op in users or nx.descendants(dag, op) & users}
        assert m == sum(1 << r.index[op] for op in want), tid
    assert list(got) == list(masks)  # in tensor order
    for tid, m in masks.items():  # the producer is always in
        assert r.index[g.tensors[tid].producer] in iter_bits(m)


@given(random_graphs(), st.integers(0, 1), st.sampled_from([0, 1, 64]),
       st.sampled_from([0, 2, 64]), st.sampled_from([1, 512]))
def test_forced_bytes_equal_the_unpacked_sum(g, seed, max_edges, span, a) -> None:
    """The live-set bound's per-op forced bytes (local sets added per op, masks' runs added
    to a difference array or read from their bytes) equal the sum of every forced-live
    mask unpacked, and its bound and storages follow from them."""
    import numpy as np

    from roam_core.model.graph import round_size
    from roam_core.model.reach import mask_to_bool
    from roam_core.oracle.bounds import live_set as bounds

    g = _shuffled(g, seed) if seed else g
    masks = bounds.forced_live_masks(g)
    n = len(g.ops)
    ref = np.zeros(n, dtype=np.int64)
    for tid, m in masks.items():
        ref += mask_to_bool(m, n) * round_size(g.tensors[tid].size_bytes, a)
    old = bounds._MAX_RUN_EDGES, bounds._LOCAL_SPAN
    bounds._MAX_RUN_EDGES, bounds._LOCAL_SPAN = max_edges, span
    bounds._LIVE_SET_CACHE.clear()
    try:
        lb = bounds.live_set_lower_bound(g, a)
    finally:
        bounds._MAX_RUN_EDGES, bounds._LOCAL_SPAN = old
        bounds._LIVE_SET_CACHE.clear()
    assert list(lb.forced_bytes) == ref.tolist()
    if n:
        best = int(np.argmax(ref))
        assert lb.bound_bytes == int(ref[best]) + g.resident_bytes(a)
        assert lb.storages == tuple(t for t, m in masks.items() if m >> best & 1)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 2**40 - 1)), max_size=12),
       st.sampled_from([0, 2, 64]))
def test_weighted_mask_sum_equals_the_unpacked_sum(items, max_edges) -> None:
    """``weighted_mask_sum`` (runs into a difference array, or many-run masks counted per
    weight in bit planes) equals the plain sum of weight x unpacked mask, for masks of any
    number of runs."""
    import numpy as np

    from roam_core.model.reach import mask_to_bool
    from roam_core.oracle.bounds import live_set as bounds

    n = 40
    ref = np.zeros(n, dtype=np.int64)
    for w, m in items:
        ref += mask_to_bool(m, n) * w
    old = bounds._MAX_RUN_EDGES
    bounds._MAX_RUN_EDGES = max_edges
    try:
        got = bounds.weighted_mask_sum(items, n)
    finally:
        bounds._MAX_RUN_EDGES = old
    assert got.tolist() == ref.tolist()


@given(st.lists(st.integers(0, 2**70 - 1), min_size=1, max_size=80),
       st.sampled_from([1, 3, 2**33]))
def test_weighted_mask_sum_counts_many_masks_of_one_weight(masks, w) -> None:
    """Many many-run masks of one weight (long ripple carries through the counter's bit
    planes, as a training step's activations of one size give) sum exactly."""
    import numpy as np

    from roam_core.model.reach import mask_to_bool
    from roam_core.oracle.bounds import live_set as bounds

    n = 70
    ref = np.zeros(n, dtype=np.int64)
    for m in masks:
        ref += mask_to_bool(m, n) * w
    old = bounds._MAX_RUN_EDGES
    bounds._MAX_RUN_EDGES = 0
    try:
        got = bounds.weighted_mask_sum([(w, m) for m in masks], n)
    finally:
        bounds._MAX_RUN_EDGES = old
    assert got.tolist() == ref.tolist()


@pytest.mark.slow
@given(random_graphs())
def test_live_set_bound_storages_without_kept_masks(g) -> None:
    """The live-set bound sums the forced-live masks as they come; the storages it reports
    at its op are exactly those whose mask holds that op."""
    from roam_core.oracle.bounds import forced_live_masks

    lb = live_set_lower_bound(g, alignment_bytes=1)
    if lb.op_id is None:
        return
    i = g.op_ids.index(lb.op_id)
    assert lb.storages == tuple(t for t, m in forced_live_masks(g).items() if m >> i & 1)
