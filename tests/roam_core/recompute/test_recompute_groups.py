"""Group moves of roam's greedy search: storages that only lower the peak when dropped
together (they need the same input that is not live at the peak)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from roam_core.model.graph import (
    ControlEdge,
    EdgeReason,
    Graph,
    Op,
    OpId,
    Tensor,
    TensorId,
    TensorKind,
)
from roam_core.model.recompute_ops import recompute_cost
from roam_core.oracle.validate import check_plan
from roam_core.planner import make_plan
from roam_core.planner.budget import BudgetPlanner
from roam_core.planner.config import PlannerConfig
from roam_core.recompute.evaluator import JitEvaluator
from roam_core.recompute.greedy import GreedyTrajectory, greedy_trajectory
from tests.builders import BW, FW, LO, OPT, random_train_graph

GREEDY = PlannerConfig(workers=1, layout_time_limit_s=2.0).with_recompute(exact_max_ops=0)
S = 4096
K = TensorKind


def _t(tid: str, size: int, kind: TensorKind, p: str | None) -> Tensor:
    return Tensor(TensorId(tid), size, "float32", (max(size // 4, 1),), kind,
                  OpId(p) if p else None)


def shared_input_step(n: int = 2) -> Graph:
    """``p = mm(x, w)`` (costly, no backward reads it) feeds ``n`` elementwise storages that
    the backward reads; a large buffer at the start of the backward, freed before the
    first of them is read, sets the peak.

    Dropping one of them either holds ``p`` across the peak (no gain) or re-runs the ``mm``;
    dropping all ``n`` while holding ``p`` once frees ``(n - 1) x S`` for no FLOPs.
    """
    ops = [Op(OpId("mm"), "aten.mm.default", FW, ("x", "w"), ("p",), flops=10**6,
              bytes_read=2 * S, bytes_written=S)]
    tensors = [_t("x", 1024, K.INPUT, None), _t("w", 1024, K.PARAMETER, None),
               _t("p", S, K.ACTIVATION, "mm")]
    for i in range(n):
        ops.append(Op(OpId(f"e{i}"), "aten.relu.default", FW, ("p",), (f"a{i}",), flops=0,
                      bytes_read=S, bytes_written=S))
        tensors.append(_t(f"a{i}", S, K.ACTIVATION, f"e{i}"))
    ops.append(Op(OpId("cat"), "aten.add.Tensor", FW, tuple(f"a{i}" for i in range(n)),
                  ("c",), flops=0, bytes_read=n * S, bytes_written=512))
    tensors.append(_t("c", 512, K.ACTIVATION, "cat"))
    ops.append(Op(OpId("loss"), "aten.sum.default", LO, ("c",), ("loss",), flops=10,
                  bytes_read=512, bytes_written=4))
    tensors.append(_t("loss", 4, K.OUTPUT, "loss"))
    ops.append(Op(OpId("g_top"), "aten.ones_like.default", BW, ("loss",), ("t",), flops=0,
                  bytes_read=4, bytes_written=4 * S))
    tensors.append(_t("t", 4 * S, K.TEMPORARY, "g_top"))
    ops.append(Op(OpId("shrink"), "aten.sum.dim_IntList", BW, ("t",), ("g",), flops=0,
                  bytes_read=4 * S, bytes_written=512))
    tensors.append(_t("g", 512, K.TEMPORARY, "shrink"))
    grads = []
    for i in range(n):
        ops.append(Op(OpId(f"b{i}"), "aten.threshold_backward.default", BW, ("g", f"a{i}"),
                      (f"ga{i}",), flops=0, bytes_read=S + 512, bytes_written=512))
        tensors.append(_t(f"ga{i}", 512, K.TEMPORARY, f"b{i}"))
        grads.append(f"ga{i}")
    ops.append(Op(OpId("gw"), "aten.mm.default", BW, ("x", *grads), ("grad_w",),
                  flops=10**6, bytes_read=2 * S, bytes_written=1024))
    tensors.append(_t("grad_w", 1024, K.GRADIENT, "gw"))
    ops.append(Op(OpId("upd"), "aten.sub_.Tensor", OPT, ("w", "grad_w"), (),
                  (TensorId("w"),), flops=0, bytes_read=2048, bytes_written=1024))
    edges = [ControlEdge(OpId(r), OpId("upd"), EdgeReason.MUTATION) for r in ("mm", "gw")]
    return Graph.build(ops, tensors, [], edges, outputs=[TensorId("loss")],
                       name="shared-input")


@pytest.mark.parametrize("n", [2, 3])
def test_a_group_move_lowers_the_peak_where_single_moves_cannot_for_free(n):
    g = shared_input_step(n)
    ev = JitEvaluator(g, g.op_ids)
    plain = ev.evaluate(())
    # no single drop lowers the peak without re-running the mm
    for s in ev.droppable:
        e = ev.evaluate((s,))
        assert e.peak_bytes >= plain.peak_bytes or e.extra_flops > 0
    single = GreedyTrajectory(g, g.op_ids, group_moves=False).run(max_steps=1)
    grouped = GreedyTrajectory(g, g.op_ids).run(max_steps=1)
    assert single.points[1].extra_flops > 0  # the one-at-a-time search pays for the mm
    got = grouped.points[1]
    assert got.peak_bytes < plain.peak_bytes
    assert got.extra_flops == 0
    assert set(grouped.dropped) == {f"a{i}" for i in range(n)}
    assert got.peak_bytes == ev.evaluate(grouped.dropped).peak_bytes  # exact evaluation


def test_a_single_budget_plan_uses_the_group_and_is_valid():
    g = shared_input_step(3)
    grouped = GreedyTrajectory(g, g.op_ids).run(max_steps=1)
    budget = grouped.points[1].peak_bytes
    p = make_plan(g, replace(GREEDY, budget_bytes=budget))
    assert check_plan(g, p) == []
    assert p.arena_bytes <= budget
    assert recompute_cost(g, p.recompute)[0] == 0  # no mm re-run


@pytest.mark.parametrize("seed", range(8))
def test_group_moves_keep_the_trajectory_monotone_and_exact(seed):
    g = random_train_graph(seed, 8)
    dropped, pts = greedy_trajectory(g, g.op_ids)
    ev = JitEvaluator(g, g.op_ids)
    for a, b in itertools.pairwise(pts):
        assert b.peak_bytes <= a.peak_bytes
        assert b.n_dropped > a.n_dropped
    for p in pts:
        e = ev.evaluate(dropped[:p.n_dropped])
        assert (e.peak_bytes, e.extra_flops, e.extra_bytes) == (
            p.peak_bytes, p.extra_flops, p.extra_bytes)


@pytest.mark.parametrize("seed", range(6))
def test_the_budget_planner_reaches_what_single_moves_reach(seed):
    """Where the grouped run ends above a peak the single-move run reaches, the planner
    falls back to the latter: its lowest peak is never higher than before."""
    g = random_train_graph(seed, 8)
    bp = BudgetPlanner(g, GREEDY)
    single = GreedyTrajectory(g, bp.base.order, group_moves=False).run()
    assert bp.lowest_bytes() <= min(p.peak_bytes for p in single.points)
