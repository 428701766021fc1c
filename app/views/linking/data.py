"""The step window every view shows: from a zoom (``relayoutData``), or around an op, a
tensor's lifetime, a module's ops or a task-tree node (with a margin)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from app.core import state
from app.services.plan_data import after_data, before_data
from app.services.selection import members
from app.views.tree.data import tree_of
from app.views.tree.model import find_node, subtree_range

__all__ = ["MIN_RANGE_STEPS", "range_from_relayout", "range_of"]

#: A selected range shorter than this many steps is widened (so one op stays visible).
MIN_RANGE_STEPS = 8


def range_from_relayout(data: Mapping[str, Any] | None
                        ) -> list[float] | Literal["keep"] | None:
    """A step range from ``relayoutData``: ``[x0, x1]``, ``None`` (reset) or ``"keep"``.

    ``Any``: plotly's relayout event is a flat JSON object (``"xaxis.range[0]"``: a number,
    ``"xaxis.autorange"``: a bool, ``"dragmode"``: a string...).
    """
    if not data:
        return "keep"
    if data.get("xaxis.autorange"):
        return None
    if "xaxis.range[0]" in data and "xaxis.range[1]" in data:
        return [float(data["xaxis.range[0]"]), float(data["xaxis.range[1]"])]
    if isinstance(data.get("xaxis.range"), list):
        return [float(x) for x in data["xaxis.range"][:2]]
    return "keep"


def range_of(graph_key: str, plan_key: str | None, base: str, kind: str, ident: str
             ) -> list[float] | None:
    """Step window showing an op, a tensor's lifetime or a task-tree node (with a margin)."""
    n_steps = len(after_data(graph_key, plan_key).plan.order if plan_key
                  else before_data(graph_key, base).order)
    if kind == "node":
        node = find_node(tree_of(plan_key), ident)
        span = subtree_range(node) if node else None
        return None if span is None else _window(span, n_steps, margin=0.0)
    else:
        graph = state.get_graph(graph_key)
        view = after_data(graph_key, plan_key).view if plan_key else before_data(
            graph_key, base).view
        if kind in ("op", "module"):
            op_pos: dict[str, int] = {o: i for i, o in enumerate(
                after_data(graph_key, plan_key).plan.order if plan_key
                else before_data(graph_key, base).order)}
            if kind == "module":
                at = [op_pos[o] for o in members(graph_key, ident)[0] if o in op_pos]
                span = (min(at), max(at) + 1) if at else None
            else:
                span = (op_pos[ident], op_pos[ident] + 1) if ident in op_pos else None
        else:
            idx = np.nonzero(view.ids == ident)[0]
            span = (int(view.start[idx[0]]), int(view.end[idx[0]])) if len(idx) else None
            if span is None and ident in graph.tensors:
                span = (0, view.n_steps)
    return None if span is None else _window(span, n_steps)


def _window(span: tuple[int, int], n_steps: int, margin: float = 0.05) -> list[float]:
    """Axis range showing steps ``[lo, hi)`` (at least ``MIN_RANGE_STEPS`` wide, ``margin``
    of its width on each side), never outside the step axis ``[0, n_steps]`` (step s spans
    ``[s, s + 1)``).

    >>> _window((0, 8000), 8000)
    [0.0, 8000.0]
    >>> _window((10, 12), 100, margin=0.0)
    [7.0, 15.0]
    """
    lo, hi = span
    pad = max(MIN_RANGE_STEPS - (hi - lo), 0) / 2 + margin * (hi - lo)
    a, b = lo - pad, hi + pad
    top = max(n_steps, 1)
    if b > top:
        a, b = a - (b - top), top
    if a < 0:
        a, b = 0, min(b - a, top)
    return [float(a), float(b)]
