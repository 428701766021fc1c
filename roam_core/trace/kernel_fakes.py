"""Fake values whose dtype or layout torch's fake kernels get wrong, corrected while tracing.

Under autocast, a normalisation layer often receives a bf16/fp16 input with fp32 weights (a
bf16 activation into an fp32 ``LayerNorm``, ``BatchNorm``, ``GroupNorm``).  The real CPU
kernels take their "mixed type" path and return the saved statistics (mean and reciprocal
standard deviation) in **float32**; torch 2.13's reference implementations, which fake
tensors run, cast them to the input's dtype on CPU.  The statistics are saved for the
backward, so the graph would count them at half their size and the one-arena replay would
hand the ``out=`` kernel a slot of the wrong dtype.  The reference backward of a mixed-type
``GroupNorm`` likewise returns the input's gradient in float32 where the kernel returns the
input's dtype.

Strides matter too: the one-arena replay writes every output into a slot laid out like its
fake value, and a later reduction over a differently strided tensor sums in another order
(a last-bit difference).  On CPU ``native_layer_norm_backward`` returns the input's gradient
contiguous whatever the layout of the incoming gradient; its reference implementation
follows the incoming gradient's strides (seen in Swin's backward at batch 1).

:class:`KernelFakeMode` returns those outputs as the CPU kernels do, while the step
is traced, so every later fake value (the backward's) is computed from the right dtypes and layouts.
The saved-tensor test (``tests/roam_core/trace/test_precision.py``) compares every tensor
autocast saves for the backward on a real run with the graph's activations, which is how
these were found.

One disagreement is put right after tracing instead, by :func:`fix_fake_values`: a
**batch-norm backward without an input gradient**.  ``native_batch_norm_backward`` with
``output_mask[0]`` false (the batch norm's input needs no gradient: a frozen layer before
it) returns no input gradient on CPU, but its fake kernel returns a full tensor: the plan
would give it a slot and the ``out=`` kernel refuses one.  Its value becomes ``None``, as
the fake kernels of layer norm, group norm and convolution backward already say (only when
nothing reads it; the pass edits ``meta["val"]`` only, the graph's ops are unchanged).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from torch._prims_common import make_contiguous_strides_for
from torch._subclasses.fake_tensor import FakeTensorMode

__all__ = ["KernelFakeMode", "fix_fake_values", "rerun_fake_value"]

_aten = torch.ops.aten
_REDUCED = (torch.bfloat16, torch.float16)


def _mixed(x: Any, *params: Any) -> bool:
    """A bf16/fp16 CPU input with a float32 weight or bias: the kernels' mixed-type path."""
    return (isinstance(x, torch.Tensor) and x.dtype in _REDUCED and x.device.type == "cpu"
            and any(isinstance(p, torch.Tensor) and p.dtype == torch.float32 for p in params))


def _stats_fp32(x: int, *params: int) -> Callable[[Sequence[Any]], tuple[Any, ...] | None]:
    """Forward normalisations: the saved statistics (outputs 1, 2) are float32."""
    def rule(args: Sequence[Any]) -> tuple[Any, ...] | None:
        got = [args[i] if i < len(args) else None for i in (x, *params)]
        return (None, torch.float32, torch.float32) if _mixed(*got) else None
    return rule


def _group_norm_backward(args: Sequence[Any]) -> tuple[Any, ...] | None:
    """``native_group_norm_backward``: the input's gradient has the input's dtype."""
    x, weight = args[1], args[4]
    return (x.dtype, None, None) if _mixed(x, weight) else None


#: an output rule entry: same dtype, contiguous strides
CONTIGUOUS = "contiguous"


def _layer_norm_backward(args: Sequence[Any]) -> tuple[Any, ...] | None:
    """``native_layer_norm_backward`` on CPU: the input's gradient is contiguous."""
    x = args[1]
    if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
        return None
    return (CONTIGUOUS, None, None)


#: op -> rule(args) -> for each output its dtype or :data:`CONTIGUOUS` (``None``: as the fake
#: kernel says), or ``None`` when the rule does not apply
_RULES: dict[Any, Callable[[Sequence[Any]], tuple[Any, ...] | None]] = {
    _aten.native_layer_norm.default: _stats_fp32(0, 2, 3),
    _aten.native_batch_norm.default: _stats_fp32(0, 1, 2),
    _aten.native_group_norm.default: _stats_fp32(0, 1, 2),
    _aten.native_group_norm_backward.default: _group_norm_backward,
    _aten.native_layer_norm_backward.default: _layer_norm_backward,
}


class KernelFakeMode(FakeTensorMode):
    """A ``FakeTensorMode`` whose normalisations on CPU return the dtypes and layouts the
    real kernels return (see the module notes).

    The correction happens inside the fake mode, below make_fx's proxy mode, so the traced
    node records the corrected values and every later op (the backward reading the
    statistics) computes from them.  :attr:`fixed` counts the corrected outputs.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fixed = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = super().__torch_dispatch__(func, types, args, kwargs)
        rule = _RULES.get(func)
        dtypes = rule(args) if rule is not None else None
        if dtypes is None:
            return out
        val = list(cast(Sequence[Any], out))
        for i, want in enumerate(dtypes):
            old = val[i]
            if want is None or not isinstance(old, torch.Tensor):
                continue
            dtype, stride = old.dtype, old.stride()
            if want is CONTIGUOUS:
                stride = tuple(make_contiguous_strides_for(old.shape))
            else:
                dtype = want
            if (dtype, stride) != (old.dtype, old.stride()):
                val[i] = super().__torch_dispatch__(
                    _aten.empty_strided.default, types, (old.shape, stride),
                    {"dtype": dtype, "device": old.device})
                self.fixed += 1
        return tuple(val) if type(out) is tuple else type(out)(*val)


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


def fix_fake_values(gm: Any) -> int:
    """Put right, after tracing, what :class:`KernelFakeMode` cannot (see the module notes);
    returns how many nodes changed."""
    return sum(_batch_norm_backward(node) for node in gm.graph.nodes
               if node.op == "call_function"
               and node.target is _aten.native_batch_norm_backward.default)


def rerun_fake_value(node: Any) -> bool:
    """Recompute an FX node's ``meta["val"]`` from its inputs' fake values, in place.

    For a node whose inputs changed after tracing (a view of a merged cast, a re-run's copy):
    the graph's storages and aliases follow the fake values.

    Parameters
    ----------
    node : torch.fx.Node
        The node; ``getitem`` takes its element of the parent's value.

    Returns
    -------
    bool
        False when no fake tensor names the fake mode (neither an input's value nor the
        node's own, e.g. a copied factory's): the value is left as it was.
    """
    from torch._guards import detect_fake_mode

    if node.target is operator.getitem:
        parent, idx = node.args
        node.meta["val"] = parent.meta["val"][idx]
        return True
    args = torch.fx.node.map_arg(node.args, lambda n: n.meta.get("val"))
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: n.meta.get("val"))
    # the node's own value names the mode when it reads no tensor (a factory)
    leaves = torch.utils._pytree.tree_leaves((args, kwargs, node.meta.get("val")))
    mode = detect_fake_mode([v for v in leaves if isinstance(v, torch.Tensor)])
    if mode is None:
        return False
    with mode:
        node.meta["val"] = node.target(*args, **kwargs)
    return True
