"""The update insertion (a chunked profile, the best slot found by range queries) places
every block where the straightforward implementation (every slot of the window scored with
full-length prefix / suffix maxima, the window from reachability masks, flat arrays
spliced) does: same orders and tracked curves, every variant, any chunk length."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roam_core.base.errors import GraphError
from roam_core.formats.graph_io import load_graph
from roam_core.model.dag_view import CompactGraph
from roam_core.model.reach import Reachability, mask_to_bool, reachability
from roam_core.ordering import update_insertion as ui
from roam_core.ordering.chunked_profile import ChunkedProfile
from roam_core.ordering.update_groups import block_order, block_profile, update_groups
from tests.builders import random_train_graph, two_param_step
from tests.paths import SAMPLE_DIR
from tests.strategies import random_graphs

SAMPLES = SAMPLE_DIR


def _reference_insert_block(
    cg: CompactGraph, reach: Reachability, seq: list[int], prof: np.ndarray,
    freed: np.ndarray, pos: np.ndarray, block: list[int], tie: str,
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """One block, the plain way: every slot of the window scored with full-length passes."""
    n = cg.n_ops
    m = len(seq)
    L = len(block)
    in_seq = pos >= 0
    # a. window: after every ancestor, before every descendant already placed
    anc = desc = 0
    for v in block:
        anc |= reach.ancestors[v]
        desc |= reach.descendants[v]
    a_pos = pos[mask_to_bool(anc, n) & in_seq]
    d_pos = pos[mask_to_bool(desc, n) & in_seq]
    lo = int(a_pos.max()) + 1 if len(a_pos) else 0
    hi = int(d_pos.min()) if len(d_pos) else m
    if lo > hi:  # cannot happen for convex groups in a valid sequence; never trust it
        raise GraphError(f"no slot for the update block starting at {cg.op_ids[block[0]]!r}")
    internal, bfreed, long, ext = block_profile(cg, block, pos)
    # b. externals: last use in the sequence (outputs never extend)
    ext_e = []
    for s, size, lastb in ext:
        p = cg.producer[s]
        if pos[p] < 0:
            continue  # made by a group not inserted yet: counted when that one goes in
        if cg.is_output[s]:
            e = m
        else:
            e = max([int(pos[p]), *(int(pos[u]) for u in cg.users[s] if pos[u] >= 0)])
        ext_e.append((e, size, lastb, s))
    ext_e.sort()
    long_last = []
    for s, size in long:
        last = m - 1 if cg.is_output[s] else max(int(pos[u]) for u in cg.users[s] if pos[u] >= 0)
        long_last.append((last, size))
    # c. the sequence's steps for slot k: before k (extended inputs), from k (long outputs)
    A = prof.copy()
    for e, size, _, _ in ext_e:
        if e + 1 < m:
            A[e + 1:] += size
    pref_a = np.concatenate(([0], np.maximum.accumulate(A))) if m else np.zeros(1, np.int64)
    C = prof.copy()
    for last, size in long_last:
        C[: last + 1] += size
    suf_c = np.concatenate((np.maximum.accumulate(C[::-1])[::-1], [0])) if m else \
        np.zeros(1, np.int64)
    cross = np.zeros(m + 1, dtype=np.int64)
    if m:
        cross[1:] = prof - freed
    # d. the block's own peak for each prefix of extended externals
    es = np.array([e for e, *_ in ext_e], dtype=np.int64)
    bpeaks = []
    curve = internal.copy()
    bpeaks.append(int(curve.max()) if L else 0)
    for _, size, lastb, _ in ext_e:
        curve[: lastb + 1] += size
        bpeaks.append(int(curve.max()))
    ks = np.arange(lo, hi + 1)
    r = np.searchsorted(es, ks, side="left")
    block_peak = cross[ks] + np.asarray(bpeaks, dtype=np.int64)[r]
    total = np.maximum(np.maximum(pref_a[ks], suf_c[ks]), block_peak)
    if tie == "light":
        best = np.lexsort((ks, block_peak, total))[0]
    else:
        best = int(np.argmin(total))
    k = int(ks[best])
    n_ext = int(r[best])
    # e. apply: extend externals, add long storages, splice the block's curve in
    bprof = internal + cross[k]
    for e, size, lastb, _ in ext_e[:n_ext]:
        prof[e + 1: k] += size
        freed[e] -= size
        bprof[: lastb + 1] += size
        bfreed[lastb] += size
    for last, size in long_last:
        prof[k: last + 1] += size
    for s, size in long:
        if not cg.is_output[s]:
            last = max(int(pos[u]) for u in cg.users[s] if pos[u] >= 0)
            freed[last] += size
    prof = np.concatenate((prof[:k], bprof, prof[k:]))
    freed = np.concatenate((freed[:k], bfreed, freed[k:]))
    pos[pos >= k] += L
    pos[block] = np.arange(k, k + L)
    seq = seq[:k] + list(block) + seq[k:]
    return seq, prof, freed


def _reference_insert_all(graph, prep, tie: str, group_order: str):
    """Step 3 the plain way, from the same prepared base sequence."""
    cg, groups, gops = prep.cg, prep.groups, prep.gops
    reach = reachability(graph)
    seq = list(prep.seq)
    pos = np.full(cg.n_ops, -1, dtype=np.int64)
    pos[seq] = np.arange(len(seq))
    prof, freed = prep.prof.copy(), prep.freed.copy()
    if group_order == "program":
        order_of_groups = sorted(range(len(groups)), key=lambda k: gops[k][0])
    else:
        order_of_groups = sorted(range(len(groups)),
                                 key=lambda k: (-groups[k].peak_extra_bytes, gops[k][0]))
    for k in order_of_groups:
        init = [cg.index[o] for o in groups[k].state_init_ops]
        block = block_order(cg, gops[k], init)
        seq, prof, freed = _reference_insert_block(cg, reach, seq, prof, freed, pos, block,
                                                   tie)
    return seq, prof


def _variants(graph, insert_all):
    groups = update_groups(graph)
    prep = ui._prepare(graph, groups, "lpmf", 512)
    out = []
    for group_order in ("largest", "program"):
        for tie in ("early", "light"):
            try:
                seq, prof = insert_all(prep, tie, group_order)
            except GraphError:
                out.append(None)
                continue
            out.append((tuple(seq), [int(v) for v in prof]))
    return out


def _both(graph, monkeypatch, chunk=None):
    with monkeypatch.context() as m:
        if chunk is not None:
            m.setattr(ui, "_CHUNK", chunk)
        new = _variants(graph, ui._insert_all)
    old = _variants(graph, lambda prep, tie, go: _reference_insert_all(graph, prep, tie, go))
    return new, old


@pytest.mark.slow
@pytest.mark.parametrize(("name", "small_chunk"), [
    ("gpt2-b1-t128-steady", 24), ("tiny_gpt-b2-t32-steady", 3), ("mobilenet_v2-b8-steady", 24),
    ("teach_updates-b8-steady", 3), ("mlp-b8-steady", 2), ("residual_block-b4-steady", 2)])
def test_same_orders_and_curves_on_sample_graphs(name, small_chunk, monkeypatch):
    g = load_graph(SAMPLES / f"{name}.json.gz")
    new, old = _both(g, monkeypatch)
    assert update_groups(g), "a graph with update groups"
    assert new == old
    # small chunks: every query crosses many chunks, every few insertions split one
    new = _variants(g, lambda prep, tie, go: _insert_all_with_chunk(prep, tie, go, small_chunk))
    assert new == old


def _insert_all_with_chunk(prep, tie, group_order, chunk):
    saved = ui._CHUNK
    ui._CHUNK = chunk
    try:
        return ui._insert_all(prep, tie, group_order)
    finally:
        ui._CHUNK = saved


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("chunk", [1, 2, 512])
def test_same_orders_on_two_param_step(optimizer, chunk, monkeypatch):
    new, old = _both(two_param_step(optimizer), monkeypatch, chunk)
    assert new == old


@pytest.mark.slow
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), layers=st.integers(2, 8), skip=st.floats(0.0, 0.6),
       chunk=st.sampled_from([1, 2, 3, 5, 512]))
def test_same_orders_on_random_train_graphs(seed, layers, skip, chunk, monkeypatch):
    g = random_train_graph(seed, layers, skip_prob=skip)
    new, old = _both(g, monkeypatch, chunk)
    assert new == old


@pytest.mark.slow
@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(g=random_graphs(max_ops=14), chunk=st.sampled_from([1, 2, 4, 512]))
def test_same_orders_on_random_graphs(g, chunk, monkeypatch):
    if not update_groups(g):
        return
    new, old = _both(g, monkeypatch, chunk)
    assert new == old


# ------------------------------------------------------------------ the store itself
@st.composite
def _store_script(draw):
    m = draw(st.integers(0, 12))
    prof = draw(st.lists(st.integers(0, 50), min_size=m, max_size=m))
    cross = draw(st.lists(st.integers(-20, 50), min_size=m, max_size=m))
    chunk = draw(st.integers(1, 4))
    steps = draw(st.lists(st.tuples(st.sampled_from(
        ["insert", "add", "cross", "max", "first", "last", "min", "first_le"]),
        st.integers(0, 40), st.integers(0, 40), st.integers(-10, 60),
        st.integers(1, 3)), max_size=25))
    return prof, cross, chunk, steps


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(_store_script())
def test_chunked_profile_matches_flat_arrays(script):
    prof, cross, chunk, steps = script
    n_ops = len(prof) + 3 * len(steps)
    seq = list(range(len(prof)))
    p = np.array(prof, dtype=np.int64)
    x = np.array(cross, dtype=np.int64)
    store = ChunkedProfile(seq, p, x, n_ops, chunk=chunk)
    fresh = iter(range(len(prof), n_ops))
    for kind, u, v, val, size in steps:
        m = len(seq)
        j0, j1 = sorted((u % (m + 1), v % (m + 1)))
        if kind == "insert":
            ops = [next(fresh) for _ in range(size)]
            bp = np.full(size, val, dtype=np.int64)
            bx = bp - 1
            store.insert(j0, ops, bp, bx)
            seq[j0:j0] = ops
            p = np.concatenate((p[:j0], bp, p[j0:]))
            x = np.concatenate((x[:j0], bx, x[j0:]))
        elif kind == "add":
            store.add_range(j0, j1, val)
            p[j0:j1] += val
            x[j0:j1] += val
        elif kind == "cross" and m:
            store.add_cross(j0 % m, val)
            x[j0 % m] += val
        elif kind == "max":
            assert store.max_prof(j0, j1) == (int(p[j0:j1].max()) if j1 > j0 else None)
        elif kind == "first":
            hit = np.flatnonzero(p[j0:j1] > val)
            assert store.first_prof_above(j0, j1, val) == (j0 + int(hit[0]) if len(hit) else None)
        elif kind == "last":
            hit = np.flatnonzero(p[j0:j1] > val)
            assert store.last_prof_above(j0, j1, val) == (j0 + int(hit[-1]) if len(hit) else None)
        elif kind == "min":
            want = (int(x[j0:j1].min()), j0 + int(x[j0:j1].argmin())) if j1 > j0 else None
            assert store.min_cross(j0, j1) == want
        elif kind == "first_le":
            hit = np.flatnonzero(x[j0:j1] <= val)
            assert store.first_cross_at_most(j0, j1, val) == (j0 + int(hit[0]) if len(hit)
                                                               else None)
        assert store.m == len(seq)
        assert store.sequence() == seq
        assert store.prof().tolist() == p.tolist()
        assert store.cross().tolist() == x.tolist()
        if seq:
            assert store.positions(seq).tolist() == list(range(len(seq)))
            assert [store.prof_at(j) for j in range(len(seq))] == p.tolist()
            assert [store.cross_at(j) for j in range(len(seq))] == x.tolist()
        placed = store.chunk_of >= 0
        assert placed.sum() == len(seq)
