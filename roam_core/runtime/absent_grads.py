"""Gradients a planned step does not keep, made loud: :class:`AbsentGrad` markers.

:class:`~roam_core.runtime.planned_step.PlannedStep` computes, clips and applies the gradients
inside ``step(batch)``; none survive the call.  An eager habit then fails silently: with
``p.grad is None``, ``torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)`` after the
step returns 0 and clips nothing, ``optimizer.step()`` does nothing.  So after every call each
trained parameter's ``.grad`` is an :class:`AbsentGrad`: a tensor subclass with the
gradient's shape, dtype and device but no storage, on which every computation raises
:class:`GradientsNotKeptError` naming the parameter and what to do instead (``max_grad_norm=``
for clipping).

What stays harmless: ``model.zero_grad()`` / ``optimizer.zero_grad()`` (both ``set_to_none``
values; the marker records it), ``model.to(...)`` (the marker follows the dtype and device)
and ``copy.deepcopy(model)`` (parameters copy without their grad).  :class:`GradGuard`
installs the markers after a call and, before the next one, reports which parameters the
user cleared (with gradient accumulation, eager PyTorch then drops their partial sums, so
the step resets their accumulators) and refuses gradients assigned by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from roam_core.runtime.step_context import StepMismatchError

__all__ = ["AbsentGrad", "GradGuard", "GradientsNotKeptError"]

_aten = torch.ops.aten
#: Ops on a marker that are no computation: returned unchanged (``zero_`` is recorded).
_KEEP = frozenset({_aten.detach.default, _aten.alias.default})


class GradientsNotKeptError(StepMismatchError):
    """A parameter's gradient was read after a planned step, which keeps none."""


class AbsentGrad(torch.Tensor):
    """A ``.grad`` that says "this step kept no gradient" when anything reads it.

    Parameters
    ----------
    like : Tensor
        The parameter (shape, dtype, device and strides are copied; no memory is used).
    name : str
        The parameter's qualified name, for the error message.
    """

    # a wrapper subclass opts out of __torch_function__; the stub types the slot otherwise
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]  # see above
    param_name: str
    zeroed: bool

    @staticmethod
    def __new__(cls, like: torch.Tensor, name: str) -> AbsentGrad:
        return _marker(like.shape, like.stride(), like.dtype, like.device, name)

    def __repr__(self) -> str:  # type: ignore[override]  # Tensor's takes tensor_contents
        return f"AbsentGrad({self.param_name!r}: PlannedStep keeps no gradients)"

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]  # the stub is the disabled impl's
            cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        first = args[0] if args else None
        marker = first if isinstance(first, AbsentGrad) else None
        if marker is not None and func in _KEEP:
            return marker
        if marker is not None and func is _aten.zero_.default:
            marker.zeroed = True
            return marker
        if marker is not None and func is _aten._to_copy.default:  # model.to(...)
            kw = kwargs or {}
            return _marker(marker.shape, marker.stride(), kw.get("dtype") or marker.dtype,
                           kw.get("device") or marker.device, marker.param_name)
        name = next((a.param_name for a in _flat(args, kwargs) if isinstance(a, AbsentGrad)), "?")
        raise GradientsNotKeptError(
            f"parameter {name!r} has no gradient to read ({func} asked for it): PlannedStep "
            "computes, clips and applies the gradients inside step(...) and keeps none. To "
            "clip, pass max_grad_norm= to PlannedStep (the clip is then part of the plan); "
            "to accumulate, accumulation_steps=. model.zero_grad() clears this marker.")


def _marker(shape: Any, stride: Any, dtype: torch.dtype, device: Any, name: str) -> AbsentGrad:
    r = torch.Tensor._make_wrapper_subclass(AbsentGrad, shape, dtype=dtype,
                                             device=torch.device(device), strides=stride,
                                             requires_grad=False)
    r.param_name, r.zeroed = name, False
    return r


def _flat(args: Any, kwargs: Any) -> list[Any]:
    out: list[Any] = []
    for a in list(args) + list((kwargs or {}).values()):
        if isinstance(a, (list, tuple)):
            out.extend(a)
        else:
            out.append(a)
    return out


class GradGuard:
    """Puts :class:`AbsentGrad` markers on the trained parameters after every planned call.

    Parameters
    ----------
    params : sequence of (str, Parameter)
        The parameters the step trains (``requires_grad``), with their names.
    """

    def __init__(self, params: Sequence[tuple[str, torch.nn.Parameter]]) -> None:
        self.params = [(n, p) for n, p in params if p.requires_grad]
        self.markers: list[AbsentGrad | None] = [None] * len(self.params)

    def cleared(self) -> list[int]:
        """Indices of the parameters whose marker the user cleared (``zero_grad``) since
        the last call; raises if a gradient was assigned by hand (nothing changed)."""
        out = []
        for i, ((name, p), mark) in enumerate(zip(self.params, self.markers, strict=True)):
            g = p.grad
            if g is mark and (mark is None or not mark.zeroed):
                continue
            if g is None or (isinstance(g, AbsentGrad) and g.zeroed) or g is mark:
                out.append(i)
                continue
            if isinstance(g, AbsentGrad):  # moved by model.to(...): still no gradient
                continue
            raise StepMismatchError(
                f"parameter {name!r} has a .grad assigned by hand: PlannedStep computes the "
                "gradients inside the step and cannot add to it; set it to None "
                "(model.zero_grad()) before the next call")
        return out

    def install(self) -> None:
        """Put a fresh marker on every trained parameter."""
        for i, (name, p) in enumerate(self.params):
            mark = self.markers[i]
            if mark is None or mark.zeroed or p.grad is not mark:
                mark = AbsentGrad(p, name)
                self.markers[i] = mark
                p.grad = mark

    def remove(self) -> None:
        """Take the markers off (``p.grad = None`` where a marker is)."""
        for (_, p), mark in zip(self.params, self.markers, strict=True):
            if mark is not None and isinstance(p.grad, AbsentGrad):
                p.grad = None
        self.markers = [None] * len(self.params)
