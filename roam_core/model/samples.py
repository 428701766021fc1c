"""Tiny hand-built graphs for doctests, tests, teaching and the app's demo menu.

Each function returns a fresh :class:`~roam_core.model.graph.Graph`.  Sizes are chosen so that
curves can be computed by hand (use ``alignment_bytes=1`` to see exact bytes).
"""

from __future__ import annotations

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

__all__ = ["SAMPLES", "chain3", "diamond", "tiny_train_step"]


def _t(tid: str, size: int, kind: TensorKind, producer: str | None) -> Tensor:
    return Tensor(TensorId(tid), size, "float32", (size // 4,), kind,
                  OpId(producer) if producer else None)


def chain3() -> Graph:
    """Three ops in a line: ``a -> b -> c``, each output 100 bytes.

    Examples
    --------
    >>> from roam_core.oracle.simulate import simulate
    >>> simulate(chain3(), alignment_bytes=1).live_bytes
    (100, 200, 200)
    """
    f, act = Phase.FORWARD, TensorKind.ACTIVATION
    return Graph.build(
        [Op(OpId("a"), "aten.randn.default", f, (), ("a",)),
         Op(OpId("b"), "aten.relu.default", f, ("a",), ("b",)),
         Op(OpId("c"), "aten.relu.default", f, ("b",), ("c",))],
        [_t("a", 100, act, "a"), _t("b", 100, act, "b"), _t("c", 100, act, "c")],
        name="chain3",
    )


def diamond() -> Graph:
    """``a`` feeds ``b`` and ``c``, which both feed ``d`` (sizes 100, 200, 50, 10).

    Every order peaks at 350 bytes (``a``, ``b`` and ``c`` are live together just before
    ``d``); the graph exercises branching, not reordering.
    """
    f, act = Phase.FORWARD, TensorKind.ACTIVATION
    return Graph.build(
        [Op(OpId("a"), "aten.randn.default", f, (), ("a",)),
         Op(OpId("b"), "aten.relu.default", f, ("a",), ("b",)),
         Op(OpId("c"), "aten.relu.default", f, ("a",), ("c",)),
         Op(OpId("d"), "aten.add.Tensor", f, ("b", "c"), ("d",))],
        [_t("a", 100, act, "a"), _t("b", 200, act, "b"), _t("c", 50, act, "c"),
         _t("d", 10, act, "d")],
        name="diamond",
    )


def tiny_train_step() -> Graph:
    """A one-layer training step with SGD: forward, loss, backward and an in-place update.

    ``w`` (parameter, 400 B) and ``x`` (input, 200 B) are resident.  The update ``w -= g``
    mutates ``w`` in place, so it must run after the forward read of ``w`` (a mutation
    control edge) and after the backward read of ``w`` through its transpose view.
    """
    fw, lo, bw, opt = Phase.FORWARD, Phase.LOSS, Phase.BACKWARD, Phase.OPTIMIZER
    k = TensorKind
    ops = [
        Op(OpId("mm"), "aten.mm.default", fw, ("x", "w"), ("mm",)),
        Op(OpId("relu"), "aten.relu.default", fw, ("mm",), ("relu",)),
        Op(OpId("loss"), "aten.sum.default", lo, ("relu",), ("loss",)),
        Op(OpId("ones"), "aten.ones_like.default", bw, ("loss",), ("ones",)),
        Op(OpId("relu_bw"), "aten.threshold_backward.default", bw, ("ones", "relu"),
           ("relu_bw",)),
        Op(OpId("t"), "aten.t.default", bw, ("x",), ("t",)),
        Op(OpId("grad_w"), "aten.mm.default", bw, ("t", "relu_bw"), ("grad_w",)),
        Op(OpId("update"), "aten.sub_.Tensor", opt, ("w", "grad_w"), ("update",),
           (TensorId("w"),)),
    ]
    tensors = [
        _t("w", 400, k.PARAMETER, None), _t("x", 200, k.INPUT, None),
        _t("mm", 300, k.ACTIVATION, "mm"), _t("relu", 300, k.ACTIVATION, "relu"),
        _t("loss", 4, k.OUTPUT, "loss"), _t("ones", 300, k.TEMPORARY, "ones"),
        _t("relu_bw", 300, k.TEMPORARY, "relu_bw"), _t("grad_w", 400, k.GRADIENT, "grad_w"),
    ]
    aliases = [Alias("t", TensorId("x"), OpId("t")), Alias("update", TensorId("w"),
                                                           OpId("update"))]
    edges = [ControlEdge(OpId("mm"), OpId("update"), EdgeReason.MUTATION)]
    return Graph.build(ops, tensors, aliases, edges, outputs=[TensorId("loss")],
                       name="tiny_train_step")


#: Name -> factory, for menus.
SAMPLES = {"chain3": chain3, "diamond": diamond, "tiny_train_step": tiny_train_step}
