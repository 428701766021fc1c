"""The task tree as an icicle (the HTML report and the tree PNG draw it)."""

from __future__ import annotations

import plotly.graph_objects as go

from app.core.formatting import fmt_bytes
from app.figures.style import BASE_LAYOUT, empty_figure
from app.views.tree.model import TreeNode, iter_tree, node_role, ring_span

__all__ = ["task_tree_figure"]


def task_tree_figure(tree: TreeNode | None) -> go.Figure:
    """The planner's task division as an icicle; for the report and the tree PNG.

    A node's size is the op count of its whole sub-tree (its own ops plus its children's):
    with ``branchvalues="total"`` a parent smaller than its children's sum draws nothing.
    """
    nodes = list(iter_tree(tree))
    if tree is None or not nodes:
        return empty_figure("no task tree (baseline plan)")
    ids: list[str] = []
    parents: list[str] = []
    values: list[int] = []
    text: list[str] = []
    colors: list[str] = []
    rings = ring_span(tree)

    def walk(node: TreeNode, parent: str) -> int:
        nid = str(node.get("id"))
        at = len(ids)
        ids.append(nid)
        parents.append(parent)
        values.append(0)
        own = int(node.get("num_ops", 0) or 0)
        before, after = node.get("peak_before_bytes"), node.get("peak_after_bytes")
        fell = before is not None and after is not None and after < before
        text.append(f"{node_role(node, rings=rings)} · {own} own ops · {fmt_bytes(before)} → "
                    f"{fmt_bytes(after)}" + (" (peak fell)" if fell else "")
                    + f" · {node.get('status', '')}")
        colors.append("#55a868" if fell else "#c8ccd2")
        values[at] = own + sum(walk(c, nid) for c in node.get("children") or ())
        return values[at]

    walk(tree, "")
    fig = go.Figure(go.Icicle(ids=ids, labels=ids, parents=parents, values=values,
                              text=text, branchvalues="total", marker={"colors": colors},
                              hovertemplate="%{label}: %{value} ops in its sub-tree<br>"
                                            "%{text}<extra></extra>"),
                    layout=BASE_LAYOUT)
    fig.update_layout(height=360, margin={"l": 10, "r": 10, "t": 30, "b": 10},
                      title={"text": "green: sub-tasks whose peak fell", "font": {"size": 12},
                             "x": 0.01})
    return fig

