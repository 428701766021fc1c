"""The task tree: a partition of the ops, a real tree, consistent tensor classes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roam_core.model.graph import Graph
from roam_core.model.reach import reachability
from roam_core.model.samples import diamond, tiny_train_step
from roam_core.ordering.decompose import TaskTree, decompose, units
from roam_core.ordering.rewrites import place_weight_updates
from tests.strategies import random_graphs


def check_tree(graph: Graph, order: list[str], tree: TaskTree) -> None:
    """Validity checker (networkx ``is_tree_decomposition`` style)."""
    subs = tree.subtasks
    assert tree.root in subs
    assert subs[tree.root].parent is None
    assert subs[tree.root].kind == "outer"
    # a tree: every child names its parent, every node is reached once from the root
    seen = [s.id for s in tree.walk()]
    assert sorted(seen) == sorted(subs)
    for s in subs.values():
        for c in s.children:
            assert subs[c].parent == s.id
        assert s.kind in ("outer", "ring", "tail", "segment")
    # every op in exactly one sub-task, listed in program order
    owners: dict[str, str] = {}
    index = {op: i for i, op in enumerate(graph.op_ids)}
    for s in subs.values():
        assert list(s.op_ids) == sorted(s.op_ids, key=index.__getitem__)
        for op in s.op_ids:
            assert op not in owners, f"{op} in {owners.get(op)} and {s.id}"
            owners[op] = s.id
    assert set(owners) == set(graph.op_ids)
    assert tree.task_of_op() == owners
    # classes recomputed from their definitions
    pos = {op: i for i, op in enumerate(order)}
    outs = set(graph.outputs)
    for s in subs.values():
        inside = set(s.op_ids)
        classes = {"cifi": s.created_inside_freed_inside,
                   "cifo": s.created_inside_freed_outside,
                   "cofi": s.created_outside_freed_inside, "boundary": s.boundary}
        flat = [t for ts in classes.values() for t in ts]
        assert len(flat) == len(set(flat))
        touched = {t for op in inside for t in graph.storages_created(op)}
        touched |= {t for op in inside for t in graph.storages_read(op)}
        assert set(flat) == {t for t in touched if graph.tensors[t].producer is not None}
        for name, ts in classes.items():
            for t in ts:
                tensor = graph.tensors[t]
                created = tensor.producer in inside
                if t in outs:
                    freed = False
                elif tensor.consumers:
                    freed = max(tensor.consumers, key=pos.__getitem__) in inside
                else:
                    freed = created
                want = {(True, True): "cifi", (True, False): "cifo", (False, True): "cofi",
                        (False, False): "boundary"}[(created, freed)]
                assert name == want, (s.id, t)


@pytest.mark.slow
@settings(max_examples=40)
@given(random_graphs(max_ops=16), st.integers(1, 6))
def test_tree_is_a_valid_partition(graph: Graph, nl: int) -> None:
    r = place_weight_updates(graph)
    tree = decompose(r.graph, r.order, node_limit=nl)
    check_tree(r.graph, list(r.order), tree)
    for s in tree.subtasks.values():
        if s.kind != "outer":
            assert len(s.op_ids) <= nl


def test_units_cut_before_key_points() -> None:
    g = diamond()
    assert units(["a", "b", "c", "d"], reachability(g)) == [(0, 3), (3, 4)]


def test_rings_nest_around_the_loss() -> None:
    g = tiny_train_step()
    r = place_weight_updates(g)
    tree = decompose(r.graph, r.order, node_limit=4)
    check_tree(r.graph, list(r.order), tree)
    loss_task = tree.task_of_op()["loss"]
    assert tree.subtasks[loss_task].kind in ("ring", "segment")
    summary = tree.to_summary(r.order)
    assert summary["id"] == "root"
    assert sum(_count(summary)) == len(g.ops)


def _count(node: dict) -> list[int]:
    out = [node["num_ops"]]
    for c in node["children"]:
        out += _count(c)
    return out


SUMMARY_KEYS = {"id", "kind", "num_ops", "steps", "peak_before_bytes", "peak_after_bytes",
                "status", "objective_bytes", "best_bound_bytes", "gap", "wall_time_s",
                "num_cifi", "num_cifo", "num_cofi", "children"}


@settings(max_examples=20)
@given(random_graphs(max_ops=16), st.integers(1, 5))
def test_summary_schema_and_steps(graph: Graph, nl: int) -> None:
    r = place_weight_updates(graph)
    tree = decompose(r.graph, r.order, node_limit=nl)
    order = list(r.order)
    summary = tree.to_summary(order)
    pos = {op: i for i, op in enumerate(order)}
    stack = [summary]
    while stack:
        node = stack.pop()
        assert set(node) == SUMMARY_KEYS
        st_ = tree.subtasks[node["id"]]
        covered = sorted(s for a, b in node["steps"] for s in range(a, b))
        assert covered == sorted(pos[o] for o in st_.op_ids)
        if st_.op_ids:
            assert node["peak_before_bytes"] == node["peak_after_bytes"]  # same order
        stack.extend(node["children"])
