"""Eager baseline: moved-state order and the report, on a hand-computed two-parameter step."""

from __future__ import annotations

import copy

from hypothesis import given

from roam_core.model.graph import (
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
from roam_core.oracle.baseline import eager_report, moved_state_order, state_creation_ops
from roam_core.oracle.simulate import simulate
from roam_core.oracle.validate import check_order
from tests.strategies import random_graphs


def _two_param_adam() -> Graph:
    """torch-2.13-style program order: both state tensors are created before any update."""
    k = TensorKind
    fw, lo, bw, opt = Phase.FORWARD, Phase.LOSS, Phase.BACKWARD, Phase.OPTIMIZER
    ops = [
        Op(OpId("f"), "mm", fw, ("x", "p1", "p2"), ("f",)),
        Op(OpId("l"), "sum", lo, ("f",), ("l",)),
        Op(OpId("g1"), "mm", bw, ("l", "f"), ("g1",)),
        Op(OpId("g2"), "mm", bw, ("l", "f"), ("g2",)),
        Op(OpId("z1"), "zeros_like", opt, ("p1",), ("m1",)),
        Op(OpId("z2"), "zeros_like", opt, ("p2",), ("m2",)),
        Op(OpId("u1"), "adam_", opt, ("p1", "m1", "g1"), (), (TensorId("p1"), TensorId("m1"))),
        Op(OpId("u2"), "adam_", opt, ("p2", "m2", "g2"), (), (TensorId("p2"), TensorId("m2"))),
    ]

    def t(tid: str, size: int, kind: TensorKind, p: str | None) -> Tensor:
        return Tensor(TensorId(tid), size, "f", (), kind, OpId(p) if p else None)

    tensors = [
        t("x", 10, k.INPUT, None), t("p1", 1000, k.PARAMETER, None),
        t("p2", 1000, k.PARAMETER, None), t("f", 100, k.ACTIVATION, "f"),
        t("l", 4, k.OUTPUT, "l"), t("g1", 1000, k.GRADIENT, "g1"),
        t("g2", 1000, k.GRADIENT, "g2"), t("m1", 1000, k.OPTIMIZER_STATE, "z1"),
        t("m2", 1000, k.OPTIMIZER_STATE, "z2"),
    ]
    edges = [ControlEdge(OpId("f"), OpId("u1"), EdgeReason.MUTATION),
             ControlEdge(OpId("f"), OpId("u2"), EdgeReason.MUTATION)]
    return Graph.build(ops, tensors, (), edges, outputs=[TensorId(s) for s in ("l", "m1", "m2")])


def test_state_creation_found_structurally():
    g = _two_param_adam()
    assert state_creation_ops(g) == ("z1", "z2")
    order = moved_state_order(g)
    assert order == ("f", "l", "g1", "g2", "z1", "u1", "z2", "u2")
    assert check_order(g, order) == []


def test_state_creation_ops_computed_once_per_graph():
    # update_groups asks once per group: the scan over all ops runs once per graph object
    g = _two_param_adam()
    first = g.state_creation_ops()
    assert g.state_creation_ops() is first
    g2 = g.with_control_edges([])  # a new graph computes its own
    assert g2.state_creation_ops() == first == ("z1", "z2")
    assert copy.deepcopy(g).state_creation_ops() == first


def test_curves_exact_bytes():
    g = _two_param_adam()
    prog = simulate(g, alignment_bytes=1)
    assert prog.live_bytes == (100, 104, 1104, 2104, 3004, 4004, 4004, 3004)
    assert (prog.resident_bytes, prog.peak_bytes, prog.peak_step) == (2010, 6014, 5)
    moved = simulate(g, moved_state_order(g), alignment_bytes=1)
    assert moved.live_bytes == (100, 104, 1104, 2104, 3004, 3004, 3004, 3004)
    r = eager_report(g, alignment_bytes=1)
    assert (r.simulated_peak_bytes, r.moved_state_simulated_peak_bytes) == (6014, 5014)
    # forced at u1: l (output), g1, m1
    assert (r.live_set_lower_bound_bytes, r.lower_bound_op) == (4014, "u1")
    assert r.lower_bound_bytes == 4014


def test_report_rounded():
    r = eager_report(_two_param_adam())
    assert (r.n_ops, r.n_storages, r.n_aliases) == (8, 9, 0)
    assert r.control_edges_by_reason == {"data": 0, "mutation": 2, "rng": 0,
                                         "weight_update": 0, "collective": 0}
    assert r.resident_bytes == 2560
    # program order: 512, 1024, 2048, 3072, 3584, 4608, 4608, 3584 (+ 2560 resident)
    assert (r.simulated_peak_bytes, r.peak_allocated_bytes, r.peak_step, r.peak_op) == (
        7168, 7168, 5, "z2")
    assert r.peak_reserved_bytes == 2 * 1024 * 1024
    assert (r.moved_state_simulated_peak_bytes, r.moved_state_peak_allocated_bytes) == (
        6144, 6144)
    assert r.moved_state_ops == 2
    assert (r.lower_bound_bytes, r.lower_bound_method) == (5120, "live_set")
    assert r.bytes_by_kind == {
        "parameter": 2048, "buffer": 0, "input": 512, "activation": 512, "gradient": 2048,
        "optimizer_state": 2048, "temporary": 0, "output": 512, "communication": 0}
    assert r.bytes_by_phase == {"forward": 512, "loss": 512, "backward": 2048,
                                "optimizer": 2048, "other": 0, "resident": 2560}
    assert r.peak_bytes_by_kind == {
        "parameter": 2048, "buffer": 0, "input": 512, "activation": 0, "gradient": 2048,
        "optimizer_state": 2048, "temporary": 0, "output": 512, "communication": 0}
    assert sum(r.peak_bytes_by_kind.values()) == r.simulated_peak_bytes
    d = r.to_dict()
    assert d["bytes_by_kind"] == r.bytes_by_kind
    assert d["lower_bound_bytes"] == 5120


def test_moved_through_control_edge_chain():
    """z_a -> z_b (RNG edge); z_a's first real user s comes before z_b's user t."""
    opt, k = Phase.OPTIMIZER, TensorKind.OPTIMIZER_STATE
    g = Graph.build(
        [Op(OpId("z_a"), "rand_like", opt, ("p",), ("A",), (), True),
         Op(OpId("z_b"), "rand_like", opt, ("p",), ("B",), (), True),
         Op(OpId("s"), "mul", opt, ("A",), ("S",)),
         Op(OpId("t"), "mul", opt, ("B",), ("T",))],
        [Tensor(TensorId("p"), 8, "f", (), TensorKind.PARAMETER, None),
         Tensor(TensorId("A"), 8, "f", (), k, OpId("z_a")),
         Tensor(TensorId("B"), 8, "f", (), k, OpId("z_b")),
         Tensor(TensorId("S"), 8, "f", (), k, OpId("s")),
         Tensor(TensorId("T"), 8, "f", (), k, OpId("t"))],
        control_edges=[ControlEdge(OpId("z_a"), OpId("z_b"), EdgeReason.RNG)],
    )
    order = moved_state_order(g)
    assert order == ("z_a", "s", "z_b", "t")
    assert check_order(g, order) == []


@given(random_graphs(max_ops=12))
def test_moved_order_always_valid(g):
    order = moved_state_order(g)
    assert check_order(g, order) == []
    r = eager_report(g)
    assert r.lower_bound_bytes <= r.simulated_peak_bytes <= r.peak_allocated_bytes
    assert r.lower_bound_bytes <= r.moved_state_simulated_peak_bytes
    assert r.peak_allocated_bytes <= r.peak_reserved_bytes
    assert sum(r.bytes_by_kind.values()) == sum(r.bytes_by_phase.values())


def test_graph_without_ops():
    g = Graph.build([], [Tensor(TensorId("p"), 100, "f", (), TensorKind.PARAMETER, None)])
    r = eager_report(g, alignment_bytes=1)
    assert (r.simulated_peak_bytes, r.peak_step, r.peak_op) == (100, -1, None)
    assert r.peak_allocated_bytes == 512  # the allocator model always rounds to 512 B
    assert r.peak_reserved_bytes == 2 * 1024 * 1024
    assert (r.lower_bound_bytes, r.lower_bound_op) == (100, None)
    assert r.peak_bytes_by_kind["parameter"] == 100
    assert moved_state_order(g) == ()
