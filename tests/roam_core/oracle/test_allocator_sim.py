"""Caching-allocator model: a hand-traced large/small pool scenario and properties."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roam_core.model.graph import Graph, Op, OpId, Phase, Tensor, TensorId, TensorKind
from roam_core.model.samples import chain3, diamond, tiny_train_step
from roam_core.oracle.allocator_sim import AllocatorConfig, simulate_allocator
from roam_core.oracle.simulate import simulate
from tests.strategies import orders_of, random_graphs

MIB = 1024 * 1024
KIB = 1024


def _pools_graph() -> Graph:
    """a: A(3M); b: A -> B(16.5M); c: B -> C(11M); d: C -> D(2M), E(1000 B); e: D, E -> F(5M)."""
    f, k = Phase.FORWARD, TensorKind.ACTIVATION

    def t(tid: str, size: int, p: str) -> Tensor:
        return Tensor(TensorId(tid), size, "f", (), k, OpId(p))

    return Graph.build(
        [Op(OpId("a"), "x", f, (), ("A",)), Op(OpId("b"), "x", f, ("A",), ("B",)),
         Op(OpId("c"), "x", f, ("B",), ("C",)), Op(OpId("d"), "x", f, ("C",), ("D", "E")),
         Op(OpId("e"), "x", f, ("D", "E"), ("F",))],
        [t("A", 3 * MIB, "a"), t("B", 33 * MIB // 2, "b"), t("C", 11 * MIB, "c"),
         t("D", 2 * MIB, "d"), t("E", 1000, "d"), t("F", 5 * MIB, "e")],
    )


def test_hand_traced_pools():
    r = simulate_allocator(_pools_graph())
    # step 0: A splits a new 20 MiB large segment (rest 17 MiB is cached)
    # step 1: B (16.5 MiB) takes the cached 17 MiB whole: the 0.5 MiB tail is not split
    # step 2: C (11 MiB) gets its own 12 MiB segment, unsplit (1 MiB tail is not > 1 MiB)
    #         then B's free merges with A's: a 20 MiB free block at 0
    # step 3: D splits that block; E opens a 2 MiB small segment; then C is freed
    # step 4: F best-fits C's 12 MiB block (smaller than the 18 MiB one)
    assert r.allocated_bytes_per_step == (3 * MIB, 20 * MIB, 29 * MIB, 14 * MIB + KIB,
                                          7 * MIB + KIB)
    assert r.requested_bytes_per_step == (3 * MIB, 39 * MIB // 2, 55 * MIB // 2,
                                          13 * MIB + KIB, 7 * MIB + KIB)
    assert r.reserved_bytes_per_step == (20 * MIB, 20 * MIB, 32 * MIB, 34 * MIB, 34 * MIB)
    assert (r.peak_allocated_bytes, r.peak_step) == (29 * MIB, 2)
    assert r.peak_reserved_bytes == 34 * MIB
    assert r.peak_requested_bytes == simulate(_pools_graph()).peak_bytes == 55 * MIB // 2
    assert [(b.tensor_id, b.segment, b.address, b.size_bytes) for b in r.blocks] == [
        ("A", 0, 0, 3 * MIB), ("B", 0, 3 * MIB, 17 * MIB), ("C", 1, 20 * MIB, 12 * MIB),
        ("D", 0, 0, 2 * MIB), ("E", 2, 32 * MIB, KIB), ("F", 1, 20 * MIB, 5 * MIB),
    ]
    assert [(s.address, s.size_bytes, s.pool, s.created_step) for s in r.segments] == [
        (0, 20 * MIB, "large", 0), (20 * MIB, 12 * MIB, "large", 2),
        (32 * MIB, 2 * MIB, "small", 3),
    ]
    assert r.fragmentation_bytes == 5 * MIB


def test_config_constants():
    c = AllocatorConfig()
    assert [c.round_request(x) for x in (0, 1, 512, 513)] == [0, 512, 512, 1024]
    assert c.segment_bytes(MIB) == 2 * MIB
    assert c.segment_bytes(MIB + 512) == 20 * MIB
    assert c.segment_bytes(10 * MIB - 512) == 20 * MIB
    assert c.segment_bytes(10 * MIB) == 10 * MIB
    assert c.segment_bytes(10 * MIB + 512) == 12 * MIB


def test_small_samples_curves():
    assert simulate_allocator(chain3()).allocated_bytes_per_step == (512, 1024, 1024)
    r = simulate_allocator(diamond(), ["a", "c", "b", "d"])
    assert r.allocated_bytes_per_step == (512, 1024, 1536, 1536)
    assert [(b.tensor_id, b.address) for b in r.blocks] == [
        ("a", 0), ("c", 512), ("b", 1024), ("d", 0)]
    t = simulate_allocator(tiny_train_step())
    # residents w, x first (1024 B), then the per-step curve of simulate()
    assert t.resident_bytes == 1024
    assert t.allocated_bytes_per_step == (1536, 2048, 2048, 2560, 3072, 2048, 2560, 2048)
    assert [b.tensor_id for b in t.blocks[:2]] == ["w", "x"]
    assert all(b.resident for b in t.blocks[:2])


def test_zero_size_takes_no_block():
    f, k = Phase.FORWARD, TensorKind.ACTIVATION
    g = Graph.build([Op(OpId("a"), "x", f, (), ("z",))],
                    [Tensor(TensorId("z"), 0, "f", (0,), k, OpId("a"))])
    r = simulate_allocator(g)
    assert r.blocks == ()
    assert r.segments == ()
    assert r.allocated_bytes_per_step == (0,)
    assert r.peak_reserved_bytes == 0


def _check_result(g: Graph, order) -> None:
    r = simulate_allocator(g, order)
    prof = simulate(g, order)
    assert r.requested_bytes_per_step == prof.total_bytes()
    assert r.peak_requested_bytes == prof.peak_bytes
    for alloc, req, res in zip(r.allocated_bytes_per_step, r.requested_bytes_per_step,
                               r.reserved_bytes_per_step):
        assert req <= alloc <= res
    assert r.peak_allocated_bytes <= r.peak_reserved_bytes
    assert r.peak_reserved_bytes == sum(s.size_bytes for s in r.segments)
    # every block lies inside its segment, co-live blocks never share bytes
    segs = {s.index: s for s in r.segments}
    for b in r.blocks:
        s = segs[b.segment]
        assert s.address <= b.address
        assert b.address + b.size_bytes <= s.address + s.size_bytes
        assert b.requested_bytes <= b.size_bytes
    for x, y in itertools.combinations(r.blocks, 2):
        if x.start_step < y.end_step and y.start_step < x.end_step:
            assert (x.address + x.size_bytes <= y.address
                    or y.address + y.size_bytes <= x.address), (x, y)


@pytest.mark.slow
@given(st.data())
def test_small_pool_matches_simulate(data):
    """With sizes <= 4 KiB every block is split exactly: allocated == simulate."""
    g = data.draw(random_graphs(max_ops=12))
    order = data.draw(orders_of(g))
    _check_result(g, order)
    r = simulate_allocator(g, order)
    assert r.peak_allocated_bytes == simulate(g, order).peak_bytes
    assert all(s.pool == "small" for s in r.segments)


@pytest.mark.slow
@given(st.data())
def test_mixed_pools_invariants(data):
    g = data.draw(random_graphs(max_ops=12, max_size_bytes=30 * MIB))
    _check_result(g, data.draw(orders_of(g)))
