"""The numeric precision of a training step: fp32, bf16 mixed, pure bf16, fp16 mixed.

One setting, four modes, each what people run in PyTorch:

=============  ==============================================================================
``fp32``       everything as the model is (the default; a model already in bf16 stays bf16)
``bf16-mixed`` forward and loss under ``torch.autocast(dtype=torch.bfloat16)``: fp32 master
               weights, gradients and optimizer state; autocast casts weights and inputs of
               matmuls to bf16 (these copies are saved for the backward) and keeps
               "fp32 islands" (layer norm, softmax, loss) in fp32
``bf16``       everything bf16: floating parameters, buffers and example inputs are cast
               (``model.to(torch.bfloat16)``), so gradients and optimizer state are bf16 too
``fp16-mixed`` autocast fp16 plus ``torch.amp.GradScaler``: the loss is scaled before the
               backward; the gradients are unscaled and checked for inf/NaN in one op before
               the update, which runs only when none was found; then the scale is updated
=============  ==============================================================================

The tracer (:func:`roam_core.trace.trace_training_step`) and the runtime's eager reference
(:mod:`roam_core.runtime.step`) both run the step through :class:`StepPrecision`, so the
traced graph and the eager step do the same thing.  With the scaler, the trace takes the
"no inf found" path (the update ops are traced); :class:`AmpGuard` names the update ops and
the ``found_inf`` flag, and the runtime skips those ops in a step whose flag is set, as
``GradScaler.step`` does.  With clipping the unscale comes before the clip (on the
accumulated sums with accumulation; a micro-batch that only accumulates has no unscale and
no :class:`AmpGuard`), and the gated ops are the optimizer's alone.  The scaler's
``scale`` and ``growth_tracker`` are resident state of the step (placeholders named
``grad_scaler:scale`` / ``grad_scaler:growth_tracker``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from roam_core.base.errors import TraceError

__all__ = [
    "GRAD_SCALER",
    "PRECISIONS",
    "SCALER_STATE",
    "AmpGuard",
    "Precision",
    "ScalerSettings",
    "StepPrecision",
    "new_grad_scaler",
    "ready_grad_scaler",
    "resolve_precision",
    "scaler_settings",
]

#: Precision names, as ``--precision`` and ``trace_training_step(precision=...)`` take them.
PRECISIONS = ("fp32", "bf16-mixed", "bf16", "fp16-mixed")
#: Owner prefix of the grad scaler's resident state (``grad_scaler:scale``).
GRAD_SCALER = "grad_scaler"
#: The grad scaler's resident tensors, in placeholder order.
SCALER_STATE = ("scale", "growth_tracker")


@dataclass(frozen=True, slots=True)
class Precision:
    """A precision mode (see the module notes).

    Parameters
    ----------
    name : str
        One of :data:`PRECISIONS`.
    autocast_dtype : torch.dtype or None
        ``torch.autocast`` dtype of the forward and loss (``None``: no autocast).
    cast_dtype : torch.dtype or None
        Floating parameters, buffers and inputs are cast to this dtype (``None``: kept).
    grad_scaler : bool
        The step scales the loss and unscales the gradients (``torch.amp.GradScaler``).
    description : str
        One line for people.
    """

    name: str
    autocast_dtype: torch.dtype | None
    cast_dtype: torch.dtype | None
    grad_scaler: bool
    description: str

    def dtype_of(self, t: torch.Tensor) -> torch.dtype:
        """The dtype ``t`` (a parameter, buffer or input) has in the step."""
        if self.cast_dtype is not None and t.is_floating_point():
            return self.cast_dtype
        return t.dtype

    def cast(self, x: Any) -> Any:
        """``x`` as the step sees it: floating tensors cast, anything else unchanged."""
        if isinstance(x, torch.Tensor) and self.cast_dtype is not None and x.is_floating_point():
            return x.to(self.cast_dtype)
        return x

    def cast_module(self, model: nn.Module) -> nn.Module:
        """``model`` with its floating parameters and buffers cast, in place (ties kept)."""
        if self.cast_dtype is not None:
            model.to(self.cast_dtype)
        return model


_MODES = {p.name: p for p in (
    Precision("fp32", None, None, False, "float32 (the model's own dtypes)"),
    Precision("bf16-mixed", torch.bfloat16, None, False,
              "autocast bf16: fp32 master weights, gradients and optimizer state"),
    Precision("bf16", None, torch.bfloat16, False,
              "pure bf16: weights, gradients, optimizer state and activations in bf16"),
    Precision("fp16-mixed", torch.float16, None, True,
              "autocast fp16 with a GradScaler (loss scaling, inf check, scale update)"),
)}


def resolve_precision(precision: str | Precision | None) -> Precision:
    """The :class:`Precision` of a name (``None``: ``fp32``).

    Raises
    ------
    TraceError
        For an unknown name (the message lists the choices).

    Examples
    --------
    >>> resolve_precision("bf16-mixed").autocast_dtype
    torch.bfloat16
    >>> resolve_precision(None).name
    'fp32'
    """
    if isinstance(precision, Precision):
        return precision
    name = precision or "fp32"
    try:
        return _MODES[name]
    except KeyError:
        raise TraceError(f"unknown precision {name!r}; choose one of "
                         f"{', '.join(PRECISIONS)}") from None


@dataclass(frozen=True, slots=True)
class AmpGuard:
    """The update ops a grad scaler skips when it finds inf/NaN gradients.

    Parameters
    ----------
    found_inf : str
        Value id (FX node) of the ``found_inf`` flag the unscale op writes.
    step_ops : frozenset of str
        FX node names of ``optimizer.step()``: they run only when the flag is zero.
    """

    found_inf: str
    step_ops: frozenset[str]


class StepPrecision:
    """Runs the precision-dependent parts of one training step (tracer and eager alike).

    Parameters
    ----------
    precision : str or Precision
        The mode.
    device : torch.device
        The step's device (autocast's device type; the scaler's device).
    scaler : torch.amp.GradScaler, optional
        The grad scaler of ``fp16-mixed`` (default: a fresh one; ignored otherwise).
    """

    def __init__(self, precision: str | Precision, device: torch.device,
                 scaler: Any = None) -> None:
        self.precision = resolve_precision(precision)
        self.device = torch.device(device)
        self.scaler = None
        if self.precision.grad_scaler:
            self.scaler = scaler if scaler is not None else new_grad_scaler(self.device)
        # optimizers unscaled since the last update, kept here rather than read from the
        # scaler's private per-optimizer state
        self._unscaled: set[int] = set()

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """The forward's and the loss's autocast (nothing for ``fp32`` and ``bf16``)."""
        dtype = self.precision.autocast_dtype
        if dtype is None:
            yield
            return
        with torch.autocast(self.device.type, dtype=dtype):
            yield

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, of the scaled loss with a grad scaler."""
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale the gradients and check them for inf/NaN (no-op without a scaler)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    def unscaled(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether :meth:`unscale` ran for ``optimizer`` since the last :meth:`update`
        (before a clip; never without a scaler)."""
        return self.scaler is not None and id(optimizer) in self._unscaled

    def update(self) -> None:
        """Update the scale from the inf check (no-op without a scaler)."""
        if self.scaler is not None:
            self.scaler.update()
            self._unscaled.clear()

    def eager_step(self, optimizer: torch.optim.Optimizer) -> bool:
        """The optimizer step of an eager loop; returns whether the update ran.

        With a scaler: ``scaler.step(optimizer)`` (skipped on inf/NaN) and
        ``scaler.update()``.
        """
        if self.scaler is None:
            optimizer.step()
            return True
        self.scaler.step(optimizer)
        stepped = not self.found_inf()
        self.update()
        return stepped

    def found_inf(self) -> bool:
        """Whether the last unscale found inf/NaN gradients (before :meth:`update`)."""
        if self.scaler is None:
            return False
        states = self.scaler._per_optimizer_states.values()
        return any(float(v.item()) != 0.0 for st in states
                   for v in st.get("found_inf_per_device", {}).values())

    def state(self) -> list[torch.Tensor]:
        """The scaler's resident tensors (:data:`SCALER_STATE` order; empty without one)."""
        if self.scaler is None:
            return []
        return [self.scaler._scale, self.scaler._growth_tracker]

    def set_state(self, tensors: Sequence[torch.Tensor]) -> None:
        """Make ``tensors`` the scaler's resident tensors (placeholders, arena slots)."""
        if self.scaler is not None:
            self.scaler._scale, self.scaler._growth_tracker = tensors


@dataclass(frozen=True, slots=True)
class ScalerSettings:
    """A ``torch.amp.GradScaler``'s hyper-parameters (its constructor's; torch's defaults).

    The growth and backoff factors and the growth interval are constants of the traced
    scale update (``_amp_update_scale_``); the scale and growth tracker themselves are
    resident state, loaded from the user's scaler when a step runs.

    Examples
    --------
    >>> ScalerSettings.of(torch.amp.GradScaler("cpu", growth_interval=4)).growth_interval
    4
    """

    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000

    @classmethod
    def of(cls, scaler: Any) -> ScalerSettings:
        """The settings of ``scaler`` (a ``torch.amp.GradScaler``).

        Raises
        ------
        TraceError
            Not an enabled ``GradScaler``.
        """
        if not isinstance(scaler, torch.amp.GradScaler):
            raise TraceError(f"grad_scaler must be a torch.amp.GradScaler, not "
                             f"{type(scaler).__name__}")
        if not scaler.is_enabled():
            raise TraceError("grad_scaler is disabled (enabled=False): an fp16-mixed step "
                             "needs an enabled GradScaler")
        return cls(float(scaler._init_scale), float(scaler.get_growth_factor()),
                   float(scaler.get_backoff_factor()), int(scaler.get_growth_interval()))

    def to_dict(self) -> dict[str, float | int]:
        """The settings, for ``Graph.origin``."""
        return {"init_scale": self.init_scale, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval}


def new_grad_scaler(device: torch.device, settings: ScalerSettings | None = None) -> Any:
    """A fresh ``torch.amp.GradScaler`` on ``device`` with its scale already created.

    ``GradScaler`` creates ``scale`` (``init_scale``) and ``growth_tracker`` (0) on the first
    ``scale()``; creating them here makes them resident state of the step.  ``settings``:
    its hyper-parameters (default: torch's).
    """
    s = settings or ScalerSettings()
    scaler = torch.amp.GradScaler(device.type, init_scale=s.init_scale,
                                  growth_factor=s.growth_factor,
                                  backoff_factor=s.backoff_factor,
                                  growth_interval=s.growth_interval)
    scaler._lazy_init_scale_growth_tracker(device)
    return scaler


def scaler_settings(scaler: Any, precision: str | Precision) -> ScalerSettings | None:
    """The settings of a user's ``grad_scaler`` (``None`` stays ``None``).

    Raises
    ------
    TraceError
        A scaler with a precision that has none (only ``fp16-mixed`` scales the loss), or
        not an enabled ``torch.amp.GradScaler``.
    """
    if scaler is None:
        return None
    prec = resolve_precision(precision)
    if not prec.grad_scaler:
        raise TraceError(f"grad_scaler is for precision='fp16-mixed', not {prec.name!r}")
    return ScalerSettings.of(scaler)


def ready_grad_scaler(scaler: Any, device: torch.device) -> Any:
    """A user's ``GradScaler`` with its scale and growth tracker created on ``device``."""
    ScalerSettings.of(scaler)  # checks the type and that it is enabled
    if scaler._scale is None:
        scaler._lazy_init_scale_growth_tracker(device)
    elif scaler._scale.device != device:
        raise TraceError(f"grad_scaler's scale is on {scaler._scale.device}, the step runs "
                         f"on {device}")
    return scaler
