"""The optimizer of a traced step: named torch optimizers with single-tensor updates, and the
``steady`` setting's warm step that creates their state before the traced step.

The optimizer is always traced with its *single-tensor* implementation: foreach optimizers
trace into multi-tensor ops over all parameters at once, which would make it impossible to
run one parameter's update as soon as its gradient is ready (ROAM's weight-update rule).
Named optimizers are built with ``foreach=False, fused=False``; a user's optimizer built with
``foreach=True`` is switched to its per-parameter form for the trace (:func:`per_parameter`):
torch's foreach kernels on CPU loop over the same per-tensor kernels, so the update is the
same bit for bit (tested for Adam, AdamW and SGD).  ``fused=True`` runs one fused kernel with
its own arithmetic and is traced as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from roam_core.base.errors import TraceError

__all__ = ["OPTIMIZERS", "SETTINGS", "OptimizerFactory", "make_optimizer_factory",
           "per_parameter", "warm_step"]

#: Optimizer names accepted by :func:`~roam_core.trace.tracer.trace_training_step`.
OPTIMIZERS = ("adamw", "adam", "sgd")
#: Tracing settings: optimizer state resident (``steady``) or created in the step (``roam``).
SETTINGS = ("steady", "roam")

OptimizerFactory = Callable[[list[nn.Parameter]], torch.optim.Optimizer]

#: Attribute of the factories :func:`make_optimizer_factory` builds from a name.
_META_WARM = "_roam_meta_warm_step"


def make_optimizer_factory(
    optimizer: str | OptimizerFactory | None, setting: str = "steady", **hyper: Any
) -> tuple[str, OptimizerFactory]:
    """Resolve an optimizer spec to ``(name, factory)``; factories use single-tensor updates.

    Parameters
    ----------
    optimizer : {"adamw", "adam", "sgd"}, callable or None
        ``None`` means ``"adamw"`` in the ``steady`` setting and ``"adam"`` in ``roam``.
        A callable ``params -> Optimizer`` is used as is (name ``"custom"``).
    setting : {"steady", "roam"}
        ``roam`` defaults to ``lr=0.1, weight_decay=1e-4`` (the ROAM paper).
    **hyper
        Extra keyword hyper-parameters for the torch optimizer (override the defaults).

    Examples
    --------
    >>> make_optimizer_factory(None, "roam")[0], make_optimizer_factory("sgd")[0]
    ('adam', 'sgd')
    """
    if setting not in SETTINGS:
        raise TraceError(f"unknown setting {setting!r}; choose one of {', '.join(SETTINGS)}")
    if callable(optimizer):
        return "custom", optimizer
    name = optimizer or ("adam" if setting == "roam" else "adamw")
    if name not in OPTIMIZERS:
        raise TraceError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    kw: dict[str, Any] = {"foreach": False}
    if setting == "roam":
        kw.update(lr=0.1, weight_decay=1e-4)
    if name == "sgd":
        kw.setdefault("lr", 0.01)
        kw["momentum"] = 0.9
        cls: Any = torch.optim.SGD
    else:
        kw["fused"] = False
        cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    kw.update(hyper)

    def factory(params: list[nn.Parameter]) -> torch.optim.Optimizer:
        return cls(params, **kw)

    # a torch optimizer with plain hyper-parameters: its warm step may run on meta twins
    setattr(factory, _META_WARM, not any(isinstance(v, torch.Tensor) for v in kw.values()))
    return name, factory


def per_parameter(opt: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Switch ``foreach=True`` param groups to the single-tensor update (in place).

    ``foreach=None`` (torch's default, which picks foreach on CUDA) becomes ``False`` too:
    the trace records the per-parameter update either way.  ``fused`` is left as it is.
    Returns ``opt``.
    """
    for group in opt.param_groups:
        if "foreach" in group and not group.get("fused"):
            group["foreach"] = False
    return opt


def warm_step(opt: torch.optim.Optimizer, factory: OptimizerFactory, params: list[Any],
              fm: FakeTensorMode, device: torch.device) -> None:
    """The ``steady`` setting's warm step: one ``opt.step()`` with zero gradients, so that
    the optimizer state exists (resident) before the traced step.

    For roam's own optimizers (Adam, AdamW, SGD by name) the step runs on meta-device twins
    of the parameters, outside the fake-tensor mode (about 30 % less CPU on GPT2-XL's 7,500
    warm-step ops), and the state is copied onto the fake parameters: meta tensors become
    fake tensors of the same shape, strides and dtype on ``device``; Adam's CPU ``step`` scalar
    becomes the fake constant ``torch.tensor`` makes under the fake mode, as in the fake
    step.  Any other state (or a user's factory) runs the step on the fake tensors.
    """
    if getattr(factory, _META_WARM, False):
        twins = [nn.Parameter(torch.empty_strided(p.shape, p.stride(), dtype=p.dtype,
                                                  device="meta"), p.requires_grad)
                 for p in params]
        twin_opt = factory(twins)
        for t in twins:
            if t.requires_grad:
                t.grad = torch.zeros_like(t)
        twin_opt.step()
        twin_opt.zero_grad(set_to_none=True)
        copied = [(p, _fake_state(twin_opt.state.get(t, {}), fm, device))
                  for p, t in zip(params, twins, strict=True)]
        if all(st is not None for _, st in copied):
            for p, st in copied:
                if st:
                    opt.state[p] = st
            return
    with fm:
        for p in params:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
        opt.step()
        opt.zero_grad(set_to_none=True)


def _fake_state(state: Mapping[str, Any], fm: FakeTensorMode,
                device: torch.device) -> dict[str, Any] | None:
    """A meta twin's optimizer state as fake tensors (``None``: something not expected)."""
    out: dict[str, Any] = {}
    for k, v in state.items():
        if not isinstance(v, torch.Tensor):
            if not isinstance(v, (int, float, bool)):
                return None
            out[k] = v
        elif v.device.type == "meta":
            with fm:
                out[k] = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype,
                                             device=device)
        elif v.device.type == "cpu" and v.dim() == 0 and not v.requires_grad:
            value = v.item()
            with fm:  # what the optimizer's torch.tensor(0.0) + ``step += 1`` give there
                out[k] = torch.tensor(value, dtype=v.dtype)
        else:
            return None
    return out
