"""Follow an optimizer's per-step Python scalars in a traced step.

A traced ``steady`` step is the optimizer's *second* step (one warm step runs before the
trace).  Torch's single-tensor optimizers compute some arguments of their update kernels in
Python from the step count and the hyper-parameters, and the trace records the numbers it
saw: Adam's ``step_size = lr / (1 - beta1 ** 2)`` and ``sqrt(1 - beta2 ** 2)``,
AdamW's ``1 - lr * weight_decay``.  Replaying the graph as is would apply step 2's bias
corrections at every step.

:class:`OptimizerScalars` keeps those arguments right without knowing any optimizer's
formulas: it runs the **same optimizer class**, with the same hyper-parameters, on a
one-element *probe* parameter per parameter group, and records the ATen calls of each probe
step (a ``TorchDispatchMode``).  The probe's state is reset to the fresh state (see
:func:`fresh_state`) after a warm step, so its state advances exactly like the real
optimizer's.  Each of the graph's update ops is matched once, at set-up, to the probe's
call at the traced step (same ATen op, same arguments where they are numbers); before every
step the probe steps once and its numbers are copied into the program.  A learning-rate
scheduler that changes ``optimizer.param_groups`` is followed the same way.

The match is verified: an optimizer whose update ops do not map one-to-one onto a single
parameter (the ``fused`` implementations), or whose traced numbers differ from the probe's,
raises :class:`~roam_core.base.errors.ExecutorError` naming the optimizer.  ``foreach=True``
is traced as the per-parameter update (:func:`roam_core.trace.optimizers.per_parameter`) and
the probes follow it with ``foreach=False``: the numbers are the same.

The probes (:class:`ScalarProbes`) belong to the optimizer, not to one traced step: the plans
of several batch shapes share them, so every shape sees the same step count.  A probe step
that takes another code path than the traced one (a hyper-parameter changed from non-zero to
zero, ``maximize`` switched on, RAdam's rectification switch) is undone and raises
:class:`~roam_core.runtime.step_context.StepMismatchError` naming what changed.
"""

from __future__ import annotations

import inspect
import logging
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from roam_core.base.errors import ExecutorError
from roam_core.model.graph import Phase, TensorKind
from roam_core.runtime.program import flat_leaves
from roam_core.runtime.step_context import StepMismatchError

if TYPE_CHECKING:
    from roam_core.trace.traced_step import TracedStep

__all__ = ["FRESH_ZERO_STATE", "SUPPORTED_OPTIMIZERS", "OptimizerScalars", "ScalarProbes",
           "check_supported", "fresh_state"]

_logger = logging.getLogger(__name__)

#: Optimizers whose lazily created state is all zeros (step counters included) and whose
#: first update is the steady update applied to that zero state.
FRESH_ZERO_STATE: tuple[type, ...] = tuple(
    c for c in (getattr(torch.optim, n, None) for n in ("SGD", "Adam", "AdamW", "Adamax",
                                                       "RMSprop", "Adagrad"))
    if c is not None)

#: What the refusal of an unsupported optimizer lists.
SUPPORTED_OPTIMIZERS = (
    "SGD (dampening 0), Adam, AdamW, Adamax, RMSprop and Adagrad, foreach=False or "
    "foreach=True (traced and run per parameter; bit-equal on CPU); fused=True is refused")


def fresh_state(optimizer: torch.optim.Optimizer, param: torch.Tensor,
                key: str, like: torch.Tensor) -> torch.Tensor:
    """The value state entry ``key`` of ``param`` has before the first update.

    State created by the constructor (Adagrad's ``sum``) is taken as it is; lazily created
    state is zeros for the classes of :data:`FRESH_ZERO_STATE`.

    Raises
    ------
    ExecutorError
        For an optimizer whose fresh state is not known (NAdam's ``mu_product`` starts at
        1, ...), or SGD with dampening (its first step skips the dampening).
    """
    made = optimizer.state.get(param, {}).get(key)
    if isinstance(made, torch.Tensor):
        return made.detach()
    check_supported(optimizer)
    return torch.zeros_like(like)


def check_supported(optimizer: torch.optim.Optimizer) -> None:
    """Refuse optimizers whose steps PlannedStep cannot reproduce (the reason and the
    optimizers that work in the message)."""
    name = type(optimizer).__name__
    if not isinstance(optimizer, FRESH_ZERO_STATE):
        raise ExecutorError(
            f"PlannedStep starts from a fresh {name} optimizer but does not know its initial "
            f"state; supported optimizers: {SUPPORTED_OPTIMIZERS}")
    for gi, g in enumerate(optimizer.param_groups):
        if g.get("fused"):
            raise ExecutorError(
                f"{name}(fused=True) (param_groups[{gi}]) updates every parameter in one "
                "fused kernel whose rounding differs from the per-parameter update a plan "
                "runs, and which cannot run one parameter's update as soon as its gradient "
                "is ready; use foreach=True or foreach=False (the same numbers as fused up "
                f"to rounding). Supported: {SUPPORTED_OPTIMIZERS}")
        if g.get("differentiable"):
            raise ExecutorError(f"{name}(differentiable=True) is not supported by "
                                f"PlannedStep; supported: {SUPPORTED_OPTIMIZERS}")
    if isinstance(optimizer, torch.optim.SGD):
        for g in optimizer.param_groups:
            if g.get("momentum", 0) and g.get("dampening", 0):
                raise ExecutorError(
                    "SGD with momentum and dampening skips the dampening on its first step, "
                    "which the steady step does not; use dampening=0")


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.calls.append((func, (args, kwargs)))  # flattened only where a number is read
        return func(*args, **kwargs)


def _hyper(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params"}


class _Probe:
    """One-element copy of a parameter group, stepped once per real step."""

    def __init__(self, optimizer: torch.optim.Optimizer, group: dict[str, Any],
                 dtype: torch.dtype, device: torch.device) -> None:
        cls = type(optimizer)
        self.param = nn.Parameter(torch.zeros(1, dtype=dtype, device=device))
        sig = inspect.signature(cls.__init__).parameters
        hyper = _hyper(group)
        if "foreach" in hyper:  # the per-parameter update, as traced (per_parameter)
            hyper["foreach"] = False
        kw = {k: v for k, v in hyper.items() if k in sig}
        try:
            self.opt = cls([dict(hyper, params=[self.param])], **kw)
        except Exception as e:  # any constructor failure: the optimizer cannot be followed
            raise ExecutorError(f"cannot build a probe {cls.__name__} to follow its per-step "
                                f"scalars: {type(e).__name__}: {e}") from e
        made = {k: v.clone() for k, v in self.opt.state.get(self.param, {}).items()
                if isinstance(v, torch.Tensor)}
        self.param.grad = torch.zeros_like(self.param)
        self.opt.step()  # creates the lazy state, as the tracer's warm step does
        for k, v in self.opt.state[self.param].items():
            if isinstance(v, torch.Tensor):
                with torch.no_grad():
                    v.copy_(made[k] if k in made else torch.zeros_like(v))
        self.param.grad = torch.ones_like(self.param)

    def step(self, group: dict[str, Any] | None = None) -> list[tuple[Any, Any]]:
        if group is not None:
            mine = self.opt.param_groups[0]
            mine.update(_hyper(group))
            if "foreach" in mine:
                mine["foreach"] = False
        rec = _Recorder()
        with rec:
            self.opt.step()
        return rec.calls

    def snapshot(self) -> tuple[torch.Tensor, dict[str, Any], dict[str, Any]]:
        """The probe's value, state and hyper-parameters (tiny: one element each)."""
        state = {k: v.clone() if isinstance(v, torch.Tensor) else v
                 for k, v in self.opt.state[self.param].items()}
        return self.param.detach().clone(), state, _hyper(self.opt.param_groups[0])

    def restore(self, snap: tuple[torch.Tensor, dict[str, Any], dict[str, Any]]) -> None:
        value, state, hyper = snap
        with torch.no_grad():
            self.param.copy_(value)
            for k, v in state.items():
                cur = self.opt.state[self.param].get(k)
                if isinstance(v, torch.Tensor) and isinstance(cur, torch.Tensor):
                    cur.copy_(v)
                else:
                    self.opt.state[self.param][k] = v
        self.opt.param_groups[0].update(hyper)


class ScalarProbes:
    """The probes of one optimizer: one per parameter group, stepped once per real update.

    Shared by the :class:`OptimizerScalars` of every traced step that updates with this
    optimizer (the plans of several batch shapes), so that they all see one step count.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        The real optimizer; its ``param_groups`` are read at every step.
    device : torch.device, optional
        Where the probes live (CPU; the step's device for ``capturable`` optimizers).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, *,
                 device: torch.device | None = None) -> None:
        self.optimizer = optimizer
        self.name = type(optimizer).__name__
        capturable = any(g.get("capturable") for g in optimizer.param_groups)
        self.device = device if capturable and device is not None else torch.device("cpu")
        self._probes: dict[int, _Probe] = {}
        #: per group, the ATen targets of the traced step's probe call (its code path)
        self.targets: dict[int, list[Any]] = {}
        # the hyper-parameters a fresh optimizer has, which every trace sees (a step traced
        # later, for a new batch shape, starts from the factory too, not from a scheduled lr)
        self._traced_hyper = {gi: _hyper(g) for gi, g in enumerate(optimizer.param_groups)}
        self.steps = 0

    def dtype(self, gi: int) -> torch.dtype:
        params = self.optimizer.param_groups[gi]["params"]
        return params[0].dtype if params else torch.float32

    def reference(self, gi: int) -> list[tuple[Any, Any]]:
        """The calls of group ``gi``'s probe at the traced step (its second step), from a
        fresh probe; registers the group's live probe on first use."""
        traced = self._traced_hyper[gi]
        probe = _Probe(self.optimizer, traced, self.dtype(gi), self.device)
        probe.step()  # the probe's step 1 (its state was reset to fresh)
        ref = probe.step()  # step 2: what the trace saw
        targets = [c[0] for c in ref]
        known = self.targets.setdefault(gi, targets)
        if known != targets:
            raise ExecutorError(f"{self.name}: param_groups[{gi}] takes another code path "
                                "than when the first plan was set up")
        if gi not in self._probes:
            self._probes[gi] = _Probe(self.optimizer, traced, self.dtype(gi), self.device)
        return ref

    def follow(self, optimizer: torch.optim.Optimizer) -> None:
        """Set the probes' scalar state (step counters) from ``optimizer``'s, e.g. after
        ``optimizer.load_state_dict``: per group, from its first parameter with state."""
        for gi, probe in self._probes.items():
            group = optimizer.param_groups[gi]
            real = next((optimizer.state[p] for p in group["params"] if optimizer.state.get(p)),
                        None)
            if real is None:
                continue
            mine = probe.opt.state[probe.param]
            with torch.no_grad():
                for k, v in real.items():
                    if (isinstance(v, torch.Tensor) and v.numel() == 1
                            and isinstance(mine.get(k), torch.Tensor)):
                        mine[k].copy_(v.reshape(mine[k].shape))

    def advance(self) -> dict[int, list[tuple[Any, Any]]]:
        """Step every probe once; returns each group's calls for the coming real step.

        Raises
        ------
        StepMismatchError
            A group's step takes another code path than the traced one; every probe is
            left as it was (nothing changed).
        """
        snaps = {gi: p.snapshot() for gi, p in self._probes.items()}
        recs = {}
        for gi, probe in self._probes.items():
            group = self.optimizer.param_groups[gi]
            calls = probe.step(group)
            if [c[0] for c in calls] != self.targets[gi]:
                for gj, snap in snaps.items():
                    self._probes[gj].restore(snap)
                raise StepMismatchError(self._path_changed(gi, group))
            recs[gi] = calls
        self.steps += 1
        return recs

    def _path_changed(self, gi: int, group: dict[str, Any]) -> str:
        was, now = self._traced_hyper.get(gi, {}), _hyper(group)
        changed = [f"{k} {was.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(was) | set(now))
                   if k != "foreach" and not _same(was.get(k), now.get(k))]
        what = "; ".join(changed) or "its hyper-parameters"
        return (f"{self.name} param_groups[{gi}] now takes another code path than the planned "
                f"step ({what}): its update ops were traced with the old settings. Set them "
                "back, or build a new PlannedStep (its plans trace the new settings).")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and bool(
            a.shape == b.shape and torch.equal(a.detach().cpu(), b.detach().cpu()))
    return bool(a == b)


class OptimizerScalars:
    """Keeps a traced steady step's optimizer scalars equal to eager's at every step.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        The real optimizer (fresh); its ``param_groups`` are read before every step.
    traced : roam_core.trace.TracedStep
        The traced steady step.
    params : sequence of Tensor
        The model's distinct parameters in placeholder order.
    device : torch.device, optional
        Where the probes live (default CPU; the step's device for ``capturable`` optimizers,
        which refuse CPU parameters).
    probes : ScalarProbes, optional
        The optimizer's probes, shared with the steps of other batch shapes (default: new
        ones, owned by this object).

    Attributes
    ----------
    slots : dict
        ``node name -> [(flat argument index, scalar index)]`` for
        :class:`~roam_core.runtime.program.Program`.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, traced: TracedStep,
                 params: Sequence[torch.Tensor], *, device: torch.device | None = None,
                 probes: ScalarProbes | None = None) -> None:
        self.optimizer = optimizer
        self.name = type(optimizer).__name__
        self.probes = probes if probes is not None else ScalarProbes(optimizer, device=device)
        segments = _segments(traced)
        group_of = {id(p): gi for gi, g in enumerate(optimizer.param_groups)
                    for p in g["params"]}
        ph_params = [r.node for r in traced.placeholders if r.kind == TensorKind.PARAMETER]
        param_of = dict(zip(ph_params, params, strict=True))
        # 1. the probe at the traced step (warm step, then one recorded step)
        ref: dict[int, list[tuple[Any, Any]]] = {}
        for gi in {group_of.get(id(param_of[ph]), -1) for ph in segments}:
            if gi < 0:
                raise ExecutorError(f"{self.name}: the traced step updates a parameter that "
                                    "the optimizer does not hold")
            ref[gi] = self.probes.reference(gi)
        # 2. match every update op to a probe call; numeric arguments become slots
        self.slots: dict[str, list[tuple[int, int]]] = {}
        self._src: list[tuple[int, int, int]] = []  # scalar -> (group, call index, leaf)
        self._groups = sorted(ref)
        for ph, nodes in segments.items():
            gi = group_of[id(param_of[ph])]
            self._match(nodes, ref[gi], gi)
        self.values: list[Any] = [None] * len(self._src)

    @property
    def steps(self) -> int:
        """Optimizer steps the probes have taken."""
        return self.probes.steps

    def _match(self, nodes: Sequence[Any], calls: list[tuple[Any, Any]],
               gi: int) -> None:
        ci = 0
        for node in nodes:
            while ci < len(calls) and calls[ci][0] != node.target:
                ci += 1
            if ci == len(calls):
                raise ExecutorError(
                    f"{self.name}: update op {node.name!r} ({node.target}) has no counterpart "
                    "in the optimizer's single-parameter step; PlannedStep needs a "
                    "per-parameter implementation (foreach=False or True, fused=False)")
            leaves = flat_leaves((node.args, dict(node.kwargs)))
            got = flat_leaves(calls[ci][1])
            if len(leaves) != len(got):
                raise ExecutorError(f"{self.name}: update op {node.name!r} has other "
                                    "arguments than the optimizer's own step")
            slots = []
            for k, (a, b) in enumerate(zip(leaves, got, strict=True)):
                if isinstance(a, torch.fx.Node) != isinstance(b, torch.Tensor):
                    raise ExecutorError(f"{self.name}: update op {node.name!r} has other "
                                        "arguments than the optimizer's own step")
                if isinstance(a, (int, float)) and not isinstance(a, bool):
                    if a != b:
                        raise ExecutorError(
                            f"{self.name}: update op {node.name!r} argument {k} is {a!r} in "
                            f"the trace but {b!r} in the optimizer's step")
                    slots.append((k, len(self._src)))
                    self._src.append((gi, ci, k))
            if slots:
                self.slots[node.name] = slots
            ci += 1

    def follow(self, optimizer: torch.optim.Optimizer) -> None:
        """Set the probes' step counters from ``optimizer``'s (:meth:`ScalarProbes.follow`)."""
        self.probes.follow(optimizer)

    def values_of(self, recs: dict[int, list[tuple[Any, Any]]]) -> list[Any]:
        """This step's scalar values from the probes' calls (:meth:`ScalarProbes.advance`)."""
        flat: dict[tuple[int, int], list[Any]] = {}
        for j, (gi, ci, k) in enumerate(self._src):
            leaves = flat.get((gi, ci))
            if leaves is None:
                leaves = flat[(gi, ci)] = flat_leaves(recs[gi][ci][1])
            self.values[j] = leaves[k]
        return self.values

    def advance(self) -> list[Any]:
        """Step the probes once; returns the scalar values of the coming real step."""
        return self.values_of(self.probes.advance())


def _segments(traced: TracedStep) -> dict[str, list[Any]]:
    """Optimizer-phase ATen nodes of each parameter (placeholder name), in program order.

    A node belongs to the parameter whose parameter or state placeholders it reads, directly
    or through earlier optimizer-phase nodes.
    """
    phase = {op.id: op.phase for op in traced.graph.ops}
    owner: dict[str, str] = {}
    by_name = {r.name: r.node for r in traced.placeholders if r.kind == TensorKind.PARAMETER}
    for r in traced.placeholders:
        if r.kind == TensorKind.PARAMETER:
            owner[r.node] = r.node
        elif r.kind == TensorKind.OPTIMIZER_STATE:
            pname = r.name.rpartition(":")[0]
            if pname in by_name:
                owner[r.node] = by_name[pname]
    nodes = []
    for n in traced.gm.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is operator.getitem:
            src = n.args[0]
            if isinstance(src, torch.fx.Node) and src.name in owner:
                owner[n.name] = owner[src.name]
            continue
        if phase.get(n.name) is not Phase.OPTIMIZER:
            continue
        nodes.append(n)
        owners = {owner[a.name] for a in n.all_input_nodes if a.name in owner}
        if len(owners) > 1:
            raise ExecutorError(
                f"optimizer op {n.name!r} ({n.target}) updates several parameters at once; "
                "PlannedStep needs a per-parameter implementation (foreach=False, fused=False)")
        if owners:
            owner[n.name] = owners.pop()
    # ops that only read the gradient (Adamax's |grad| + eps) belong to their readers' owner
    for n in reversed(nodes):
        if n.name not in owner:
            users = {owner[u.name] for u in n.users if u.name in owner}
            if len(users) == 1:
                owner[n.name] = users.pop()
    out: dict[str, list[Any]] = {}
    for n in nodes:
        o = owner.get(n.name)
        if o is None:
            if isinstance(n.target, torch._ops.OpOverload) and any(
                    isinstance(a, float) for a in flat_leaves((n.args, dict(n.kwargs)))):
                raise ExecutorError(f"optimizer op {n.name!r} ({n.target}) belongs to no "
                                    "parameter; PlannedStep cannot follow its scalars")
            continue
        if isinstance(n.target, torch._ops.OpOverload):
            out.setdefault(o, []).append(n)
    return out
