"""Module paths for people: labels, natural order, and what a module holds.

A module path is the tracer's ``Op.module`` (``h.0.attn.c_attn``); ``""`` is the top level,
shown as :data:`TOP_LEVEL`.  A storage belongs to the module that
:func:`roam_core.oracle.attribution.tensor_module` names (a parameter's module, an
activation's producing module).
"""

from __future__ import annotations

from roam_core.model.graph import Graph, OpId, Tensor, TensorId
from roam_core.oracle.attribution import in_module, tensor_module

__all__ = [
    "TOP_LEVEL",
    "has_modules",
    "module_depth",
    "module_label",
    "module_members",
    "module_path",
    "natural_key",
    "tensor_module_label",
]

TOP_LEVEL = "(top level)"


def natural_key(path: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key ordering ``h.2`` before ``h.10`` (numeric path parts as numbers).

    >>> sorted(["h.10", "h.2", "h.1.attn", "wte"], key=natural_key)
    ['h.1.attn', 'h.2', 'h.10', 'wte']
    """
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in path.split("."))


def module_label(path: str) -> str:
    """A module path for people: ``""`` is ``"(top level)"``."""
    return path or TOP_LEVEL


def module_path(label: str) -> str:
    """The inverse of :func:`module_label`."""
    return "" if label == TOP_LEVEL else label


def tensor_module_label(graph: Graph, t: Tensor) -> str:
    """A storage's module for people (``"(top level)"`` for ``""``)."""
    return tensor_module(graph, t) or TOP_LEVEL


def has_modules(graph: Graph) -> bool:
    """True when the tracer recorded module paths (``Op.module``) in this graph."""
    return any(o.module for o in graph.ops)


def module_depth(graph: Graph) -> int:
    """The deepest module path of ``graph`` (0 when it records no modules)."""
    return max((op.module.count(".") + 1 for op in graph.ops if op.module), default=0)


def module_members(graph: Graph, path: str) -> tuple[set[OpId], set[TensorId]]:
    """``(op ids, storage ids)`` of module ``path`` and its submodules.

    ``""`` (the top level) means exactly the ops and storages outside every module.
    """
    ops = {op.id for op in graph.ops if in_module(op.module, path)}
    tensors = {tid for tid, t in graph.tensors.items() if in_module(tensor_module(graph, t), path)}
    return ops, tensors
