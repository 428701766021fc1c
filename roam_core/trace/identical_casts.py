"""Identical casts made once: autocast's repeated casts of one activation, merged.

Under autocast every matmul casts its fp32 input to bf16 (fp16) itself; autocast caches the
casts of leaf weights, not of activations.  A Llama layer's RMSNorm output feeds the q, k
and v projections, and its second RMSNorm output the gate and up projections, so eager
PyTorch makes three (and two) bit-identical bf16 copies of each, and each matmul saves its
own copy for the weight gradient: at batch 24, 2,048 tokens, 2,048 wide, 22 layers, 12 GiB of
duplicates.  A model with fused projections (GPT-2's ``c_attn``), or ``torch.compile``'s CSE,
makes each once.

:func:`merge_identical_casts` rewrites a traced FX program so that every later cast with the
same input, the same arguments and the same fake result as an earlier one reads the earlier
one's value instead: the values are bit-identical by construction (the same conversion of the
same, unmodified tensor), so the step's numerics are eager's exactly, with fewer bytes.  A
cast is merged only when no op between the two may write to any tensor (a mutation could
change the input between the two casts).  The eager baseline is the unmerged trace: eager
PyTorch makes the copies.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from roam_core.base.errors import TraceError
from roam_core.trace.kernel_fakes import rerun_fake_value

__all__ = ["CAST_TARGETS", "merge_identical_casts"]

#: The cast ops merged.
CAST_TARGETS = (torch.ops.aten._to_copy.default,)


def _writes(node: Any) -> bool:
    """Whether an FX node may mutate a tensor (an in-place or ``out=`` op, or one whose
    schema is unknown)."""
    if node.op != "call_function":
        return node.op not in ("placeholder", "get_attr", "output")
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return not _is_pure_python(node.target)
    return bool(schema.is_mutable) or any(
        a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _is_pure_python(target: Any) -> bool:
    return target is operator.getitem


def _storages(val: Any) -> set[Any]:
    return {StorageWeakRef(t.untyped_storage())
            for t in torch.utils._pytree.tree_leaves(val) if isinstance(t, torch.Tensor)}


def _same_fake(a: Any, b: Any) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    if not isinstance(va, torch.Tensor) or not isinstance(vb, torch.Tensor):
        return False
    return (va.shape == vb.shape and va.stride() == vb.stride() and va.dtype == vb.dtype
            and va.device == vb.device)


def merge_identical_casts(gm: Any) -> int:
    """Make each repeated cast of an FX program read its first occurrence (in place).

    Parameters
    ----------
    gm : torch.fx.GraphModule
        A traced step's program (roam's tracer, before the graph is built from it).

    Returns
    -------
    int
        How many casts were merged away.
    """
    seen: dict[tuple[Any, ...], Any] = {}
    merged = 0
    gone: set[Any] = set()  # the storages of the merged casts
    for n in list(gm.graph.nodes):
        if gone and n.op == "call_function" and _storages(n.meta.get("val")) & gone:
            # a view of a merged cast: now of the kept one (a traced view reads a fake tensor)
            if not rerun_fake_value(n):
                raise TraceError(f"merging casts: op {n.name!r} reads no fake tensor")
            continue
        if _writes(n):
            seen.clear()  # a write may change any input: later casts start afresh
            continue
        if n.op != "call_function" or n.target not in CAST_TARGETS:
            continue
        key = (n.target, n.args, tuple(sorted(n.kwargs.items(), key=lambda kv: kv[0])))
        try:
            hash(key)
        except TypeError:
            continue
        first = seen.setdefault(key, n)
        if first is not n and _same_fake(first, n):
            gone |= _storages(n.meta.get("val"))
            n.replace_all_uses_with(first)
            gm.graph.erase_node(n)
            merged += 1
    if merged:
        gm.recompile()
    return merged
