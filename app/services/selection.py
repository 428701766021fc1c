"""What the ``SELECTION`` store names, in each view's terms: an op to ring, a tensor to
outline, a module whose ops and storages every view marks."""

from __future__ import annotations

from typing import cast

from app.analysis.modules import module_members
from app.core import state
from app.core.memo import memoised
from app.core.store_types import Selection
from roam_core.model.graph import Graph, OpId, TensorId

__all__ = ["SelectionKey", "members", "selected_module", "selected_op", "selected_tensor",
           "selection_key", "selection_of"]

#: A selection as a memo key (sorted items).
SelectionKey = tuple[tuple[str, str], ...]


def selected_op(graph: Graph, sel: Selection | None) -> str | None:
    """The op to ring on the timeline: the selected op, or the selected tensor's producer."""
    if not sel:
        return None
    if sel.get("kind") == "op":
        return sel["id"]
    t = graph.tensors.get(TensorId(sel["id"]))
    return t.producer if t is not None else None


def selected_tensor(sel: Selection | None) -> str | None:
    """The tensor to outline in the layouts."""
    return sel["id"] if sel and sel.get("kind") == "tensor" else None


def selected_module(sel: Selection | None) -> str | None:
    """The selected module's path (``""``: the top level), ``None`` if no module is."""
    return sel.get("id") if sel and sel.get("kind") == "module" else None


@memoised(8)
def members(graph_key: str, path: str) -> tuple[frozenset[OpId], frozenset[TensorId]]:
    """``(op ids, storage ids)`` of module ``path`` of a stored graph (memoised)."""
    ops, tensors = module_members(state.get_graph(graph_key), path)
    return frozenset(ops), frozenset(tensors)


def selection_key(sel: Selection | None) -> SelectionKey | None:
    """A selection as a memo key (``None``: nothing selected).

    >>> selection_key({"kind": "op", "id": "mm"})
    (('id', 'mm'), ('kind', 'op'))
    """
    return cast("SelectionKey", tuple(sorted(sel.items()))) if sel else None


def selection_of(key: SelectionKey | None) -> Selection | None:
    """The selection back from :func:`selection_key`."""
    return cast(Selection, dict(key)) if key else None
