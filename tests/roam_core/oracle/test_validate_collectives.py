"""The collective-order rule: a plan that reorders collectives is invalid, edges or not."""

from __future__ import annotations

from roam_core.base.errors import ViolationKind
from roam_core.model.graph import (
    ControlEdge,
    EdgeReason,
    Graph,
    Op,
    OpId,
    Phase,
    Tensor,
    TensorKind,
)
from roam_core.oracle.validate import check_order
from roam_core.oracle.validate.order_rules import check_collective_order

AG = "_c10d_functional.all_gather_into_tensor.default"
RS = "_c10d_functional.reduce_scatter_tensor.default"


def _graph(edges: bool) -> Graph:
    """Two independent collectives (an all-gather, a reduce-scatter) and a wait."""
    f, b = Phase.FORWARD, Phase.BACKWARD
    res = [Tensor(x, 64, "float32", (16,), TensorKind.PARAMETER, None) for x in ("w1", "w2")]
    made = [Tensor(x, 256, "float32", (64,), TensorKind.COMMUNICATION, OpId(x))
            for x in ("ag", "rs")]
    ops = [Op(OpId("ag"), AG, f, ("w1",), ("ag",)),
           Op(OpId("rs"), RS, b, ("w2",), ("rs",)),
           Op(OpId("use"), "aten.add.Tensor", b, ("ag", "rs"), ("out",))]
    out = Tensor("out", 256, "float32", (64,), TensorKind.OUTPUT, OpId("use"))
    ce = [ControlEdge(OpId("ag"), OpId("rs"), EdgeReason.COLLECTIVE)] if edges else []
    return Graph.build(ops, res + made + [out], control_edges=ce, outputs=["out"])


def test_program_order_is_valid() -> None:
    for edges in (True, False):
        g = _graph(edges)
        assert check_order(g, g.op_ids) == []


def test_swapped_collectives_are_invalid_with_or_without_edges() -> None:
    for edges in (True, False):
        v = check_order(_graph(edges), ["rs", "ag", "use"])
        assert [(x.kind, x.subject_id) for x in v] == [(ViolationKind.COLLECTIVE_ORDER, "rs")]
        assert "'ag'" in v[0].message
        assert "every rank" in v[0].message


def test_rule_alone_ignores_ops_missing_from_the_order() -> None:
    g = _graph(False)
    assert check_collective_order(g, ["ag", "use"]) == []
    assert check_collective_order(g, ["use"]) == []
