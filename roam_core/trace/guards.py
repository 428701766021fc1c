"""Data-dependent code while tracing: evaluate what is constant, explain what is not.

A traced step has static shapes and no Python control flow on tensor values.  Two kinds of
model code break that:

* **a Python value read from a tensor** (``bool(t)``, ``t.item()``, ``if (mask == c).all():``),
  which reaches ATen as ``aten._local_scalar_dense``.  Often the tensor is a *constant* of
  the step: ``torch.nn.Transformer`` checks whether the ``tgt_mask`` it is given equals the
  causal mask it builds (``_detect_is_causal_mask``), and the mask itself comes from
  ``torch.full`` + ``torch.triu`` inside ``forward``.  :class:`DataDependentGuard` then
  evaluates the value for real: the tensor's FX ancestors contain no graph input and no
  random op, so running them on real CPU tensors gives exactly what eager computes.  The
  step records no node for the read; the branch eager would take is the one traced.
* **a data-dependent shape** (``nonzero``, boolean-mask indexing, ``masked_select``,
  ``unique``...): Mixtral-style MoE routing gathers each expert's tokens this way.  No
  static plan exists for it; tracing stops with a :class:`~roam_core.base.errors.TraceError`
  naming the op, the module path (``model.layers.0.mlp.experts``) and the way out.

A read from a value that depends on the inputs or parameters is refused the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["DataDependentGuard", "ModuleStack", "explain", "guard_data_dependence",
           "untraceable_message"]

_aten = torch.ops.aten

#: Ops with a data-dependent output shape -> what to do instead.
_DYNAMIC_SHAPE_HINT = (
    "its output shape depends on tensor values, and a plan needs static shapes. "
    "Mixture-of-experts routing that gathers each expert's tokens (nonzero / where / "
    "boolean indexing) is the usual cause: use dense or fixed-capacity routing instead, "
    "e.g. Hugging Face MoE models with config._experts_implementation = 'batched_mm' "
    "(every token-expert pair, static shapes), or run every expert on every token and "
    "weight the outputs by the gate (zero for unselected experts)")
_SCALAR_HINT = (
    "the model reads a Python value from a tensor computed from the inputs or parameters "
    "(.item(), bool(tensor), `if tensor...:`), so the step's control flow depends on data. "
    "Make the branch static: pass the flag explicitly (e.g. torch.nn.Transformer: "
    "tgt_is_causal=True / src_is_causal=..., and enable_nested_tensor=False with padding "
    "masks), or compute the value outside the step")


class ModuleStack:
    """Qualified names of the modules being run (global forward hooks, during a trace)."""

    def __init__(self, model: nn.Module) -> None:
        self.names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
        self.stack: list[str] = []
        self._handles: list[Any] = []

    def __enter__(self) -> ModuleStack:
        from torch.nn.modules import module as mod

        def pre(m: nn.Module, *_: Any) -> None:
            self.stack.append(self.names.get(id(m), type(m).__name__))

        def post(m: nn.Module, *_: Any) -> None:
            if self.stack:
                self.stack.pop()

        self._handles = [mod.register_module_forward_pre_hook(pre),
                         mod.register_module_forward_hook(post)]
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()

    def current(self) -> str | None:
        """The innermost module running (``""`` is the model itself), or ``None``."""
        return self.stack[-1] if self.stack else None


def untraceable_message(op: Any, module: str | None, hint: str) -> str:
    """The user-facing reason a step cannot be traced."""
    where = "" if module is None else (
        " in the model itself" if module == "" else f" in module {module!r}")
    return f"cannot trace {op}{where}: {hint}"


def _proxy_node(t: torch.Tensor) -> Any:
    """The FX node that computes the fake tensor ``t`` in the graph being traced, if any."""
    try:
        from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
    except ImportError:  # pragma: no cover - older/newer torch without these helpers
        return None
    mode = get_proxy_mode()
    if mode is None:
        return None
    try:
        return get_proxy_slot(t, mode.tracer).proxy.node
    except Exception:  # not tracked: not a traced value
        return None


def _constant_value(t: torch.Tensor, gm_root: Any) -> torch.Tensor | None:
    """Evaluate ``t`` for real when it depends on no graph input and no random op."""
    node = _proxy_node(t)
    if node is None:
        return None
    seen: dict[Any, None] = {}
    todo = [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        if n.op == "placeholder":
            return None
        if n.op == "call_function":
            target = n.target
            if isinstance(target, torch._ops.OpOverload) and (
                    torch.Tag.nondeterministic_seeded in target.tags):
                return None
        seen[n] = None
        todo.extend(n.all_input_nodes)
    order = [n for n in node.graph.nodes if n in seen]
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    except ImportError:  # pragma: no cover
        return None
    env: dict[Any, Any] = {}

    def real(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return env[a]
        if isinstance(a, torch.device):
            return torch.device("cpu")
        return a

    with unset_fake_temporarily(), disable_proxy_modes_tracing():
        for n in order:
            if n.op == "get_attr":
                env[n] = getattr(gm_root, n.target)
                continue
            if n.op != "call_function":
                return None
            args = torch.fx.node.map_aggregate(n.args, real)
            kwargs = torch.fx.node.map_aggregate(n.kwargs, real)
            if "device" in kwargs:
                kwargs = {**kwargs, "device": torch.device("cpu")}
            env[n] = n.target(*args, **kwargs)
    out = env[node]
    return out if isinstance(out, torch.Tensor) else None


class DataDependentGuard(TorchDispatchMode):
    """Dispatch mode entered inside the traced step (see the module docstring).

    Parameters
    ----------
    modules : ModuleStack
        Where the model is, for the error messages.
    """

    def __init__(self, modules: ModuleStack) -> None:
        super().__init__()
        self.modules = modules
        #: ``(module path, value)`` of every data-dependent read evaluated as a constant
        self.evaluated: list[tuple[str | None, Any]] = []
        #: the message for the last data-dependent op that failed
        self.failure: str | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is _aten._local_scalar_dense.default:
            t = args[0]
            mode = _tracer_root()
            value = _constant_value(t, mode) if mode is not None else None
            if value is not None:
                scalar = value.item()
                self.evaluated.append((self.modules.current(), scalar))
                return scalar
        try:
            return func(*args, **kwargs)
        except Exception as e:
            name = type(e).__name__
            if name in _DATA_DEPENDENT:  # e.g. torch.equal: a Python value of its inputs
                value = self._constant_call(func, args, kwargs)
                if value is not None:
                    self.evaluated.append((self.modules.current(), value))
                    return value
            # remember where it happened; the exception itself propagates unchanged (torch
            # code may catch it), and trace_fx turns it into a TraceError with this message
            hint = (_DYNAMIC_SHAPE_HINT if name == "DynamicOutputShapeException" else
                    _SCALAR_HINT if name in _DATA_DEPENDENT else None)
            if hint is not None:
                self.failure = untraceable_message(func, self.modules.current(), hint)
            raise


    @staticmethod
    def _constant_call(func: Any, args: Any, kwargs: Any) -> Any:
        """``func`` on the real values of its tensor arguments when all are constants of
        the step and the result is a Python value (``aten.equal``, ``aten.is_nonzero``)."""
        root = _tracer_root()
        if root is None:
            return None
        reals: dict[int, Any] = {}
        for a in torch.utils._pytree.tree_leaves((args, kwargs)):
            if isinstance(a, torch.Tensor):
                v = _constant_value(a, root)
                if v is None:
                    return None
                reals[id(a)] = v
        try:
            from torch._subclasses.fake_tensor import unset_fake_temporarily
            from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
        except ImportError:  # pragma: no cover
            return None
        swap = torch.utils._pytree.tree_map(
            lambda a: reals.get(id(a), a) if isinstance(a, torch.Tensor) else a, (args, kwargs))
        with unset_fake_temporarily(), disable_proxy_modes_tracing():
            out = func(*swap[0], **swap[1])
        return None if isinstance(out, torch.Tensor) else out


#: Exceptions of a read of tensor data during tracing.
_DATA_DEPENDENT = ("DataDependentOutputException", "GuardOnDataDependentSymNode")


def explain(exc: BaseException, guard: DataDependentGuard | None) -> str | None:
    """The user-facing message for a data-dependent failure of a trace, if it is one."""
    seen: BaseException | None = exc
    while seen is not None:
        name = type(seen).__name__
        if name == "DynamicOutputShapeException" or name in _DATA_DEPENDENT:
            if guard is not None and guard.failure:
                return guard.failure
            hint = _DYNAMIC_SHAPE_HINT if name == "DynamicOutputShapeException" else _SCALAR_HINT
            return untraceable_message(str(seen) or name, None, hint)
        seen = seen.__cause__ or seen.__context__
    return None


def _tracer_root() -> Any:
    try:
        from torch.fx.experimental.proxy_tensor import get_proxy_mode
    except ImportError:  # pragma: no cover
        return None
    mode = get_proxy_mode()
    return None if mode is None else mode.tracer.root  # type: ignore[union-attr]  # make_fx's


@contextlib.contextmanager
def guard_data_dependence(model: nn.Module,
                          sink: list[DataDependentGuard] | None = None
                          ) -> Iterator[DataDependentGuard]:
    """Enter :class:`ModuleStack` and :class:`DataDependentGuard` (inside ``make_fx``); the
    guard is appended to ``sink`` so the caller can :func:`explain` a failure later."""
    with ModuleStack(model) as stack, DataDependentGuard(stack) as guard:
        if sink is not None:
            sink.append(guard)
        yield guard
