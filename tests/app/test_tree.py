"""The lazily mounted task tree: few components whatever the plan size, every node reachable."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from dash.development.base_component import Component

from app import analysis, ids, layout


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
    assert sum(1 for _ in analysis.iter_tree(tree)) == 242  # root + 241 sub-tasks
    root = layout.tree_children(tree, {})
    assert len(list(_walk(root))) <= 40
    nodes = _ids(root, ids.TREE_NODE)
    assert nodes == ["root", *[f"c{i}" for i in range(analysis.TREE_PAGE)]]
    more = _ids(root, ids.TREE_MORE)
    assert more == [*nodes[1:], "root"]  # each folded child, then the root's next page
    assert "+ 5 more sub-tasks" in str(root)


def test_expanding_reaches_any_node() -> None:
    """Press the "+ N more" buttons on the path only, as a user would, down to a deep node."""
    tree, shown = big_tree(), {}
    path = ["root", "c14", *[f"chain{i}" for i in range(15)], "deep"]
    clicks = 0
    for parent, child in itertools.pairwise(path):
        while child not in _ids(layout.tree_children(tree, shown), ids.TREE_NODE):
            assert parent in _ids(layout.tree_children(tree, shown), ids.TREE_MORE)
            shown = analysis.expand_node(tree, shown, parent)
            clicks += 1
    assert clicks == 1 + 2 + 15  # one more page of root, two of c14, one per chain node
    everything = {str(n["id"]): 99 for n, _ in analysis.iter_tree(tree)}
    n_all = len(list(_walk(layout.tree_children(tree, everything))))
    assert n_all > 500  # what the eager tree mounted
    assert len(list(_walk(layout.tree_children(tree, shown)))) < n_all // 3


def test_expand_node_pages_and_caps() -> None:
    tree = big_tree()
    s = analysis.expand_node(tree, {}, "root")
    assert s == {"root": 15}  # default page + one page, capped at 15 children
    assert analysis.expand_node(tree, s, "root") == s
    assert analysis.expand_node(tree, s, "c3") == {"root": 15, "c3": analysis.TREE_PAGE}
    assert analysis.expand_node(tree, s, "nope") == s
    assert analysis.expand_node(None, {}, "root") == {}
