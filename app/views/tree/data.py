"""The task tree of a stored plan."""

from __future__ import annotations

from app.core import state
from app.views.tree.model import TreeNode

__all__ = ["tree_of"]


def tree_of(plan_key: str | None) -> TreeNode | None:
    """The plan's task-tree summary (``None`` for baselines or no plan)."""
    return state.get_plan(plan_key).task_tree if plan_key else None
