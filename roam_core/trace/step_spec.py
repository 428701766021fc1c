"""What a traced training step does between ``loss.backward()`` and the next step: gradient
clipping and gradient accumulation (:class:`StepSpec`).

The plain step is ``loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)``.  A
:class:`StepSpec` adds, in the traced graph itself (so that the planner orders them and lays
out their temporaries):

* **clipping** (``max_grad_norm``): ``torch.nn.utils.clip_grad_norm_(params, max_norm,
  foreach=False)`` after the backward, before the update.  The per-tensor form is traced:
  on CPU torch's default (foreach) path runs the same per-tensor norm and ``mul_`` kernels, so
  the step equals ``clip_grad_norm_(model.parameters(), max_norm)`` bit for bit.  The total
  norm is a second output of the step.
* **accumulation** (``accumulation_steps=k > 1``): the backward runs on ``loss / k`` and each
  gradient is added into its parameter's *accumulator*, a resident storage (kind
  ``gradient``) that lives from one micro-batch to the next.  A micro-batch graph either only
  accumulates (``updates=False``) or accumulates, clips and updates from the accumulators,
  then resets them (``updates=True``, the k-th micro-batch).  The eager loop it equals::

      for micro in range(k):
          (loss_fn(model(*batch[micro])) / k).backward()   # autograd sums into p.grad
      clip_grad_norm_(model.parameters(), max_norm)       # if max_grad_norm is set
      opt.step(); opt.zero_grad(set_to_none=True)

  Accumulators are reset to ``-0.0``, the identity of IEEE addition: ``-0.0 + g`` is ``g``
  bit for bit (also for ``g = +0.0`` and ``-0.0``), so the first micro-batch's add is the
  copy autograd makes, and the sums are autograd's own in-place ``+=`` in the same order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from roam_core.base.errors import TraceError
from roam_core.trace.precision import ScalerSettings

__all__ = ["ACCUMULATOR_SUFFIX", "StepSpec", "accumulate_and_clip", "reset_accumulators"]

#: ``Tensor.name`` suffix of a gradient accumulator (``fc.weight.grad_accumulator``).
ACCUMULATOR_SUFFIX = ".grad_accumulator"


@dataclass(frozen=True, slots=True)
class StepSpec:
    """Clipping and accumulation of one traced training step (see the module notes).

    Parameters
    ----------
    max_grad_norm : float or None
        Clip the gradients' total 2-norm to this value before the update (``None``: no
        clipping).
    accumulation_steps : int
        Micro-batches per optimizer step (1: no accumulation).
    updates : bool
        Whether this micro-batch ends with the optimizer update (the k-th) or only adds its
        gradients into the accumulators.  Always ``True`` without accumulation.
    grad_scaler : ScalerSettings or None
        ``fp16-mixed``: the grad scaler's hyper-parameters (``None``: torch's defaults).

    Examples
    --------
    >>> StepSpec(accumulation_steps=4, updates=False).phase
    'accumulate'
    >>> StepSpec().phase, StepSpec(max_grad_norm=1.0).origin()
    ('step', {'max_grad_norm': 1.0})
    """

    max_grad_norm: float | None = None
    accumulation_steps: int = 1
    updates: bool = True
    grad_scaler: ScalerSettings | None = None

    def __post_init__(self) -> None:
        if isinstance(self.accumulation_steps, bool) or not isinstance(
                self.accumulation_steps, int) or self.accumulation_steps < 1:
            raise TraceError(f"accumulation_steps must be an integer >= 1, got "
                             f"{self.accumulation_steps!r}")
        if self.max_grad_norm is not None:
            norm = self.max_grad_norm
            if isinstance(norm, bool) or not isinstance(norm, (int, float)) or not (
                    math.isfinite(norm) and norm > 0):
                raise TraceError(f"max_grad_norm must be a positive finite number, got "
                                 f"{norm!r}")
        if not self.updates and self.accumulation_steps == 1:
            raise TraceError("a step without the optimizer update only exists with "
                             "accumulation_steps > 1")

    @property
    def accumulates(self) -> bool:
        """True with more than one micro-batch per update (accumulators are resident)."""
        return self.accumulation_steps > 1

    @property
    def phase(self) -> str:
        """``"step"`` (no accumulation), ``"accumulate"`` or ``"update"`` (the k-th)."""
        if not self.accumulates:
            return "step"
        return "update" if self.updates else "accumulate"

    def for_phase(self, phase: str) -> StepSpec:
        """This spec for the micro-batch ``phase`` (``"accumulate"`` or ``"update"``)."""
        return StepSpec(self.max_grad_norm, self.accumulation_steps, phase != "accumulate",
                        self.grad_scaler)

    def origin(self) -> dict[str, Any]:
        """The non-default settings, for ``Graph.origin``."""
        out: dict[str, Any] = {}
        if self.max_grad_norm is not None:
            out["max_grad_norm"] = float(self.max_grad_norm)
        if self.accumulates:
            out["accumulation_steps"] = self.accumulation_steps
            out["micro_batch"] = self.phase
        if self.grad_scaler is not None and self.grad_scaler != ScalerSettings():
            out["grad_scaler"] = self.grad_scaler.to_dict()
        return out


def accumulate_and_clip(params: Sequence[torch.nn.Parameter],
                        accumulators: Sequence[torch.Tensor | None],
                        spec: StepSpec,
                        unscale: Callable[[], None] | None = None) -> torch.Tensor | None:
    """After ``backward()``: add the gradients into the accumulators, then clip (traced).

    ``accumulators[i]`` belongs to ``params[i]`` (``None`` for a frozen parameter; the list
    is empty without accumulation).  With accumulation every ``p.grad`` afterwards *is* its
    accumulator (``updates``) or ``None`` (the micro-batch only accumulates).  ``unscale``
    (a grad scaler's ``unscale_(optimizer)``) runs just before the clip, on the summed
    gradients, as ``scaler.unscale_(opt); clip_grad_norm_(...)`` does in eager.  Returns the
    total gradient norm when clipping, else ``None``.
    """
    if spec.accumulates:
        for p, acc in zip(params, accumulators, strict=True):
            if p.grad is None or acc is None:
                continue
            acc.add_(p.grad)
            p.grad = acc if spec.updates else None
    if spec.max_grad_norm is None or not spec.updates:
        return None
    if unscale is not None:
        unscale()
    # the per-tensor path: on CPU the foreach default runs the same kernels (bit-equal)
    return torch.nn.utils.clip_grad_norm_(list(params), spec.max_grad_norm, foreach=False)


def reset_accumulators(accumulators: Sequence[torch.Tensor | None]) -> None:
    """After the update: every accumulator back to ``-0.0`` (the identity of ``+``)."""
    for acc in accumulators:
        if acc is not None:
            acc.fill_(-0.0)
