"""Export a budget plan to stock PyTorch: selective activation checkpointing of the modules.

:func:`apply_checkpoint_plan` wraps the modules that
:func:`~roam_core.recompute.checkpoint_export.export_checkpoint_policy` names in
``torch.utils.checkpoint.checkpoint(..., use_reentrant=False, context_fn=...)`` with a
selective policy (``torch.utils.checkpoint.create_selective_checkpoint_contexts``): per op of
each call, ``MUST_SAVE`` where the plan keeps the op's result for the backward and
``PREFER_RECOMPUTE`` where it drops it, matched by ATen overload and occurrence within the
call.  The model is then trained by any loop, ``torch.compile`` or framework; nothing of
roam's runtime runs.

* **Wrapping** replaces the module's ``forward`` on the instance (the class is untouched), so
  parameter names, ``state_dict`` keys, hooks and ``named_modules`` stay as they were;
  :meth:`AppliedCheckpointPlan.remove` puts the original ``forward`` back.
* **Numerics**: equal to the unwrapped model, bit for bit on CPU.  Random ops are re-run
  from the generator state checkpointing restores (``preserve_rng_state=True``), never
  cached (a cached draw would shift every later re-run one); batch norm is re-run without
  its running statistics and other writes to buffers (``num_batches_tracked``) are re-run
  on a copy (:func:`_rerun_mode_class`), so buffers move once a step, as in eager (plain
  ``torch.utils.checkpoint`` moves them twice).
* **Mismatch**: an op the plan's graph does not have at that place (another model, batch
  shape or mode) is re-run and a ``RuntimeWarning`` names the module and the op: memory may
  differ from the plan, the numbers do not.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from roam_core.base.errors import ConfigError, ExecutorError
from roam_core.model.checkpoint_policy import (
    CheckpointPolicyExport,
    Decision,
    ModulePolicy,
    PolicyCursor,
)
from roam_core.model.graph import Graph, TensorKind
from roam_core.model.plan import Plan
from roam_core.model.recompute_ops import RUNNING_STATS_INPUTS, RUNNING_STATS_TARGETS
from roam_core.recompute.checkpoint_export import export_checkpoint_policy
from roam_core.trace.modules import SCOPE_ATTRIBUTE, scoped_name
from roam_core.trace.params import unique_named_parameters

__all__ = ["AppliedCheckpointPlan", "apply_checkpoint_plan", "wrappable_modules"]

_WRAPPED = "_roam_checkpoint_policy"
#: Mismatches kept in ``AppliedCheckpointPlan.mismatches`` (a loop in another mode would
#: add some every step).
_MAX_MISMATCHES = 100


def apply_checkpoint_plan(model: nn.Module,
                          plan: Plan | CheckpointPolicyExport | str | os.PathLike[str],
                          graph: Graph | None = None) -> AppliedCheckpointPlan:
    """Wrap ``model``'s modules so that torch drops and re-runs what ``plan`` does.

    Parameters
    ----------
    model : nn.Module
        The model the plan's graph was traced from (a wrapper with ``roam_name_scope``
        too: module paths are then taken relative to that submodule).
    plan : Plan, CheckpointPolicyExport or path
        A budget plan (with ``graph``), an export made from one, or a ``policy.json``
        written by ``roam export-policy``.
    graph : Graph, optional
        The graph ``plan`` was made for (needed for a :class:`Plan`: it records each op's
        module).

    Returns
    -------
    AppliedCheckpointPlan
        What was wrapped, the export (with what it could not express), ``remove()``.

    Raises
    ------
    ConfigError
        A :class:`Plan` without its graph, a model whose parameters are not the graph's, a
        module path the model does not have, or a module already wrapped.
    PlanFormatError
        The plan was made for another graph, or the policy file is malformed.

    Examples
    --------
    >>> import torch, roam_core as rc
    >>> m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    >>> g = rc.trace_training_step(m, [torch.randn(2, 4)], lambda y: y.sum())
    >>> applied = rc.apply_checkpoint_plan(m, rc.make_plan(g), g)   # no budget: no drops
    >>> applied.modules
    ()
    """
    base = _scope_root(model)
    export = _export_of(plan, graph, model)
    found = [(_resolve(base, mp.module), mp) for mp in export.modules]
    for module, mp in found:
        if getattr(module, _WRAPPED, None) is not None:
            raise ConfigError(f"module {mp.module!r} is already wrapped by "
                              "apply_checkpoint_plan: call remove() on the earlier result first")
    applied = AppliedCheckpointPlan(export, tuple(mp.module for mp in export.modules))
    for module, mp in found:
        applied._wrap(module, mp)
    return applied


@dataclass(eq=False)
class AppliedCheckpointPlan:
    """The modules :func:`apply_checkpoint_plan` wrapped.

    Attributes
    ----------
    export : CheckpointPolicyExport
        The decisions, and the plan's drops they cannot express (``unexpressed``, with bytes).
    modules : tuple of str
        The wrapped module paths.
    mismatches : list of str
        Ops met at run time that the plan's graph does not have at that place (the first
        100; each module warns once).
    """

    export: CheckpointPolicyExport
    modules: tuple[str, ...]
    mismatches: list[str] = field(default_factory=list)
    _undo: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def remove(self) -> None:
        """Put every wrapped module's own ``forward`` back."""
        while self._undo:
            self._undo.pop()()

    def _wrap(self, module: nn.Module, mp: ModulePolicy) -> None:
        own = module.__dict__.get("forward")
        module.forward = _CheckpointedForward(
            module, _Region(mp, self.mismatches, module), own)
        setattr(module, _WRAPPED, True)

        def undo() -> None:
            if own is not None:
                module.forward = own
            else:
                del module.forward
            delattr(module, _WRAPPED)

        self._undo.append(undo)


class _CheckpointedForward:
    """The ``forward`` of a wrapped module: its own, inside ``torch.utils.checkpoint``.

    An object holding the module rather than a closure, so that ``copy.deepcopy(model)``
    gives a model whose forward runs the copy's parameters, not the original's.
    """

    def __init__(self, module: nn.Module, region: _Region, own: Any) -> None:
        self.module, self.region, self.own = module, region, own

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        m = self.module
        inner = self.own if self.own is not None else type(m).forward.__get__(m)
        if not torch.is_grad_enabled():
            return inner(*args, **kwargs)
        region = self.region
        out = checkpoint(inner, *args, use_reentrant=False, preserve_rng_state=True,
                         # a plain function of no arguments: torch.compile calls it unbound
                         context_fn=functools.partial(_region_contexts, region), **kwargs)
        if not torch.compiler.is_compiling():
            region.finish()
        return out


class _Region:
    """The selective policy of one wrapped module and the cursor of its latest call."""

    def __init__(self, mp: ModulePolicy, mismatches: list[str], module: nn.Module) -> None:
        self.policy = mp
        self.module = module
        self.cursor = PolicyCursor(mp)
        self.mismatches = mismatches
        self.warned = False

    def mismatch(self, what: str) -> None:
        msg = f"module {self.policy.module!r} {what}, unlike the plan's graph"
        if len(self.mismatches) < _MAX_MISMATCHES:
            self.mismatches.append(msg)
        if not self.warned:
            self.warned = True
            why = ("torch.compile traces some ops otherwise" if torch.compiler.is_compiling()
                   else "the plan was made for another model, batch shape or mode")
            warnings.warn(f"roam checkpoint policy: {msg}; such ops are re-run in the "
                          f"backward ({why}: memory may differ from the plan, results do not)",
                          RuntimeWarning, stacklevel=3)

    def finish(self) -> None:
        """After an eager call: say if it ran fewer ops than the plan's graph."""
        c = self.cursor
        if c.skipped or c.left:
            missed = [o.target for o in (*c.skipped, *c.left)]
            self.mismatch(f"did not run {len(missed)} op(s) ({', '.join(missed[:3])}...)")
        self.cursor = PolicyCursor(self.policy)


def _region_contexts(region: _Region) -> tuple[Any, Any]:
    """``context_fn`` of ``torch.utils.checkpoint``: (forward, recompute) dispatch modes of
    one call of a wrapped module, following it op by op (:class:`PolicyCursor`)."""
    cursor = region.cursor = PolicyCursor(region.policy)

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        # a factory op (no tensor argument) the trace dropped as dead code, e.g. batch
        # norm's empty reserve: nothing to save, nothing to say
        factory = not any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values()))
        d = cursor.next(str(op), exact=factory)
        if d is None:
            if not factory:
                region.mismatch(f"ran {op}")
            save = _explicit_generator(op, args, kwargs)
        else:
            save = d is Decision.SAVE
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    fwd, rec = create_selective_checkpoint_contexts(policy)
    # torch.compile wants two dispatch modes: the re-run mode itself learns batch norm
    rec.__class__ = _rerun_mode_class()
    rec.buffers = frozenset(id(b) for b in region.module.buffers())
    return fwd, rec


def _explicit_generator(op: Any, args: Any, kwargs: Any) -> bool:
    """A random op drawing from an explicit generator: checkpointing cannot replay it."""
    if torch.Tag.nondeterministic_seeded not in getattr(op, "tags", ()):
        return False
    return any(isinstance(a, torch.Generator) for a in (*args, *kwargs.values()))


@functools.cache
def _rerun_mode_class() -> type:
    """torch's re-run mode of selective checkpointing, leaving the module's buffers alone.

    The forward updated them once, as without checkpointing; the re-run must not again
    (plain ``torch.utils.checkpoint`` does): batch norm is re-run without its running
    statistics (same outputs, from the batch), and any other in-place write to a buffer
    (batch norm's ``num_batches_tracked += 1``) is re-run on a copy, which keeps torch's
    count of the ops of the call.
    """
    from torch.utils.checkpoint import _CachedTorchDispatchMode

    class _RerunKeepingBuffers(_CachedTorchDispatchMode):
        buffers: frozenset[int] = frozenset()  # ids of the wrapped module's buffers

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            args = list(args)
            if str(func) in RUNNING_STATS_TARGETS:
                for i in RUNNING_STATS_INPUTS:
                    if i < len(args):
                        args[i] = None
            elif self.buffers and func._schema.is_mutable:
                for i, a in enumerate(func._schema.arguments[:len(args)]):
                    x = args[i]
                    if (a.alias_info is not None and a.alias_info.is_write
                            and id(x) in self.buffers):
                        args[i] = x.clone()
            try:
                return super().__torch_dispatch__(func, types, tuple(args), kwargs)
            except RuntimeError as e:
                if "in storage" not in str(e):
                    raise
                raise ExecutorError(
                    f"a checkpointed module ran other ops when torch re-ran it in the "
                    f"backward ({e}): it keeps state between calls -- a Hugging Face "
                    "key/value cache: set model.config.use_cache = False for training, as "
                    "transformers' own gradient checkpointing does") from e

    return _RerunKeepingBuffers


# ------------------------------------------------------------------ inputs
def wrappable_modules(model: nn.Module) -> Callable[[str], bool]:
    """``path -> bool``: whether ``model``'s module at ``path`` has a ``forward`` to wrap
    (``ModuleList`` and ``ModuleDict`` have none); paths as the graph records them (relative
    to the ``roam_name_scope`` submodule of a wrapper)."""
    base = _scope_root(model)

    def wrappable(path: str) -> bool:
        try:
            m = base.get_submodule(path)
        except AttributeError:
            return False
        return "forward" in m.__dict__ or type(m).forward is not nn.Module.forward

    return wrappable


def _export_of(plan: Plan | CheckpointPolicyExport | str | os.PathLike[str],
               graph: Graph | None, model: nn.Module) -> CheckpointPolicyExport:
    if isinstance(plan, CheckpointPolicyExport):
        return plan
    if isinstance(plan, str | os.PathLike):
        from roam_core.formats.policy_io import load_policy

        return load_policy(plan)
    if not isinstance(plan, Plan):
        raise ConfigError(f"apply_checkpoint_plan takes a Plan, a CheckpointPolicyExport or "
                          f"a policy file, not {type(plan).__name__}")
    if graph is None:
        raise ConfigError("apply_checkpoint_plan needs the plan's graph (graph=...): it "
                          "records which module each op ran in")
    _check_parameters(model, graph)
    return export_checkpoint_policy(graph, plan, wrappable=wrappable_modules(model))


def _check_parameters(model: nn.Module, graph: Graph) -> None:
    """Refuse a model whose parameters are not the graph's (names, shapes)."""
    scope = str(getattr(model, SCOPE_ATTRIBUTE, "") or "")
    mine = {scoped_name(n, scope): tuple(p.shape) for n, p in unique_named_parameters(model)}
    theirs = {t.name: t.shape for t in graph.tensors.values()
              if t.kind is TensorKind.PARAMETER and t.name is not None}
    for name, shape in theirs.items():
        if mine.get(name) != shape:
            got = "no such parameter" if name not in mine else f"shape {mine[name]}"
            raise ConfigError(f"the plan's graph ({graph.name!r}) has parameter {name!r} of "
                              f"shape {shape}, the model {got}: the plan was made for "
                              "another model")
    extra = sorted(set(mine) - set(theirs))
    if extra:
        raise ConfigError(f"the model has parameter {extra[0]!r}, which the plan's graph "
                          f"({graph.name!r}) has not: the plan was made for another model")


def _scope_root(model: nn.Module) -> nn.Module:
    scope = str(getattr(model, SCOPE_ATTRIBUTE, "") or "")
    return model.get_submodule(scope) if scope else model


def _resolve(base: nn.Module, path: str) -> nn.Module:
    try:
        return base.get_submodule(path)
    except AttributeError:
        raise ConfigError(f"the model has no module {path!r}: the plan was made for another "
                          "model") from None
