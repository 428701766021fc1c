"""The windowed update insertion (slots scored in the block's window only, the window from
the nearest placed ancestors / descendants) places every block where the full-length
implementation it replaced did: same orders and tracked curves, every variant."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roam_core.base.errors import GraphError
from roam_core.formats.graph_io import load_graph
from roam_core.model.dag_view import CompactGraph
from roam_core.model.reach import Reachability, mask_to_bool
from roam_core.ordering import update_insertion as ui
from roam_core.ordering.update_groups import block_profile, update_groups
from tests.builders import random_train_graph, two_param_step

SAMPLES = Path(__file__).resolve().parents[2] / "sample_graphs"


def _reference_insert_block(
    cg: CompactGraph, reach: Reachability, seq: list[int], prof: np.ndarray,
    freed: np.ndarray, pos: np.ndarray, block: list[int], tie: str,
) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The implementation before the windowed one (full-length passes, reachability masks)."""
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



def _all_variants(graph, monkeypatch_insert=None):
    groups = update_groups(graph)
    prep = ui._prepare(graph, groups, "lpmf", 512)
    out = []
    for group_order in ("largest", "program"):
        for tie in ("early", "light"):
            seq, prof = ui._insert_all(prep, tie, group_order)
            out.append((tuple(seq), prof.tolist()))
    return out


def _both(graph, monkeypatch):
    new = _all_variants(graph)
    with monkeypatch.context() as m:
        m.setattr(ui, "_insert_block", _reference_insert_block)
        old = _all_variants(graph)
    return new, old


@pytest.mark.parametrize("name", ["gpt2-b1-t128-steady", "tiny_gpt-b2-t32-steady",
                                  "mobilenet_v2-b8-steady", "teach_updates-b8-steady",
                                  "mlp-b8-steady", "residual_block-b4-steady"])
def test_same_orders_and_curves_on_sample_graphs(name, monkeypatch):
    g = load_graph(SAMPLES / f"{name}.json.gz")
    new, old = _both(g, monkeypatch)
    assert update_groups(g), "a graph with update groups"
    assert new == old


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_same_orders_on_two_param_step(optimizer, monkeypatch):
    new, old = _both(two_param_step(optimizer), monkeypatch)
    assert new == old


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), layers=st.integers(2, 8), skip=st.floats(0.0, 0.6))
def test_same_orders_on_random_train_graphs(seed, layers, skip, monkeypatch):
    g = random_train_graph(seed, layers, skip_prob=skip)
    try:
        new = _all_variants(g)
    except GraphError:
        new = None
    with monkeypatch.context() as m:
        m.setattr(ui, "_insert_block", _reference_insert_block)
        try:
            old = _all_variants(g)
        except GraphError:
            old = None
    assert new == old
