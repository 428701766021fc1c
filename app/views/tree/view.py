"""The Task division card: the planner's tree of sub-tasks, mounted a page at a time.

A click on a node zooms every view to its steps (:mod:`app.views.linking`); "+ N more
sub-tasks" mounts one more page of a node's children (the ``TREE_OPEN`` store).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dash
from dash import ALL, Input, Output, State, html
from dash.development.base_component import Component
from dash.exceptions import PreventUpdate

from app.core import ids
from app.core.config import AppConfig
from app.core.formatting import fmt_bytes
from app.views.callback_tools import triggered_value
from app.views.components import card, how_to_read
from app.views.lazy import store
from app.views.spec import PageDefaults, View
from app.views.tree.data import tree_of
from app.views.tree.model import (
    TreeNode,
    expand_node,
    node_label,
    node_role,
    ring_span,
    shown_children,
)

__all__ = ["HOW_TO_READ", "VIEW", "on_tree_more", "render_tree", "tree_children"]

HOW_TO_READ = ("roam splits the step into sub-tasks small enough to solve exactly and orders "
               "each one. Green '▼ peak fell' marks sub-tasks whose own peak fell: that is "
               "where the saving came from. Click a node to zoom every view to its steps.")


def _tree_node(node: TreeNode, depth: int,
               shown: Mapping[str, int], rings: tuple[int, int] | None = None
               ) -> html.Details | html.Div:
    nid = str(node.get("id"))
    fell = _peak_fell(node)
    label = node_label(node, fmt_bytes)
    role = node_role(node, rings=rings) if rings is not None else node_role(node)
    # one string, not spans: the lazy tree stays a few components per node
    btn = html.Button(f"{label} — {role}" + (" ▼ peak fell" if fell else ""),
                      id={"type": ids.TREE_NODE, "index": nid},
                      className="node" + (" fell" if fell else ""),
                      title=f"{role}. Click: zoom every view to this sub-task's steps"
                            + (" (its peak fell: part of the saving)" if fell else ""))
    kids = node.get("children") or ()
    n_shown = shown_children(node, depth, shown)
    hidden = len(kids) - n_shown
    more = [html.Button(f"+ {hidden} more sub-task{'s' if hidden != 1 else ''}",
                        id={"type": ids.TREE_MORE, "index": nid}, className="more",
                        title="show more of this sub-task's children")
            ] if n_shown < len(kids) else []
    if not n_shown:
        return html.Div([btn, *more], className="leaf")
    return html.Details([html.Summary(btn),
                         *[_tree_node(c, depth + 1, shown, rings) for c in kids[:n_shown]],
                         *more],
                        open=True)


def tree_children(tree: TreeNode | None, shown: Mapping[str, int] | None = None
                  ) -> Component:
    """The collapsible task tree, mounted lazily (or a note when the plan has none).

    Only the children counted by :func:`~app.views.tree.model.shown_children` are mounted; the rest
    of each node is one "+ N more sub-tasks" button (``{"type": TREE_MORE, "index": id}``),
    so a plan with hundreds of sub-tasks still mounts a few dozen components.
    """
    if not tree:
        return html.Div("No task tree: this plan comes from a baseline method (or is not "
                        "planned yet).", className="muted")
    return _tree_node(tree, 0, shown or {}, ring_span(tree))


def _peak_fell(node: TreeNode) -> bool:
    before, after = node.get("peak_before_bytes"), node.get("peak_after_bytes")
    return before is not None and after is not None and after < before


def render_tree(plan: str | None, shown: Mapping[str, int] | None) -> Component:
    """View 2: the task tree, with the user's expansions mounted."""
    return tree_children(tree_of(plan), shown)


def on_tree_more(clicks: Sequence[int | None], plan: str | None,
                 shown: Mapping[str, int] | None) -> dict[str, int]:
    """"+ N more sub-tasks": mount one more page of that node (a new plan folds all)."""
    trig = dash.ctx.triggered_id
    if trig == ids.PLAN_KEY:
        return {}
    if not isinstance(trig, dict) or not triggered_value():
        raise PreventUpdate  # a re-rendered tree mounts unclicked buttons
    return expand_node(tree_of(plan), shown or {}, trig["index"])


def register(app: dash.Dash, config: AppConfig) -> None:
    """The tree's callbacks."""
    app.callback(Output(ids.TREE_OPEN, "data"),
                 Input({"type": ids.TREE_MORE, "index": ALL}, "n_clicks"),
                 Input(ids.PLAN_KEY, "data"), State(ids.TREE_OPEN, "data"),
                 prevent_initial_call=True)(on_tree_more)
    app.callback(Output(ids.TREE, "children"), Input(ids.PLAN_KEY, "data"),
                 Input(ids.TREE_OPEN, "data"))(render_tree)


def _components(_: PageDefaults) -> list[Component]:
    return [card("Task division", how_to_read("tree", HOW_TO_READ),
                 html.Div(id=ids.TREE, className="tree"))]


VIEW = View("tree", "main", _components, register, stores=lambda: [store(ids.TREE_OPEN, {})],
            row="tree-explain")
