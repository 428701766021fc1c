"""The live-bytes accountings of recomputation against the simulator (property tests).

Two accountings of a drop set's just-in-time expansion are kept in roam_core.recompute:
:meth:`JitEvaluator.evaluate` (per step of the expanded order, mapped from the base order's
live bytes) and :func:`~roam_core.recompute.window_model.jit_accounting` (the window
model's doubled axis: base ops exactly, each gap of re-runs as everything live at any of
them).  Both are held here against :func:`roam_core.oracle.simulate.simulate` of the
expanded graph (:func:`~roam_core.model.recompute_ops.expand_graph`) in the same order, on
random training-step graphs (early phases before late ones, as the evaluator assumes),
random valid base orders and random drop sets.

A re-run's reader that also reads a storage the re-run creates that is *not* dropped (an op
with two outputs, one dropped: max pooling's indices, batch norm's statistics) reads the
copy of both in the expanded graph -- that is what runs -- so both accountings end the kept
original at its last other use and keep the copy to that reader (a regression test below;
the property tests draw such drop sets too).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import assume, event, given
from hypothesis import strategies as st

from roam_core.base.errors import GraphError
from roam_core.model.graph import Graph, Op, OpId, Phase, Tensor, TensorId, TensorKind
from roam_core.model.recompute_ops import expand_graph
from roam_core.oracle.simulate import simulate
from roam_core.oracle.validate import check_order
from roam_core.recompute.evaluator import Evaluation, JitEvaluator
from roam_core.recompute.window_model import jit_accounting
from tests.builders import random_train_graph
from tests.strategies import orders_of, random_graphs


@st.composite
def _phase_ordered(draw: st.DrawFn) -> tuple[Graph, tuple[OpId, ...]]:
    """One of the suite's random graphs (aliases, in-place writes, random ops) with its
    phases redrawn so that, as in a training step, every forward and loss op of the program
    order runs before every backward and optimizer op; the program order is the base."""
    g = draw(random_graphs(max_ops=14))
    cut = draw(st.integers(0, len(g.ops)))
    early, late = (Phase.FORWARD, Phase.LOSS), (Phase.BACKWARD, Phase.OPTIMIZER)
    ops = [replace(op, phase=draw(st.sampled_from(early if k < cut else late)))
           for k, op in enumerate(g.ops)]
    g2 = Graph.build(ops, g.tensors.values(), g.aliases, g.control_edges, g.outputs, g.name)
    return g2, tuple(g2.op_ids)


@st.composite
def _training_step(draw: st.DrawFn) -> tuple[Graph, tuple[OpId, ...]]:
    """A random training step (a forward chain with skips, a loss, a mirrored backward and
    in-place updates: many storages to drop) in a random valid order."""
    g = random_train_graph(draw(st.integers(0, 10_000)), draw(st.integers(2, 8)))
    return g, draw(orders_of(g))


GRAPHS = st.one_of(_training_step(), _phase_ordered())


def _reads_a_kept_copy(ev: JitEvaluator, e: Evaluation) -> bool:
    """Whether a reader of a re-run also reads a storage the re-run makes that is kept."""
    g, dropped = ev.graph, set(e.dropped)
    for r in e.recompute:
        kept = {s for s, _ in ev.index.created_bytes[r.source]} - dropped
        if kept and any(g.storage_of(v) in kept for q in r.readers for v in g.op(q).inputs):
            return True
    return False


def _evaluated(data: st.DataObject) -> tuple[Graph, JitEvaluator, Evaluation]:
    g, base = data.draw(GRAPHS, label="graph and base order")
    ev = JitEvaluator(g, base)
    pool = sorted(s for s in ev.droppable if ev.size[s])
    drop = data.draw(st.lists(st.sampled_from(pool), min_size=1, unique=True), label="dropped") \
        if pool else []
    try:
        e = ev.evaluate(drop)
    except GraphError:  # a drop set recompute_ops_for refuses
        assume(False)
    event("a kept sibling read through the copy" if _reads_a_kept_copy(ev, e)
          else "with re-runs" if e.recompute else "nothing re-run")
    return g, ev, e


@given(st.data())
def test_evaluation_is_the_simulation_of_the_expanded_graph(data: st.DataObject) -> None:
    g, _, e = _evaluated(data)
    g2 = expand_graph(g, e.recompute, order=e.order)
    assert check_order(g2, e.order) == []
    prof = simulate(g2, e.order)
    assert e.live is not None
    assert e.live.tolist() == list(prof.live_bytes)
    assert (e.peak_bytes, e.peak_steps) == (
        prof.peak_bytes, sum(x == max(prof.live_bytes, default=0) for x in prof.live_bytes))
    assert e.positions is not None
    assert all(e.order[e.positions[o]] == o for o in g.op_ids)


@given(st.data())
def test_window_accounting_bounds_the_simulation(data: st.DataObject) -> None:
    """At base ops ``jit_accounting`` is the simulator's live bytes; at each re-run step it
    is at least them (the gap before the base op the re-run precedes)."""
    g, ev, e = _evaluated(data)
    acc = jit_accounting(ev, e.dropped)
    live = np.asarray(simulate(expand_graph(g, e.recompute, order=e.order), e.order).live_bytes,
                      dtype=np.int64)
    assert e.positions is not None
    steps = np.asarray(e.positions.base_steps)
    assert acc[1::2].tolist() == live[steps].tolist()
    for k in sorted(set(range(len(e.order))) - set(steps.tolist())):
        assert acc[2 * int(np.searchsorted(steps, k))] >= live[k]
    assert int(acc.max(initial=0)) + ev.resident >= e.peak_bytes


def test_a_kept_sibling_read_by_the_reruns_reader_is_counted_as_the_simulation() -> None:
    def t(tid: str, kind: TensorKind, producer: str | None, consumers: tuple[str, ...]
          ) -> Tensor:
        return Tensor(TensorId(tid), 512, "float32", (128,), kind,
                      None if producer is None else OpId(producer), consumers)

    g = Graph.build(
        [Op(OpId("f"), "aten.mm.default", Phase.FORWARD, ("w",), ("a", "b")),
         Op(OpId("g"), "aten.mm.default", Phase.BACKWARD, ("a", "b"), ())],
        [t("w", TensorKind.PARAMETER, None, ("f",)),
         t("a", TensorKind.ACTIVATION, "f", ("g",)), t("b", TensorKind.ACTIVATION, "f", ("g",))],
        [], [], outputs=[])
    ev = JitEvaluator(g, g.op_ids)
    e = ev.evaluate(["a"])  # b is kept, g reads both: g gets both copies
    assert _reads_a_kept_copy(ev, e)
    prof = simulate(expand_graph(g, e.recompute, order=e.order), e.order)
    assert e.live is not None
    assert e.live.tolist() == list(prof.live_bytes)
    acc = jit_accounting(ev, e.dropped)
    assert e.positions is not None
    assert acc[1::2].tolist() == [prof.live_bytes[k] for k in e.positions.base_steps]


def test_a_kept_sibling_with_other_readers_lives_to_its_last_other_use() -> None:
    """``b`` is also read by a later backward op through another value (a view): the
    original stays live to that op, the copy to the re-run's reader."""
    from roam_core.model.graph import Alias

    def t(tid: str, kind: TensorKind, producer: str | None) -> Tensor:
        return Tensor(TensorId(tid), 512, "float32", (128,), kind,
                      None if producer is None else OpId(producer))

    g = Graph.build(
        [Op(OpId("f"), "aten.max_pool2d_with_indices.default", Phase.FORWARD, ("w",),
            ("a", "b")),
         Op(OpId("v"), "aten.view.default", Phase.FORWARD, ("b",), ("bv",)),
         Op(OpId("x"), "aten.relu.default", Phase.FORWARD, ("a",), ("y",)),
         Op(OpId("g"), "aten.mm.default", Phase.BACKWARD, ("a", "b", "y"), ("gy",)),
         Op(OpId("k"), "aten.mm.default", Phase.BACKWARD, ("bv", "gy"), ("gk",))],
        [t("w", TensorKind.PARAMETER, None), t("a", TensorKind.ACTIVATION, "f"),
         t("b", TensorKind.ACTIVATION, "f"), t("y", TensorKind.ACTIVATION, "x"),
         t("gy", TensorKind.GRADIENT, "g"), t("gk", TensorKind.GRADIENT, "k")],
        [Alias("bv", TensorId("b"), OpId("v"))], [], outputs=[TensorId("gk")])
    ev = JitEvaluator(g, g.op_ids)
    e = ev.evaluate(["a"])
    assert _reads_a_kept_copy(ev, e)
    prof = simulate(expand_graph(g, e.recompute, order=e.order), e.order)
    assert e.live is not None
    assert e.live.tolist() == list(prof.live_bytes)
    assert e.spans is not None
    assert e.positions is not None
    assert e.spans["b"][1] == e.positions["k"] + 1  # the original: to k, through the view
