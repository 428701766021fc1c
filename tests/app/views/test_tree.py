"""The lazily mounted task tree: few components whatever the plan size, every node reachable."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.views.summary import view as summary_view
from app.views.summary.model import Summary
from app.views.tree import figure as tree_figure
from app.views.tree import model as tree_model
from app.views.tree import view as tree_view
from tests.app.helpers import (
    planned_with_tree,
    run,
)


def _node(nid: str, kids: list[dict]) -> dict:
    return {"id": nid, "kind": "split" if kids else "leaf", "num_ops": 3, "steps": [[0, 3]],
            "peak_before_bytes": 4096, "peak_after_bytes": 2048, "status": "optimal",
            "gap": 0.0, "children": kids}


def big_tree() -> dict:
    """241 sub-tasks under the root: 15 children, 15 x 14 grandchildren, a 16-node chain."""
    chain = _node("deep", [])
    for i in range(14, -1, -1):  # root/c14/g14/... -> a node 16 levels down
        chain = _node(f"chain{i}", [chain])
    kids = [_node(f"c{i}", [_node(f"c{i}g{j}", []) for j in range(14)]) for i in range(14)]
    tree = _node("root", [*kids, _node("c14", [*[_node(f"c14g{j}", []) for j in range(14)],
                                               chain])])
    return tree


def _walk(c: Any) -> Iterator[Component]:
    if isinstance(c, Component):
        yield c
        c = getattr(c, "children", None)
    if isinstance(c, list | tuple):
        for x in c:
            yield from _walk(x)
    elif isinstance(c, Component):
        yield from _walk(c)


def _ids(root: Any, type_: str) -> list[str]:
    return [c.id["index"] for c in _walk(root)
            if isinstance(getattr(c, "id", None), dict) and c.id["type"] == type_]


def test_big_tree_mounts_few_components() -> None:
    tree = big_tree()
    assert sum(1 for _ in tree_model.iter_tree(tree)) == 242  # root + 241 sub-tasks
    root = tree_view.tree_children(tree, {})
    assert len(list(_walk(root))) <= 40
    nodes = _ids(root, ids.TREE_NODE)
    assert nodes == ["root", *[f"c{i}" for i in range(tree_model.TREE_PAGE)]]
    more = _ids(root, ids.TREE_MORE)
    assert more == [*nodes[1:], "root"]  # each folded child, then the root's next page
    assert "+ 5 more sub-tasks" in str(root)


def test_expanding_reaches_any_node() -> None:
    """Press the "+ N more" buttons on the path only, as a user would, down to a deep node."""
    tree, shown = big_tree(), {}
    path = ["root", "c14", *[f"chain{i}" for i in range(15)], "deep"]
    clicks = 0
    for parent, child in itertools.pairwise(path):
        while child not in _ids(tree_view.tree_children(tree, shown), ids.TREE_NODE):
            assert parent in _ids(tree_view.tree_children(tree, shown), ids.TREE_MORE)
            shown = tree_model.expand_node(tree, shown, parent)
            clicks += 1
    assert clicks == 1 + 2 + 15  # one more page of root, two of c14, one per chain node
    everything = {str(n["id"]): 99 for n, _ in tree_model.iter_tree(tree)}
    n_all = len(list(_walk(tree_view.tree_children(tree, everything))))
    assert n_all > 500  # what the eager tree mounted
    assert len(list(_walk(tree_view.tree_children(tree, shown)))) < n_all // 3


def test_expand_node_pages_and_caps() -> None:
    tree = big_tree()
    s = tree_model.expand_node(tree, {}, "root")
    assert s == {"root": 15}  # default page + one page, capped at 15 children
    assert tree_model.expand_node(tree, s, "root") == s
    assert tree_model.expand_node(tree, s, "c3") == {"root": 15, "c3": tree_model.TREE_PAGE}
    assert tree_model.expand_node(tree, s, "nope") == s
    assert tree_model.expand_node(None, {}, "root") == {}


def test_icicle_values_cover_the_subtree_so_it_is_not_blank() -> None:
    """branchvalues="total" draws nothing when a parent is smaller than its children."""

    tree = big_tree()
    fig = tree_figure.task_tree_figure(tree)
    ice = fig.data[0]
    assert ice.type == "icicle"
    assert ice.branchvalues == "total"
    value = dict(zip(ice.ids, ice.values))
    parent = dict(zip(ice.ids, ice.parents))
    kids: dict[str, list[str]] = {}
    for i, p in parent.items():
        kids.setdefault(p, []).append(i)
    for nid, v in value.items():  # every parent holds at least its children's sum
        assert v >= sum(value[c] for c in kids.get(nid, ())), nid
        assert v > 0
    assert value["root"] == 3 * 242  # every node has 3 own ops
    assert value["deep"] == 3
    text = dict(zip(ice.ids, ice.text))
    assert text["root"].endswith("▼")  # 4 KiB -> 2 KiB in big_tree
    assert "green ▼" in fig.layout.title.text
    assert fig.layout.uniformtext.minsize >= 10  # readable, or hidden (hover names it)
    flat = tree_figure.task_tree_figure({"id": "root", "num_ops": 3, "peak_before_bytes": 8,
                                         "peak_after_bytes": 8})
    assert "green" not in flat.layout.title.text  # nothing is green: no green legend


def test_node_roles_in_words() -> None:
    tree = {"id": "root", "kind": "outer", "steps": [[0, 2]], "children": [
        {"id": "t1", "kind": "ring", "steps": [[2, 10]], "children": [
            {"id": "t3", "kind": "segment", "steps": [[4, 6]]}]},
        {"id": "t2", "kind": "tail", "steps": [[10, 14]]},
        {"id": "t4", "kind": "tail", "steps": [[0, 1]]}]}
    roles = {n["id"]: tree_model.node_role(n, tree) for n, _ in tree_model.iter_tree(tree)}
    assert roles["t1"] == "forward/backward ring around the loss"
    assert roles["t2"].startswith("optimizer tail")
    assert roles["t4"].startswith("forward head")
    assert roles["t3"].startswith("a window of a long chain")
    assert tree_model.subtree_range(tree["children"][0]) == (2, 10)
    assert tree_model.subtree_range(tree) == (0, 14)


def test_tree_nodes_say_what_they_are_and_where_the_peak_fell() -> None:
    tree = {"id": "root", "kind": "outer", "num_ops": 2, "steps": [[0, 2]],
            "peak_before_bytes": 4096, "peak_after_bytes": 4096, "status": "optimal",
            "children": [{"id": "t1", "kind": "ring", "num_ops": 8, "steps": [[2, 10]],
                          "peak_before_bytes": 8192, "peak_after_bytes": 4096,
                          "status": "optimal", "children": []}]}
    root = tree_view.tree_children(tree, {})
    btn = {c.id["index"]: c for c in _walk(root)
           if isinstance(getattr(c, "id", None), dict) and c.id["type"] == ids.TREE_NODE}
    assert "forward/backward ring around the loss ▼ peak fell" in btn["t1"].children
    assert "fell" in btn["t1"].className
    assert "peak fell" not in btn["root"].children
    assert "How to read this" in str(summary_view.summary_children(
        Summary("h", "s", (("graph", "g"),))))
    assert "n/a" not in btn["root"].children
    assert btn["root"].children.startswith("root: 10 ops in 1 sub-task (2 of its own)")


def test_on_tree_more(planned: dict[str, Any]) -> None:
    pk, more = planned["plan"], {"index": "root", "type": ids.TREE_MORE}
    assert run(tree_view.on_tree_more, more, 1, [1], pk, {"x": 3}) == {"x": 3, "root": 2}
    assert run(tree_view.on_tree_more, ids.PLAN_KEY, pk, [], pk, {"root": 2}) == {}
    with pytest.raises(PreventUpdate):
        run(tree_view.on_tree_more, more, None, [None], pk, {})  # re-rendered: no click


def test_tree_helpers() -> None:
    _, plan = planned_with_tree()
    nodes = [n["id"] for n, _ in tree_model.iter_tree(plan.task_tree)]
    assert nodes == ["root", "t0", "t1"]
    t1 = tree_model.find_node(plan.task_tree, "t1")
    assert tree_model.node_range(t1) == (4, 8)
    assert tree_model.find_node(plan.task_tree, "nope") is None


def test_task_tree_icicle() -> None:
    _, plan = planned_with_tree()
    fig = tree_figure.task_tree_figure(plan.task_tree)
    assert list(fig.data[0].ids) == ["root", "t0", "t1"]
    assert list(fig.data[0].parents) == ["", "root", "root"]
    assert tree_figure.task_tree_figure(None).layout.annotations[0].text.startswith("no task")
