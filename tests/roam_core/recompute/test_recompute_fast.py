"""The indexed greedy search equals the search as first written (tests/greedy_reference.py).

:class:`JitEvaluator` maps the base order's live bytes onto the expanded order instead of
re-simulating it, :func:`recompute_ops_for` visits only the dropped storages' reads, and
:class:`GreedyTrajectory` filters candidates with arrays and can stop at a budget and go on:
each must give exactly what the plain versions give (evaluations, trajectories, plans).
The reference moves one storage at a time: trajectories are compared with group moves off
(tests/roam_core/recompute/test_recompute_groups.py tests those).
"""

from __future__ import annotations

import random

import pytest

from roam_core.formats.graph_io import load_graph
from roam_core.model.recompute_ops import late_read_index, recompute_ops_for
from roam_core.ordering.registry import run_method
from roam_core.recompute.evaluator import JitEvaluator
from roam_core.recompute.greedy import GreedyTrajectory, greedy_trajectory
from tests.builders import random_train_graph
from tests.greedy_reference import reference_evaluate, reference_trajectory
from tests.paths import SAMPLE_DIR

SAMPLES = SAMPLE_DIR
REAL = ("tiny_gpt-b2-t32-steady", "teach_recompute-b256-steady", "mlp-b8-steady")


def _graphs():  # type: ignore[no-untyped-def]
    for seed in range(12):
        yield f"random{seed}", random_train_graph(seed, 6 + seed % 5)
    for name in REAL:
        yield name, load_graph(SAMPLES / f"{name}.json.gz")


GRAPHS = dict(_graphs())


def _same(ev, e, ref) -> None:  # type: ignore[no-untyped-def]
    assert (e.dropped, e.recompute, e.order) == (ref["dropped"], ref["recompute"], ref["order"])
    assert (e.peak_bytes, e.peak_steps, e.extra_flops, e.extra_bytes) == (
        ref["peak_bytes"], ref["peak_steps"], ref["extra_flops"], ref["extra_bytes"])
    assert dict(e.spans) == ref["spans"]
    assert e.live.tolist() == ref["live"].tolist()
    assert {o: e.positions[o] for o in ev.graph.op_ids} == {
        o: ref["positions"][o] for o in ev.graph.op_ids}


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("base", ["program", "lpmf"])
def test_indexed_evaluator_equals_the_full_simulation(name, base):
    g = GRAPHS[name]
    order = g.op_ids if base == "program" else run_method(g, "lpmf")
    ev = JitEvaluator(g, order)
    rnd = random.Random(name)
    sets = [(), tuple(ev.droppable)] + [
        tuple(s for s in ev.droppable if rnd.random() < q) for q in (0.1, 0.3, 0.6, 0.9)]
    for drop in sets:
        _same(ev, ev.evaluate(drop), reference_evaluate(ev, drop))
        assert ev.recompute_ops(drop) == recompute_ops_for(g, drop)


def test_late_read_index_lists_every_late_read_in_program_order():
    g = GRAPHS["tiny_gpt-b2-t32-steady"]
    idx = late_read_index(g)
    reads = sorted(r for rs in idx.values() for r in rs)
    assert all(list(rs) == sorted(rs) for rs in idx.values())
    assert all(g.storage_of(v) == s and g.ops[i].id == o and g.ops[i].inputs[k] == v
               for s, rs in idx.items() for i, k, v, o in rs)
    assert len(reads) == sum(len(op.inputs) for op in g.ops if op.phase.value in
                             ("backward", "optimizer"))


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_trajectory_equals_the_reference(name):
    g = GRAPHS[name]
    got = greedy_trajectory(g, g.op_ids, group_moves=False)  # the reference moves singly
    assert got == reference_trajectory(g, g.op_ids)
    assert len(got[1]) > 1 or name == "mlp-b8-steady"  # its peak has nothing droppable


@pytest.mark.parametrize("name", ["random3", "tiny_gpt-b2-t32-steady"])
def test_a_trajectory_stopped_at_a_budget_goes_on_to_the_same_end(name):
    g = GRAPHS[name]
    whole = greedy_trajectory(g, g.op_ids)
    pts = whole[1]
    t = GreedyTrajectory(g, g.op_ids)
    for target in sorted({p.peak_bytes for p in pts}, reverse=True)[1::2]:
        t.run(stop_at_bytes=target)
        first = next(i for i, p in enumerate(pts) if p.peak_bytes <= target)
        assert t.points == pts[:first + 1]
        assert t.dropped == whole[0][:pts[first].n_dropped]
    t.run()
    assert t.finished
    assert (t.dropped, t.points) == whole


def test_a_trajectory_started_from_a_drop_set_goes_on_below_it():
    """``start``: the first point is that drop set's, every later one extends it and lowers
    the peak (the portfolio's lowest baseline, continued)."""
    g = GRAPHS["tiny_gpt-b2-t32-steady"]
    whole = greedy_trajectory(g, g.op_ids)
    start = whole[0][:whole[1][1].n_dropped]
    t = GreedyTrajectory(g, g.op_ids, start=start).run()
    e = t.evaluator.evaluate(start)
    assert t.points[0].n_dropped == len(start)
    assert (t.points[0].peak_bytes, t.points[0].extra_cost) == (e.peak_bytes, e.extra_cost)
    assert t.dropped[:len(start)] == list(start)
    assert len(t.points) > 1
    assert all(b.peak_bytes <= a.peak_bytes for a, b in zip(t.points, t.points[1:]))
    assert t.points[-1].peak_bytes < t.points[0].peak_bytes
    assert t.current.peak_bytes == t.points[-1].peak_bytes
    assert GreedyTrajectory(g, g.op_ids).points == whole[1][:1]  # no start: from nothing


def test_indexed_recompute_ops_raise_what_recompute_ops_for_raises():
    from roam_core.base.errors import GraphError

    g = GRAPHS["tiny_gpt-b2-t32-steady"]
    ev = JitEvaluator(g, g.op_ids)
    blocked = next(t.id for t in g.tensors.values() if t.producer is not None
                   and t.id not in ev.droppable and ev.blockers[t.producer] is not None
                   and t.id in late_read_index(g))
    resident = next(t.id for t in g.tensors.values() if t.producer is None)
    for bad in ([blocked], [*ev.droppable[:2], resident], ["no such storage"]):
        with pytest.raises(GraphError) as want:
            recompute_ops_for(g, bad)
        with pytest.raises(GraphError) as got:
            ev.recompute_ops(bad)
        assert str(got.value) == str(want.value)
