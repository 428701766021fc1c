"""Bytes by dtype, and what mixed precision changes by module: weight copies, fp32 islands.

Under autocast (``bf16-mixed``, ``fp16-mixed``) the step keeps fp32 master weights and adds
reduced-precision *copies* of them, made by ``aten._to_copy`` in the forward and saved for
the backward (a matmul's backward needs its bf16 weight).  Around the bf16 matmuls it keeps
*fp32 islands*: layer-norm and softmax outputs and statistics, the residual stream, the loss,
in float32 beside their bf16 casts.  That is why an autocast step can hold more activation
bytes than the same step in fp32.

:func:`bytes_by_dtype` splits every storage's rounded bytes by kind and dtype;
:func:`precision_by_module` splits the activations (storages saved for the backward) of
each module group into weight copies, fp32 islands and reduced-precision activations, with
the same model's fp32 activations beside them when an fp32 graph is given.  Module groups
name repeated blocks once: ``model.layers.*.mlp`` sums every layer's MLP.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from roam_core.model.graph import (
    DEFAULT_ALIGNMENT_BYTES,
    Graph,
    Tensor,
    TensorId,
    TensorKind,
    round_size,
)
from roam_core.oracle.attribution import tensor_modules

__all__ = ["ModulePrecision", "bytes_by_dtype", "module_group", "precision_by_module",
           "weight_copies"]

#: The op that casts (``tensor.to(dtype)``; autocast's weight and input casts).
CAST = "aten._to_copy.default"
_REDUCED = ("bfloat16", "float16")
_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")


def bytes_by_dtype(graph: Graph, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES
                   ) -> dict[str, dict[str, int]]:
    """``{kind: {dtype: rounded bytes}}`` over every storage (0-byte scalars left out).

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> bytes_by_dtype(tiny_train_step())["activation"]
    {'float32': 1024}
    """
    out: dict[str, dict[str, int]] = {}
    for t in graph.tensors.values():
        if t.size_bytes <= 0:
            continue
        row = out.setdefault(t.kind.value, {})
        row[t.dtype] = row.get(t.dtype, 0) + round_size(t.size_bytes, alignment_bytes)
    return out


def weight_copies(graph: Graph) -> set[TensorId]:
    """Storages that are casts of a parameter (``aten._to_copy`` reading a parameter)."""
    params = {tid for tid, t in graph.tensors.items() if t.kind is TensorKind.PARAMETER}
    found: set[TensorId] = set()
    for op in graph.ops:
        if op.target != CAST or not op.inputs:
            continue
        if graph.storage_of(op.inputs[0]) in params:
            found.update(graph.storage_of(v) for v in op.outputs
                         if graph.storage_of(v) == v)
    return found


def module_group(path: str) -> str:
    """A module path with its block indices replaced by ``*`` (``h.3.mlp`` -> ``h.*.mlp``).

    Examples
    --------
    >>> module_group("model.layers.12.self_attn.q_proj"), module_group("lm_head")
    ('model.layers.*.self_attn.q_proj', 'lm_head')
    """
    return _INDEX.sub("*", path)


@dataclass(frozen=True, slots=True)
class ModulePrecision:
    """The activation bytes (saved for the backward) of one module group.

    Parameters
    ----------
    module : str
        The group (:func:`module_group` of the module paths; ``""`` the top level).
    activation_bytes : int
        Every activation of the group, rounded.
    weight_copy_bytes : int
        Of which reduced-precision copies of parameters.
    fp32_island_bytes : int
        Of which float32 activations of a mixed-precision step (kept in fp32 by autocast).
    reduced_bytes : int
        Of which other bf16/fp16 activations.
    fp32_reference_bytes : int or None
        The group's activations in the same model's fp32 graph (``None``: none given).
    """

    module: str
    activation_bytes: int
    weight_copy_bytes: int
    fp32_island_bytes: int
    reduced_bytes: int
    fp32_reference_bytes: int | None = None

    @property
    def difference_bytes(self) -> int | None:
        """Activation bytes minus the fp32 graph's (``None`` without a reference)."""
        if self.fp32_reference_bytes is None:
            return None
        return self.activation_bytes - self.fp32_reference_bytes


def _activations_by_group(graph: Graph, alignment_bytes: int
                          ) -> dict[str, list[tuple[Tensor, int]]]:
    modules = tensor_modules(graph)
    out: dict[str, list[tuple[Tensor, int]]] = {}
    for tid, t in graph.tensors.items():
        if t.kind is TensorKind.ACTIVATION and t.size_bytes > 0:
            out.setdefault(module_group(modules[tid]), []).append(
                (t, round_size(t.size_bytes, alignment_bytes)))
    return out


def precision_by_module(graph: Graph, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
                        reference: Graph | None = None) -> list[ModulePrecision]:
    """Activation bytes by module group, split as in :class:`ModulePrecision`, largest
    group first.

    ``reference`` is the same step traced in ``fp32``; groups only it has are listed too.
    A graph without autocast has no fp32 islands (its float32 activations are simply the
    step's).
    """
    mixed = any(t.dtype in _REDUCED for t in graph.tensors.values()
                if t.kind is TensorKind.ACTIVATION) and any(
        t.dtype == "float32" for t in graph.tensors.values()
        if t.kind is TensorKind.PARAMETER)
    copies = weight_copies(graph)
    groups = _activations_by_group(graph, alignment_bytes)
    ref: Mapping[str, list[tuple[Tensor, int]]] = (
        _activations_by_group(reference, alignment_bytes) if reference is not None else {})
    rows = []
    for name in sorted(set(groups) | set(ref)):
        items = groups.get(name, [])
        copy = sum(b for t, b in items if t.id in copies)
        island = sum(b for t, b in items
                     if mixed and t.id not in copies and t.dtype == "float32")
        reduced = sum(b for t, b in items if t.id not in copies and t.dtype in _REDUCED)
        rows.append(ModulePrecision(
            name, sum(b for _, b in items), copy, island, reduced,
            sum(b for _, b in ref.get(name, [])) if reference is not None else None))
    return sorted(rows, key=lambda r: (-r.activation_bytes, r.module))
