"""The planner's task tree (``Plan.task_tree``, a JSON summary): walking it, paging its
children, what each node is in words and which steps it covers."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["NODE_ROLES", "NODE_STATUS", "TREE_PAGE", "TreeNode", "expand_node", "find_node",
           "iter_tree", "node_label", "node_range", "node_role", "ring_span", "shown_children",
           "subtree_ops", "subtree_range"]

#: A task-tree node as the planner summarises it (JSON: ``id``, ``kind``, ``steps``,
#: ``children``, peaks before and after, solver status...).
TreeNode = Mapping[str, Any]


# ------------------------------------------------------------------ task tree
def iter_tree(node: TreeNode | None, depth: int = 0
              ) -> Iterator[tuple[TreeNode, int]]:
    """Depth-first ``(node, depth)`` over a task-tree summary."""
    if not node:
        return
    yield node, depth
    for c in node.get("children") or ():
        yield from iter_tree(c, depth + 1)


def find_node(tree: TreeNode | None, node_id: str) -> TreeNode | None:
    """The task-tree node with id ``node_id``."""
    return next((n for n, _ in iter_tree(tree) if str(n.get("id")) == node_id), None)


#: Children the lazy tree view mounts per page ("+ N more sub-tasks" adds one page); the root
#: starts with one page open, every other node folded.
TREE_PAGE = 10


def shown_children(node: TreeNode, depth: int, shown: Mapping[str, int]) -> int:
    """How many children of ``node`` the lazy tree view mounts.

    ``shown`` maps node id -> children mounted (the user's expansions); a node absent from it
    shows one page at the root and none deeper.

    >>> node = {"id": "r", "children": [{"id": "a"}, {"id": "b"}]}
    >>> shown_children(node, 0, {}), shown_children(node, 1, {}), shown_children(node, 1, {"r": 9})
    (2, 0, 2)
    """
    n_kids = len(node.get("children") or ())
    return min(n_kids, int(shown.get(str(node.get("id")), TREE_PAGE if depth == 0 else 0)))


def expand_node(tree: TreeNode | None, shown: Mapping[str, int], node_id: str,
                page: int = TREE_PAGE) -> dict[str, int]:
    """``shown`` with one more page of ``node_id``'s children mounted (unchanged if absent).

    >>> tree = {"id": "r", "children": [{"id": "a", "children": [{"id": "b"}]}]}
    >>> expand_node(tree, {}, "a")
    {'a': 1}
    """
    for node, depth in iter_tree(tree):
        if str(node.get("id")) == node_id:
            n_kids = len(node.get("children") or ())
            return {**shown, node_id: min(n_kids, shown_children(node, depth, shown) + page)}
    return dict(shown)


#: What each kind of task-tree node is, in words (ROAM's decomposition).
NODE_ROLES: dict[str, str] = {
    "outer": "the whole step: what is left outside the rings and tails",
    "ring": "forward/backward ring around the loss",
    "tail": "optimizer tail (or the ops before the first ring)",
    "segment": "a window of a long chain of ops (cut to the node limit)",
}


def ring_span(tree: TreeNode | None) -> tuple[int, int] | None:
    """Steps covered by the rings around the loss: the root's ring children hold every inner
    ring, so only their sub-trees are walked (once per tree, not once per node)."""
    spans = [r for c in (tree or {}).get("children") or () if c.get("kind") == "ring"
             and (r := subtree_range(c)) is not None]
    return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None


def node_role(node: TreeNode, tree: TreeNode | None = None,
              rings: tuple[int, int] | None = None) -> str:
    """A task-tree node in words (with ``tree``, or its :func:`ring_span` ``rings``, a tail
    says which side of the rings it is).

    >>> node_role({"kind": "ring"})
    'forward/backward ring around the loss'
    >>> tree = {"id": "root", "kind": "outer", "children": [
    ...     {"id": "t1", "kind": "ring", "steps": [[10, 20]]},
    ...     {"id": "t2", "kind": "tail", "steps": [[25, 30]]}]}
    >>> node_role(tree["children"][1], tree)
    'optimizer tail: the ops after the backward ring'
    """
    kind = str(node.get("kind", ""))
    if kind == "tail" and (tree is not None or rings is not None):
        rings = rings if rings is not None else ring_span(tree)
        mine = subtree_range(node)
        if rings is not None and mine is not None:
            if mine[0] >= rings[1]:
                return "optimizer tail: the ops after the backward ring"
            if mine[1] <= rings[0]:
                return "forward head: the ops before the ring around the loss"
    return NODE_ROLES.get(kind, kind or "sub-task")


def subtree_range(node: TreeNode) -> tuple[int, int] | None:
    """The step range ``[min start, max end)`` of a node's own ops and all its children's."""
    spans = [r for n, _ in iter_tree(node) if (r := node_range(n)) is not None]
    if not spans:
        return None
    return min(a for a, _ in spans), max(b for _, b in spans)


def node_range(node: TreeNode) -> tuple[int, int] | None:
    """The step range ``[min start, max end)`` covered by a task-tree node."""
    steps = [s for s in node.get("steps") or () if len(s) == 2]
    if not steps:
        return None
    return int(min(s[0] for s in steps)), int(max(s[1] for s in steps))



#: How a sub-task's ordering ended (``SolveStatus``), in words.
NODE_STATUS: dict[str, str] = {
    "optimal": "ordered optimally", "feasible": "improved, not proven optimal",
    "bound": "already at the lower bound", "hint": "no better order than its start",
    "trivial": "nothing to reorder", "cancelled": "cut short by Cancel",
    "unknown": "not solved in time", "timeout": "not solved in time",
    "heuristic": "heuristic",
}


def subtree_ops(node: TreeNode) -> int:
    """Ops of a node and all its sub-tasks."""
    return sum(int(n.get("num_ops", 0) or 0) for n, _ in iter_tree(node))


def node_label(node: TreeNode, fmt: Callable[[int | None], str]) -> str:
    """A task-tree node in one readable line (what is unknown is left out, not "n/a").

    ``fmt`` formats bytes.

    >>> node_label({"id": "root", "num_ops": 0, "status": "none", "children": [
    ...     {"id": "t1", "num_ops": 8, "peak_before_bytes": 8, "peak_after_bytes": 4,
    ...      "status": "optimal"}]}, lambda b: f"{b} B")
    'root: 8 ops in 1 sub-task (none of its own)'
    >>> node_label({"id": "t1", "num_ops": 8, "peak_before_bytes": 8, "peak_after_bytes": 4,
    ...             "status": "optimal"}, lambda b: f"{b} B")
    't1: 8 ops · peak 8 B → 4 B · ordered optimally'
    """
    own = int(node.get("num_ops", 0) or 0)
    kids = node.get("children") or ()
    parts = [f"{node.get('id')}: " + (
        f"{subtree_ops(node):,} ops in {len(kids)} sub-task{'s' * (len(kids) != 1)}"
        + (f" ({own:,} of its own)" if own else " (none of its own)") if kids
        else f"{own:,} ops")]
    before, after = node.get("peak_before_bytes"), node.get("peak_after_bytes")
    if before is not None and after is not None:
        parts.append(f"peak {fmt(before)} → {fmt(after)}")
    status = NODE_STATUS.get(str(node.get("status", "")))
    if status:
        parts.append(status)
    gap = node.get("gap")
    if gap is not None and float(gap) > 0:
        parts.append(f"within {100 * float(gap):.1f} % of its bound")
    return " · ".join(parts)
