"""Where torch's fake kernels disagree with its real ones, put right after tracing.

A traced value's fake tensor (``node.meta["val"]``) decides its storage's bytes and the
dtype of the ``out=`` slot the runtime gives the real kernel.  A fake kernel that reports
another dtype than the real kernel produces makes the plan size the storage wrong, and the
replay refuse the slot.

* **Mixed-dtype normalisation on CPU.**  Under ``torch.autocast("cpu", dtype=bfloat16)``
  ``native_layer_norm``, ``native_group_norm`` and ``native_batch_norm`` get a bfloat16
  (or float16) input with float32 weights.  The CPU kernels then return their saved
  statistics (mean, rstd / invstd) in float32, the accumulation type; torch's fake kernels
  return them in the input's dtype.  :func:`fix_fake_values` gives those outputs (and the
  ``getitem`` nodes that read them) float32 fake values in exactly that case.

* **Batch-norm backward without an input gradient.**  ``native_batch_norm_backward`` with
  ``output_mask[0]`` false (the batch norm's input needs no gradient: a frozen layer before
  it) returns no input gradient on CPU, but its fake kernel returns a full tensor: the plan
  would give it a slot and the ``out=`` kernel refuses one.  Its value becomes ``None``, as
  the fake kernels of layer norm, group norm and convolution backward already say.

The pass edits ``meta["val"]`` only (new fake tensors, each its own storage, made under the
trace's fake mode); the graph's ops are unchanged.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

__all__ = ["fix_fake_values"]

_aten = torch.ops.aten
#: op -> (position of the input, position of the weight)
_NORMS = {
    _aten.native_layer_norm.default: (0, 2),
    _aten.native_group_norm.default: (0, 1),
    _aten.native_batch_norm.default: (0, 1),
}
_LOW = (torch.bfloat16, torch.float16)


def _val(x: Any) -> Any:
    return x.meta.get("val") if isinstance(x, torch.fx.Node) else None


def _batch_norm_backward(node: Any) -> bool:
    """``output_mask[0]`` false: no input gradient (``None``, as the CPU kernel gives)."""
    mask = node.args[9] if len(node.args) > 9 else node.kwargs.get("output_mask")
    out = node.meta.get("val")
    if not (isinstance(mask, (list, tuple)) and mask and not mask[0]
            and isinstance(out, tuple) and out and out[0] is not None):
        return False
    if any(u.target is operator.getitem and u.args[1] == 0 for u in node.users):
        return False  # something reads it: leave the trace as it is
    node.meta["val"] = (None, *out[1:])
    return True


def fix_fake_values(gm: Any, fm: FakeTensorMode) -> int:
    """Correct the fake values listed in the module notes; returns how many nodes changed."""
    changed = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is _aten.native_batch_norm_backward.default:
            changed += _batch_norm_backward(node)
            continue
        where = _NORMS.get(node.target) if node.op == "call_function" else None
        if where is None or len(node.args) <= where[1]:
            continue
        x, w, out = _val(node.args[where[0]]), _val(node.args[where[1]]), node.meta.get("val")
        if not (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor)
                and x.device.type == "cpu" and x.dtype in _LOW and w.dtype == torch.float32
                and isinstance(out, tuple) and len(out) == 3
                and out[1].dtype != torch.float32):
            continue
        with fm:
            stats = [torch.empty_strided(t.shape, t.stride(), dtype=torch.float32,
                                         device=t.device) for t in out[1:]]
        node.meta["val"] = (out[0], *stats)
        for user in node.users:
            if user.target is operator.getitem and user.args[1] in (1, 2):
                user.meta["val"] = stats[user.args[1] - 1]
        changed += 1
    return changed
