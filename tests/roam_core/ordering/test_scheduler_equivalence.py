"""The ready-set list schedulers and the windowed layout groups give exactly the old results.

``lescea``, ``lpmf`` and ``xla_list`` keep their ready ops in priority queues updated with
the keys each step changes (``ScheduleState``, ``_BucketMin``); the reference implementations
below scan every op each step (``O(N)`` per step, the code before the ready-set and queue
changes).  Both must pick the same op at every step.
Likewise a ROAM layout group solved against only the placed buffers overlapping it in time (plus
the tops of all of them) must equal the group solved against every placed buffer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roam_core.formats.graph_io import load_graph
from roam_core.layout import arena_layout as arena
from roam_core.layout.group_placement import place_group
from roam_core.layout.subtask_layout import activation_stack, loss_step, subtask_groups
from roam_core.model.dag_view import ListState, compact
from roam_core.model.graph import Graph
from roam_core.model.samples import SAMPLES
from roam_core.oracle.simulate import lifetimes
from roam_core.ordering.list_schedulers import (
    _effective_scalar,
    lescea_order,
    lpmf_order,
    xla_list_order,
)
from tests.builders import two_param_step
from tests.paths import SAMPLE_DIR
from tests.strategies import random_graphs

_BIG = np.iinfo(np.int64).max // 4


def _argmin_masked(mask: np.ndarray, key: np.ndarray) -> tuple[int, np.ndarray]:
    k = np.where(mask, key, _BIG)
    m = k.min()
    return int(np.argmin(k)), mask & (k == m)


def _lpmf_full(graph: Graph) -> tuple[str, ...]:
    cg = compact(graph)
    st = ListState(cg)
    size = st.defined
    max_mem = int(sum(s for s, o in zip(cg.size_bytes, cg.is_output) if o))
    live = 0
    for _ in range(cg.n_ops):
        if not st.ready.any():
            break
        gap = max_mem - live
        free = st.last_free + st.dead_out
        fits = st.ready & (size <= gap)
        if fits.any():
            v, _ = _argmin_masked(fits, size - free)
        else:
            _, ties = _argmin_masked(st.ready, size)
            v, _ = _argmin_masked(ties, size - free)
        live += int(size[v])
        max_mem = max(max_mem, live)
        live -= int(free[v])
        st.schedule(v)
    return cg.order_ids(st.finish())


def _lescea_full(graph: Graph) -> tuple[str, ...]:
    cg = compact(graph)
    st = ListState(cg)
    name_rank = np.empty(cg.n_ops, dtype=np.int64)
    name_rank[sorted(range(cg.n_ops), key=lambda i: cg.op_ids[i])] = np.arange(cg.n_ops)
    defined = st.defined
    base = peak = 0
    for _ in range(cg.n_ops):
        if not st.ready.any():
            break
        fits = st.ready & (base + defined <= peak)
        if fits.any():
            _, ties = _argmin_masked(fits, defined - st.last_free)
        else:
            _, ties = _argmin_masked(st.ready, defined)
        v, _ = _argmin_masked(ties, name_rank)
        peak = max(peak, base + int(defined[v]))
        base += int(defined[v] - st.last_free[v])
        st.schedule(v)
    return cg.order_ids(st.finish())


def _xla_list_full(graph: Graph) -> tuple[str, ...]:
    cg = compact(graph)
    st = ListState(cg)
    scalar = _effective_scalar(graph, cg)
    n_users = np.array([len(s) for s in cg.succs], dtype=np.int64)
    seq = np.zeros(cg.n_ops, dtype=np.int64)
    counter = 0
    for v in np.flatnonzero(st.ready):
        counter += 1
        seq[v] = counter
    for _ in range(cg.n_ops):
        if not st.ready.any():
            break
        prio = np.where(scalar, _BIG // 2, st.last_free - st.defined)
        _, ties = _argmin_masked(st.ready, -prio)
        _, ties = _argmin_masked(ties, -n_users)
        v, _ = _argmin_masked(ties, -seq)
        st.schedule(v)
        for s in st.newly_ready:
            counter += 1
            seq[s] = counter
    return cg.order_ids(st.finish())


PAIRS = [(lpmf_order, _lpmf_full), (lescea_order, _lescea_full),
         (xla_list_order, _xla_list_full)]
REAL = sorted(SAMPLE_DIR.glob("*.json.gz"), key=lambda p: p.stat().st_size)[:6]


def _same(graph: Graph) -> None:
    for fast, full in PAIRS:
        assert fast(graph) == full(graph), fast.__name__


@pytest.mark.slow
@settings(max_examples=40)
@given(random_graphs(max_ops=30))
def test_ready_set_schedulers_equal_full_scans_on_random_graphs(graph: Graph) -> None:
    _same(graph)


@pytest.mark.parametrize("graph", [f() for f in SAMPLES.values()]
                         + [two_param_step("adam"), two_param_step("sgd")],
                         ids=[*SAMPLES, "adam", "sgd"])
def test_ready_set_schedulers_equal_full_scans_on_hand_graphs(graph: Graph) -> None:
    _same(graph)


@pytest.mark.parametrize("path", REAL, ids=[p.name.split(".")[0] for p in REAL])
def test_ready_set_schedulers_equal_full_scans_on_traced_models(path: Path) -> None:
    _same(load_graph(path))


def test_ready_idx_tracks_the_ready_mask() -> None:
    g = load_graph(REAL[-1])
    cg = compact(g)
    st = ListState(cg)
    while st.ready.any():
        assert st.ready_idx.tolist() == np.flatnonzero(st.ready).tolist()
        st.schedule(int(st.ready_idx[-1]))  # any ready op; the last exercises the splices
    assert len(st.ready_idx) == 0


LAYOUT = [SAMPLE_DIR / f"{n}.json.gz" for n in ("gpt2-b1-t128-steady", "resnet50-b8-steady",
                                                 "tiny_gpt-b2-t32-steady")]


def _layout_groups(path: Path):  # type: ignore[no-untyped-def]
    """Arena settings, layout problem, the activation stack placed first, and the layout
    groups of the LPMF order of a sample graph."""
    g = load_graph(path)
    order = lpmf_order(g)
    cfg = arena.ArenaConfig()
    problem = arena.layout_problem(g, order, cfg.alignment_bytes, lifetimes(g, order))
    placed = activation_stack(problem, loss_step(g, order))
    return cfg, problem, placed, subtask_groups(g, problem, placed, None, cfg.max_group_tensors)


@pytest.mark.parametrize("path", LAYOUT, ids=[p.name.split(".")[0] for p in LAYOUT])
def test_windowed_layout_groups_equal_groups_against_every_placed_buffer(path: Path) -> None:
    cfg, problem, placed, groups = _layout_groups(path)
    bs = problem.buffers
    checked = 0
    for gid, members in groups:
        lo = min(bs[i].lower for i in members)
        hi = max(bs[i].upper for i in members)
        near = {i: o for i, o in placed.items() if bs[i].lower < hi and bs[i].upper > lo}
        floor = max((o + bs[i].size for i, o in placed.items()), default=0)
        top = max((o + bs[i].size for i, o in placed.items() if bs[i].size), default=0)
        full = place_group(problem, members, dict(placed), cfg, 0.0, None, gid)
        windowed = place_group(problem, members, near, cfg, 0.0, None, gid, floor, top)
        assert windowed[0] == full[0]
        assert windowed[1].objective == full[1].objective
        checked += len(near) < len(placed)
        placed.update(full[0])
    assert checked  # some group really saw fewer buffers


def _hint_via_subproblem(problem, members, fixed):
    """The layout group's greedy hint as it was built before the array path: a sub-problem
    of the fixed buffers (offsets fixed) and the members, best fit by decreasing size."""
    from roam_core.layout.dsa_heuristics import place_in_order
    from roam_core.model.dsa import Buffer, Problem

    bs = problem.buffers
    sub_ids = list(fixed) + list(members)
    sub = Problem(tuple(Buffer(bs[i].id, bs[i].lower, bs[i].upper, bs[i].size, 1, fixed.get(i))
                        for i in sub_ids))
    nf = len(fixed)
    order = sorted(range(nf, len(sub_ids)), key=lambda k: -sub.buffers[k].size)
    sol = place_in_order(sub, order, "best")
    return {sub_ids[k]: sol.offsets[k] for k in range(nf, len(sub_ids))}, sol.height


@pytest.mark.parametrize("path", LAYOUT, ids=[p.name.split(".")[0] for p in LAYOUT])
def test_layout_group_hint_on_arrays_equals_the_subproblem_hint(path: Path) -> None:
    cfg, problem, placed, groups = _layout_groups(path)
    bs = problem.buffers
    for gid, members in groups:
        lo = min(bs[i].lower for i in members)
        hi = max(bs[i].upper for i in members)
        near = {i: o for i, o in placed.items() if bs[i].lower < hi and bs[i].upper > lo}
        top = max((o + bs[i].size for i, o in placed.items() if bs[i].size), default=0)
        ref, ref_h = _hint_via_subproblem(problem, members, near)
        got, rec = place_group(problem, members, near, cfg, 0.0, None, gid, None, top)
        assert got == ref
        assert rec.objective == max(ref_h, top)
        placed.update(got)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_place_against_equals_place_in_order(data) -> None:
    from roam_core.layout.dsa_heuristics import place_against, place_in_order
    from roam_core.model.dsa import Buffer, Problem

    n_fix = data.draw(st.integers(0, 8))
    n_free = data.draw(st.integers(1, 10))
    bufs = []
    for k in range(n_fix + n_free):
        lo = data.draw(st.integers(0, 10))
        hi = lo + data.draw(st.integers(1, 6))
        size = data.draw(st.integers(0, 5))
        off = data.draw(st.integers(0, 12)) if k < n_fix else None
        bufs.append(Buffer(f"b{k}", lo, hi, size, 1, off))
    order = data.draw(st.permutations(range(n_fix, n_fix + n_free)))
    fit = data.draw(st.sampled_from(["best", "first"]))
    sol = place_in_order(Problem(tuple(bufs)), order, fit)
    arr = lambda f, ks: np.array([f(bufs[k]) for k in ks], dtype=np.int64)  # noqa: E731
    fx, fr = range(n_fix), range(n_fix, n_fix + n_free)
    got = place_against(arr(lambda b: b.lower, fx), arr(lambda b: b.upper, fx),
                        arr(lambda b: b.offset, fx), arr(lambda b: b.size, fx),
                        arr(lambda b: b.lower, fr), arr(lambda b: b.upper, fr),
                        arr(lambda b: b.size, fr), [k - n_fix for k in order], fit)
    assert got.tolist() == list(sol.offsets[n_fix:])


def test_lpmf_order_cache_returns_the_same_order_and_follows_the_graph() -> None:
    """LPMF is cached for the last graph object (the planner runs it twice): the cached
    order equals a fresh run, and another graph or alignment is computed afresh."""
    from roam_core.ordering import list_schedulers as ls

    g = load_graph(LAYOUT[0])
    first = ls.lpmf_order(g)
    assert ls.lpmf_order(g) is first
    assert first == ls.compact(g).order_ids(ls.lpmf_indices(ls.compact(g)))
    other = two_param_step()
    assert ls.lpmf_order(other) == ls.compact(other).order_ids(
        ls.lpmf_indices(ls.compact(other)))
    assert ls.lpmf_order(g, alignment_bytes=1) == ls.compact(g, 1).order_ids(
        ls.lpmf_indices(ls.compact(g, 1)))


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_bucket_min_equals_a_scan(data) -> None:
    """The ready-op queue of ``lpmf`` / ``lescea`` against a list scan: random pushes, key
    decreases, removals and threshold queries."""
    from roam_core.ordering.list_schedulers import _BucketMin

    n = data.draw(st.integers(1, 25))
    static = [data.draw(st.integers(0, 6)) for _ in range(n)]
    bm = _BucketMin(static)
    cur: dict[int, tuple[int, int]] = {}
    for _ in range(data.draw(st.integers(1, 60))):
        v = data.draw(st.integers(0, n - 1))
        act = data.draw(st.sampled_from(["push", "remove", "query"]))
        if act == "push":
            top = cur[v][0] if v in cur else 50
            cur[v] = (data.draw(st.integers(-20, top)), v)
            bm.push(v, cur[v])
        elif act == "remove" and v in cur:
            del cur[v]
            bm.remove(v)
        limit = data.draw(st.integers(-1, 7))
        fit = [e for u, e in cur.items() if static[u] <= limit]
        assert bm.min_upto(limit) == (min(fit) if fit else None)
        low = min((static[u] for u in cur), default=None)
        assert bm.first_bucket_min() == (
            min(e for u, e in cur.items() if static[u] == low) if cur else None)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(random_graphs(max_ops=30), st.data())
def test_schedule_state_keeps_the_list_state_bookkeeping(graph: Graph, data) -> None:
    """``ScheduleState`` (lists, reporting changes) and ``ListState`` (numpy) agree on every
    step of a random topological run, and the reported changes are exactly what changed."""
    from roam_core.model.dag_view import ScheduleState

    cg = compact(graph)
    a, b = ListState(cg), ScheduleState(cg)
    assert b.initially_ready() == np.flatnonzero(a.ready).tolist()
    assert b.defined == a.defined.tolist()
    while a.ready.any():
        ready = np.flatnonzero(a.ready).tolist()
        v = ready[data.draw(st.integers(0, len(ready) - 1))]
        before = list(b.last_free)
        a.schedule(v)
        new, grew = b.schedule(v)
        assert new == a.newly_ready
        assert b.last_free == a.last_free.tolist()
        assert b.dead_out == a.dead_out.tolist()
        assert sorted(set(grew)) == [u for u in range(cg.n_ops) if b.last_free[u] != before[u]]
    assert b.finish() == a.finish()
