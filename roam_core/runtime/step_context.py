"""What a planned step was made for, checked on every call: :class:`StepContext`.

A traced step bakes in more than the batch shapes.  Eager PyTorch reads these at every
step; a replayed plan would silently keep the values it was traced with:

* **autocast**: whether ``torch.autocast`` is on (CPU and the step's device) and its dtype;
* **requires_grad** of every parameter (a frozen parameter has no gradient and no update);
* **training** of every module (dropout masks, batch-norm statistics);
* the **settings of torch.nn's own modules** (``Dropout.p``, ``BatchNorm.momentum``,
  ``LayerNorm.eps``...), numbers the trace copies in;
* the **objects** trained: the same parameter and buffer tensors under the same names, the
  same submodules (a replaced layer is another model);
* the **optimizer**: its class, its param groups and the parameters in each, and its
  hyper-parameters that choose a code path (``maximize``, ``amsgrad``, ``nesterov``...; the
  numbers ``lr``, ``betas``, ``weight_decay`` are followed at every step by
  :mod:`roam_core.runtime.scalars`).

:meth:`StepContext.capture` records them when the step is traced; :meth:`StepContext.check`
compares them at every call, cheaply (flat tuples of booleans and object ids, compared with
one ``==``; the message is built only on a mismatch) and raises
:class:`StepMismatchError` naming what changed and what to do *before* the call changes
anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from roam_core.base.errors import ExecutorError

__all__ = ["StepContext", "StepMismatchError", "autocast_state"]

_MISSING = object()


class StepMismatchError(ExecutorError):
    """The call differs from what the planned step was traced for (mode, precision, frozen
    parameters, optimizer settings, batch shapes...); nothing was changed."""


def autocast_state(device_types: Sequence[str]) -> tuple[tuple[str, bool, str], ...]:
    """``(device type, enabled, dtype)`` of ``torch.autocast`` for each device type."""
    out = []
    for dt in dict.fromkeys(device_types):
        on = bool(torch.is_autocast_enabled(dt))
        out.append((dt, on, str(torch.get_autocast_dtype(dt)).replace("torch.", "")
                    if on else ""))
    return tuple(out)


def _nn_settings(module: nn.Module) -> tuple[tuple[str, Any], ...]:
    """Public plain attributes of torch.nn's own modules (``p``, ``eps``, ``momentum``)."""
    if not type(module).__module__.startswith("torch.nn.modules"):
        return ()
    return tuple((k, v) for k, v in vars(module).items()
                 if not k.startswith("_") and k != "training"
                 and (v is None or isinstance(v, (bool, int, float, str))))


def _path_hyper(group: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The hyper-parameters of a param group that are flags, not followed numbers."""
    return tuple(sorted((k, v) for k, v in group.items()
                        if k != "params" and (v is None or isinstance(v, (bool, str)))))


@dataclass(frozen=True)
class StepContext:
    """A snapshot of what a step is traced for (see the module notes).

    Use :meth:`capture` to take one and :meth:`check` to compare the present with it.
    """

    device_types: tuple[str, ...]
    autocast: tuple[tuple[str, bool, str], ...]
    module_names: tuple[str, ...]
    modules: tuple[nn.Module, ...]
    param_names: tuple[str, ...]
    params: tuple[nn.Parameter, ...]
    #: per module, the dicts of its parameters, buffers and children
    tables: tuple[dict[str, Any], ...]
    #: torch.nn modules' settings: (module index, attribute names, their values)
    settings: tuple[tuple[int, tuple[str, ...], tuple[Any, ...]], ...]
    structure: tuple[Any, ...]  # per module: names and ids of its tensors and children
    key: tuple[Any, ...]  # the flat tuple compared at every call

    @classmethod
    def capture(cls, model: nn.Module, params: Sequence[tuple[str, nn.Parameter]],
                optimizer: torch.optim.Optimizer | None,
                device: torch.device) -> StepContext:
        """The context now, for ``model``, its distinct ``params`` and ``optimizer``."""
        named = list(model.named_modules(remove_duplicate=True))
        names = tuple(n for n, _ in named)
        mods = tuple(m for _, m in named)
        dts = tuple(dict.fromkeys(("cpu", device.type)))
        ps = tuple(p for _, p in params)
        tables = tuple(t for m in mods for t in (m._parameters, m._buffers, m._modules))
        settings = []
        for i, m in enumerate(mods):
            found = _nn_settings(m)
            if found:
                settings.append((i, tuple(k for k, _ in found), tuple(v for _, v in found)))
        ctx = cls(dts, autocast_state(dts), names, mods, tuple(n for n, _ in params), ps,
                  tables, tuple(settings), _structure(mods), ())
        object.__setattr__(ctx, "key", ctx._key(optimizer))
        return ctx

    def _key(self, optimizer: torch.optim.Optimizer | None) -> tuple[Any, ...]:
        # flat tuples of booleans and ids: one == per call, microseconds for a small model
        mods = self.modules
        return (autocast_state(self.device_types),
                tuple([m.training for m in mods]),
                tuple([p.requires_grad for p in self.params]),
                tuple([id(v) for t in self.tables for v in t.values()]),
                tuple([tuple([getattr(mods[i], k, _MISSING) for k in keys])
                       for i, keys, _ in self.settings]),
                _optimizer_key(optimizer))

    def check(self, optimizer: torch.optim.Optimizer | None) -> None:
        """Raise :class:`StepMismatchError` if anything differs from the captured context."""
        now = self._key(optimizer)
        if now != self.key:
            raise StepMismatchError(self._explain(now))

    # ------------------------------------------------------------------ messages
    def _explain(self, now: tuple[Any, ...]) -> str:
        was_ac, was_train, was_rg, was_ids, _, was_opt = self.key
        ac, train, rg, ids, nn_now, opt = now
        if ac != was_ac:
            return _autocast_message(was_ac, ac)
        if ids != was_ids:
            return self._structure_message(self.structure, _structure(self.modules))
        if train != was_train:
            return self._mode_message(was_train, train)
        for name, a, b in zip(self.param_names, was_rg, rg, strict=True):
            if a != b:
                return (f"parameter {name!r} has requires_grad={b} but the step was planned "
                        f"with requires_grad={a} (the plan "
                        f"{'updates' if a else 'does not update'} it): set it back, or build "
                        "a new PlannedStep after freezing or unfreezing parameters (its "
                        "plan traces the new set)")
        for (i, keys, old), values in zip(self.settings, nn_now, strict=True):
            if old != values:
                diff = ", ".join(f"{k} {a!r} -> {b!r}" for k, a, b in
                                 zip(keys, old, values, strict=True) if a != b)
                mod = self.modules[i]
                return (f"module {self.module_names[i]!r} ({type(mod).__name__}) changed since "
                        f"the step was planned ({diff}); the trace copied the old values in: "
                        "set them back, or build a new PlannedStep")
        return _optimizer_message(was_opt, opt)

    def _mode_message(self, was: tuple[bool, ...], now: tuple[bool, ...]) -> str:
        changed = [i for i, (a, b) in enumerate(zip(was, now, strict=True)) if a != b]
        # name a module whose behaviour the mode changes (a Dropout, a BatchNorm) if any
        moded = [i for i in changed if any(w in type(self.modules[i]).__name__
                                           for w in ("Dropout", "BatchNorm", "InstanceNorm"))]
        i = (moded or changed)[0]
        name, mod = self.module_names[i], self.modules[i]
        where = f"module {name!r}" if name else "the model"
        mode, planned = ("training", "eval") if now[i] else ("eval", "training")
        fix = "model.eval()" if now[i] else "model.train()"
        more = f" (so are {len(changed) - 1} more modules)" if len(changed) > 1 else ""
        return (f"{where} ({type(mod).__name__}) is in {mode} mode{more} but the step was "
                f"planned in {planned} mode (dropout and batch-norm statistics differ): call "
                f"{fix} before step(...), or build a PlannedStep for {mode} mode")

    def _structure_message(self, was: tuple[Any, ...], now: tuple[Any, ...]) -> str:
        for name, a, b in zip(self.module_names, was, now, strict=True):
            if a == b:
                continue
            where = f"module {name!r}" if name else "the model"
            (pa, ba, ca), (pb, bb, cb) = a, b
            for kind, x, y in (("parameter", pa, pb), ("buffer", ba, bb), ("submodule", ca, cb)):
                if x != y:
                    keys = sorted({k for k, _ in x} ^ {k for k, _ in y}
                                  | {k for (k, i), (_, j) in zip(x, y, strict=False) if i != j})
                    leaf = f"{name}.{keys[0]}" if name and keys else (keys[0] if keys else "?")
                    return (f"{kind} {leaf!r} of {where} was replaced or added since the step "
                            "was planned: the plan trains the old objects. Write new values "
                            "into the existing tensors (copy_, load_state_dict) or build a new "
                            "PlannedStep for the new model")
        return "the model's modules changed since the step was planned: build a new PlannedStep"


def _structure(modules: Sequence[nn.Module]) -> tuple[Any, ...]:
    """Per module: ``(name, id)`` of its parameters, buffers and children."""
    return tuple(
        (tuple((k, id(v)) for k, v in m._parameters.items()),
         tuple((k, id(v)) for k, v in m._buffers.items()),
         tuple((k, id(v)) for k, v in m._modules.items()))
        for m in modules)


def _optimizer_key(optimizer: torch.optim.Optimizer | None) -> tuple[Any, ...]:
    if optimizer is None:
        return ()
    return (type(optimizer),
            tuple((tuple(id(p) for p in g["params"]), _path_hyper(g))
                  for g in optimizer.param_groups))


def _autocast_message(was: tuple[Any, ...], now: tuple[Any, ...]) -> str:
    def say(state: tuple[Any, ...]) -> str:
        on = [f"torch.autocast({dt!r}, dtype=torch.{dtype})" for dt, en, dtype in state if en]
        return " and ".join(on) if on else "no autocast"

    return (f"the step runs under {say(now)} but was planned under {say(was)}: the plan's "
            "ops and their dtypes are fixed when the step is traced. Call it in the same "
            "autocast context it was built (first called) in, or build a PlannedStep inside "
            "the new one")


def _optimizer_message(was: tuple[Any, ...], now: tuple[Any, ...]) -> str:
    if not was or not now or was[0] is not now[0]:
        name = lambda k: k[0].__name__ if k else "none"  # noqa: E731
        return (f"the optimizer is a {name(now)} but the step was planned for a "
                f"{name(was)}: build a new PlannedStep")
    if len(was[1]) != len(now[1]):
        return (f"the optimizer has {len(now[1])} param groups but the step was planned with "
                f"{len(was[1])} (add_param_group after set-up): build a new PlannedStep")
    for gi, ((pa, ha), (pb, hb)) in enumerate(zip(was[1], now[1], strict=True)):
        if pa != pb:
            return (f"optimizer param_groups[{gi}] holds other parameters than when the step "
                    "was planned: build a new PlannedStep")
        if ha != hb:
            diff = ", ".join(f"{k} {dict(ha).get(k)!r} -> {v!r}" for k, v in hb
                             if dict(ha).get(k, object()) != v)
            return (f"optimizer param_groups[{gi}] changed since the step was planned "
                    f"({diff}): these settings choose the update's code path, which the plan "
                    "traced. Set them back, or build a new PlannedStep")
    return "the step's context changed since it was planned: build a new PlannedStep"
