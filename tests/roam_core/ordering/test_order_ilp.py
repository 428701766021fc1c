"""CP-SAT ordering of one sub-task: exact against brute force, consistent with the simulator."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roam_core.model.graph import Graph
from roam_core.model.samples import diamond, tiny_train_step
from roam_core.oracle.simulate import simulate
from roam_core.oracle.validate import check_order
from roam_core.ordering.config import OrderSolverConfig
from roam_core.ordering.order_ilp import solve_order, solve_order_problem
from roam_core.ordering.order_problem import build_order_problem, merge_orders, range_profile
from tests.builders import random_valid_order
from tests.paths import SAMPLE_DIR
from tests.strategies import random_graphs

EXACT = OrderSolverConfig(time_limit_s=20.0, stop_at_lower_bound=False)


def _nx(graph: Graph) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(graph.op_ids)
    g.add_edges_from((s, d) for s, d, _ in graph.edges())
    return g


def brute_force_peak(graph: Graph, alignment_bytes: int = 1) -> int:
    """The least simulated peak over every topological order (enumerates them all)."""
    return min(simulate(graph, list(o), alignment_bytes=alignment_bytes).peak_bytes
               for o in nx.all_topological_sorts(_nx(graph)))


def dp_peak(graph: Graph) -> int:
    """The same minimum by dynamic programming over the down-sets (exact, fast for <= 12 ops).

    ``best[S]`` is the least peak of running exactly the ops ``S`` first; running ``o`` next
    has every storage live whose producer ran (or is ``o``) and that some op not yet run (or
    ``o``), the end of the step (graph output) or its own creation step still needs.
    """
    ids = list(graph.op_ids)
    bit = {op: 1 << i for i, op in enumerate(ids)}
    pred_mask = [sum(bit[p] for p in graph.predecessors(op)) for op in ids]
    outs = set(graph.outputs)
    planned = [(bit[t.producer], sum(bit[c] for c in t.consumers), t.id in outs, t.size_bytes)
               for t in graph.tensors.values() if t.producer is not None]
    full = (1 << len(ids)) - 1
    best = {0: 0}
    for _size in range(len(ids)):
        nxt: dict[int, int] = {}
        for done, peak in best.items():
            for i in range(len(ids)):
                b = 1 << i
                if done & b or pred_mask[i] & ~done:
                    continue
                now = done | b
                mem = sum(sz for p, users, out, sz in planned
                          if p & now and (out or p == b or users & ~done))
                val = max(peak, mem)
                if val < nxt.get(now, 1 << 62):
                    nxt[now] = val
        best = nxt
    return best[full] + graph.resident_bytes(1)


@settings(max_examples=10)
@given(random_graphs(max_ops=6))
def test_dp_oracle_matches_enumeration(graph: Graph) -> None:
    assert dp_peak(graph) == brute_force_peak(graph)


@pytest.mark.slow  # ~3-16 s: CP-SAT / exact search on many instances
@settings(max_examples=40)
@given(random_graphs(max_ops=8), st.integers(0, 1000))
def test_cpsat_equals_brute_force_on_small_graphs(graph: Graph, seed: int) -> None:
    base = random_valid_order(graph, seed)
    new, res = solve_order(graph, base, config=EXACT, alignment_bytes=1)
    assert check_order(graph, new) == []
    prof = simulate(graph, new, alignment_bytes=1)
    assert res.peak_bytes + prof.resident_bytes == prof.peak_bytes
    if res.status in ("optimal", "trivial"):
        assert prof.peak_bytes == dp_peak(graph)
    else:  # pragma: no cover - a 20 s limit on 8 ops is never hit
        raise AssertionError(res.status)


@pytest.mark.slow
@settings(max_examples=25)
@given(random_graphs(max_ops=12), st.integers(0, 1000), st.data())
def test_sub_range_solve_keeps_order_valid_and_never_worse(graph: Graph, seed: int,
                                                           data: st.DataObject) -> None:
    base = random_valid_order(graph, seed)
    n = len(base)
    a = data.draw(st.integers(0, n - 1))
    b = data.draw(st.integers(a + 1, n))
    c = data.draw(st.integers(0, n - 1))
    ops = list(dict.fromkeys([*base[a:b], base[c]]))
    problem = build_order_problem(graph, base, ops, config=EXACT, alignment_bytes=1)
    base_live = simulate(graph, base, alignment_bytes=1).live_bytes
    for r in problem.ranges:  # the model's memory = the simulator's, step by step
        assert range_profile(r, range(len(r.ops))) == list(base_live[r.start:r.start + len(r.ops)])
    res = solve_order_problem(problem)
    new = merge_orders(base, problem, res)
    assert check_order(graph, new) == []
    live = simulate(graph, new, alignment_bytes=1).live_bytes
    steps = [r.start + k for r in problem.ranges for k in range(len(r.ops))]
    assert max(live[s] for s in steps) == res.peak_bytes <= res.hint_peak_bytes
    outside = [s for s in range(n) if s not in set(steps)]
    assert all(live[s] == base_live[s] for s in outside)


def test_diamond_and_train_step_are_solved_to_optimality() -> None:
    for g in (diamond(), tiny_train_step()):
        new, res = solve_order(g, g.op_ids, config=EXACT, alignment_bytes=1)
        assert res.status == "optimal"
        assert simulate(g, new, alignment_bytes=1).peak_bytes == brute_force_peak(g) == dp_peak(g)


def test_floor_stops_early_and_keeps_hint() -> None:
    g = tiny_train_step()
    cfg = OrderSolverConfig(time_limit_s=5.0, stop_at_lower_bound=True)
    new, res = solve_order(g, g.op_ids, config=cfg, floor_bytes=10**9, alignment_bytes=1)
    assert res.status == "bound"
    assert tuple(new) == g.op_ids


def test_cancel_before_start_returns_hint() -> None:
    g = tiny_train_step()
    new, res = solve_order(g, g.op_ids, config=EXACT, alignment_bytes=1, cancel=lambda: True)
    assert res.status == "cancelled"
    assert tuple(new) == g.op_ids


def _range_orders(rng):  # every permutation of a range that honours its precedences
    import itertools

    n = len(rng.ops)
    for perm in itertools.permutations(range(n)):
        pos = {i: k for k, i in enumerate(perm)}
        if all(pos[p] < pos[i] for i, ps in enumerate(rng.preds) for p in ps):
            yield list(perm)


@settings(max_examples=25)
@given(random_graphs(max_ops=12, min_ops=4), st.integers(0, 1000), st.data())
def test_multi_range_optimum_equals_enumeration(graph: Graph, seed: int,
                                                data: st.DataObject) -> None:
    base = random_valid_order(graph, seed)
    n = len(base)
    picks = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=7, unique=True))
    problem = build_order_problem(graph, base, [base[i] for i in picks], config=EXACT,
                                  alignment_bytes=1)
    res = solve_order_problem(problem)
    assert res.status in ("optimal", "trivial")
    best = max(min(max(range_profile(r, o)) for o in _range_orders(r))
               for r in problem.ranges)
    assert res.peak_bytes == best


@pytest.mark.slow
def test_merge_all_orders_equals_merging_one_by_one() -> None:
    """The planner's one-list merge gives the order of merge_orders applied sub-task by
    sub-task (sub-tasks own disjoint step ranges of the base order)."""
    from roam_core.formats.graph_io import load_graph
    from roam_core.ordering.decompose import decompose
    from roam_core.ordering.list_schedulers import lpmf_order
    from roam_core.ordering.order_problem import merge_all_orders

    root = SAMPLE_DIR
    g = load_graph(root / "tiny_gpt-b2-t32-steady.json.gz")
    base = lpmf_order(g)
    tree = decompose(g, base, node_limit=40)
    cfg = OrderSolverConfig(time_limit_s=0.5)
    solved = []
    for st_ in tree.walk():
        if st_.op_ids:
            p = build_order_problem(g, base, st_.op_ids, task_id=st_.id, config=cfg)
            solved.append((p, solve_order_problem(p)))
    assert len(solved) > 2
    one_by_one = tuple(base)
    for p, res in solved:
        one_by_one = merge_orders(one_by_one, p, res)
    assert merge_all_orders(base, solved) == one_by_one
    assert one_by_one != tuple(base)  # some sub-task really moved ops


def _local_orders(rng):
    """Every valid local order of a range (its linear extensions), by brute force."""
    import itertools

    n = len(rng.ops)
    for perm in itertools.permutations(range(n)):
        pos = {v: k for k, v in enumerate(perm)}
        if all(pos[p] < pos[i] for i, ps in enumerate(rng.preds) for p in ps):
            yield perm


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(random_graphs(max_ops=9), st.integers(0, 1000), st.data())
def test_range_beats_agrees_with_brute_force(graph: Graph, seed: int,
                                             data: st.DataObject) -> None:
    """The down-set check used to skip CP-SAT is exact: some order stays below ``below``
    exactly when brute force over every local order finds one."""
    from roam_core.ordering.order_hint_check import hint_is_optimal, range_beats

    base = random_valid_order(graph, seed)
    n = len(base)
    a = data.draw(st.integers(0, n - 1))
    b = data.draw(st.integers(a + 1, min(n, a + 7)))
    align = data.draw(st.sampled_from([1, 512]))
    problem = build_order_problem(graph, base, list(base[a:b]), config=EXACT,
                                  alignment_bytes=align)
    (r,) = problem.ranges
    best = min(max(range_profile(r, o)) for o in _local_orders(r))
    hint = max(range_profile(r, range(len(r.ops))))
    for below in {best, best + 1, hint, hint + 1, best - 1}:
        assert range_beats(r, below) == (best < below)
    assert range_beats(r, hint, max_work=0) in (None, False, True)
    if hint_is_optimal(problem):
        assert best == hint
    elif len(r.ops) > 1:
        assert best < hint


def test_solve_skips_the_model_when_the_hint_is_optimal() -> None:
    """A sub-task whose hint is optimal comes back OPTIMAL with the hint and its peak as the
    bound, exactly what CP-SAT returns for it."""
    from dataclasses import replace

    from roam_core.ordering.order_hint_check import hint_is_optimal

    g = tiny_train_step()
    problem = build_order_problem(g, g.op_ids, g.op_ids, config=EXACT, alignment_bytes=1)
    res = solve_order_problem(problem)
    if not hint_is_optimal(problem):
        opt = build_order_problem(g, res.orders[0], g.op_ids, config=EXACT, alignment_bytes=1)
        assert hint_is_optimal(opt)
        problem, res = opt, solve_order_problem(opt)
    assert res.orders == tuple(r.ops for r in problem.ranges)
    assert res.best_bound_bytes == res.peak_bytes == res.hint_peak_bytes
    # CP-SAT itself (the check off) gives the same order and peak
    import roam_core.ordering.order_ilp as oi

    old = oi.hint_is_optimal
    oi.hint_is_optimal = lambda p, max_work=0: False
    try:
        via_model = solve_order_problem(replace(problem))
    finally:
        oi.hint_is_optimal = old
    assert via_model.orders == res.orders
    assert via_model.peak_bytes == res.peak_bytes
