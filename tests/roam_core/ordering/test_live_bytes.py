"""The index-order live-bytes evaluator (lns, update insertion) against the simulator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roam_core.model.dag_view import compact
from roam_core.model.samples import SAMPLES
from roam_core.oracle.simulate import lifetimes, simulate
from roam_core.ordering.live_bytes import IndexLiveBytes
from tests.strategies import orders_of, random_graphs

ALIGNMENTS = st.sampled_from([1, 4, 512])


def _indices(ev: IndexLiveBytes, order: tuple[str, ...]) -> np.ndarray:
    return np.asarray([ev.cg.index[o] for o in order], dtype=np.int64)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_live_bytes_of_a_complete_order_equal_simulate(data: st.DataObject) -> None:
    """``live`` and ``live_and_freed`` give the simulator's curve for every valid order, at
    any alignment; the freed bytes are those whose lifetime ends after each step (graph
    outputs never)."""
    g = data.draw(random_graphs(max_ops=12))
    order = data.draw(orders_of(g))
    a = data.draw(ALIGNMENTS)
    ev = IndexLiveBytes.of(g, a)
    idx = _indices(ev, order)
    want = simulate(g, order, alignment_bytes=a).live_bytes
    assert ev.valid(idx)
    assert tuple(ev.live(idx).tolist()) == want
    live, freed = ev.live_and_freed(idx)
    assert tuple(live.tolist()) == want
    lts = lifetimes(g, order)
    outputs = set(g.outputs)
    expect = [0] * len(order)
    for s, size in zip(ev.cg.storage_ids, ev.cg.size_bytes, strict=True):
        if s not in outputs:
            expect[lts[s].end - 1] += size
    assert freed.tolist() == expect


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_spans_equal_the_simulator_lifetimes(data: st.DataObject) -> None:
    g = data.draw(random_graphs(max_ops=12))
    order = data.draw(orders_of(g))
    ev = IndexLiveBytes.of(g, 512)
    start, end = ev.spans(ev.positions(_indices(ev, order)))
    lts = lifetimes(g, order)
    got = {s: (int(a), int(b)) for s, a, b in zip(ev.cg.storage_ids, start, end, strict=True)}
    assert got == {s: (lts[s].start, lts[s].end) for s in ev.cg.storage_ids}


def _partial_reference(ev: IndexLiveBytes, seq: list[int]) -> tuple[list[int], list[int]]:
    """The curve of a partial sequence, storage by storage (the update insertion's rule)."""
    cg, m = ev.cg, len(seq)
    pos = {v: k for k, v in enumerate(seq)}
    diff, freed = [0] * (m + 1), [0] * m
    for s, p in enumerate(cg.producer):
        if p not in pos:
            continue
        size = cg.size_bytes[s]
        diff[pos[p]] += size
        if cg.is_output[s]:
            diff[m] -= size
            continue
        e = max([pos[p], *(pos[u] for u in cg.users[s] if u in pos)])
        diff[e + 1] -= size
        freed[e] += size
    return list(np.cumsum(diff[:m]).tolist()), freed


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_partial_sequences_count_only_the_ops_placed(data: st.DataObject) -> None:
    """Leaving ops out: storages they make are not counted, users left out do not extend a
    lifetime (against a storage-by-storage reference); with nothing left out, the
    simulator's curve."""
    g = data.draw(random_graphs(max_ops=12))
    order = data.draw(orders_of(g))
    ev = IndexLiveBytes.of(g, 1)
    idx = _indices(ev, order).tolist()
    keep = data.draw(st.lists(st.booleans(), min_size=len(idx), max_size=len(idx)))
    seq = [v for v, k in zip(idx, keep, strict=True) if k]
    live, freed = ev.live_and_freed(np.asarray(seq, dtype=np.int64))
    assert (live.tolist(), freed.tolist()) == _partial_reference(ev, seq)
    # the whole order again, through the same path
    live, _ = ev.live_and_freed(np.asarray(idx, dtype=np.int64))
    assert tuple(live.tolist()) == simulate(g, order, alignment_bytes=1).live_bytes


def test_an_edge_broken_is_seen() -> None:
    g = SAMPLES["diamond"]()
    ev = IndexLiveBytes(compact(g, 1))
    assert ev.valid(np.array([0, 1, 2, 3]))
    assert not ev.valid(np.array([1, 0, 2, 3]))
