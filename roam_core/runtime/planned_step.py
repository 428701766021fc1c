"""Train with a plan: :class:`PlannedStep` runs forward, backward and update in one arena.

``loss = step(*batch)`` runs the whole training step of a plan, step after step: the ops in
the plan's order, every tensor at its planned offset in one preallocated arena.  The
model's parameters and buffers and the optimizer's state *live in the arena*: after
set-up, each parameter's ``.data`` is its arena slot, and ``optimizer.state[p]`` holds slot
views, so ``model.state_dict()``, ``optimizer.state_dict()`` and ``torch.save`` work as in an
ordinary loop, and the values are always the trained ones.

How a call runs:

1. the batch is checked (shapes, dtypes, non-tensor arguments) before anything is touched,
   then copied into its input slots;
2. the optimizer's per-step Python scalars (bias corrections, a scheduled learning rate)
   are refreshed (:class:`~roam_core.runtime.scalars.OptimizerScalars`);
3. the prepared :class:`~roam_core.runtime.program.Program` runs: *checked* on the first
   call (and on every call with ``verify=True``): errors name the op, every output's
   address, shape and strides are verified; then the *fast* path, a flat list of bound
   kernels writing into preallocated ``out=`` views.

The plan must be made for the ``steady`` trace of this model, batch shapes, loss and
optimizer (``roam trace --setting steady``; ``trace_training_step(..., setting="steady")``):
a steady step reads the optimizer state as an input and writes it back in place, so the same
program serves every step.  The first call starts from a fresh optimizer as an eager loop
does (its state starts at zero, :func:`~roam_core.runtime.scalars.fresh_state`).

On CUDA, ``cuda_graph=True`` captures the fast path in a ``torch.cuda.CUDAGraph`` after the
second call and replays it while the optimizer's scalars stay those of the captured step
(SGD; constant-learning-rate optimizers without bias correction); when they change (Adam's
bias corrections change every step), that call runs the fast path instead.  This path has
not been run on a GPU yet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from roam_core.base.errors import ExecutorError, PlanFormatError
from roam_core.model.graph import TensorKind
from roam_core.runtime.arena_runner import ArenaRunner, RunStats
from roam_core.runtime.device import resolve_device
from roam_core.runtime.plan_checks import check_fingerprint, replayed_step
from roam_core.runtime.scalars import OptimizerScalars, check_supported, fresh_state
from roam_core.trace.optimizers import make_optimizer_factory
from roam_core.trace.params import unique_named_buffers, unique_named_parameters
from roam_core.trace.tracer import trace_fx

if TYPE_CHECKING:
    from roam_core.model.graph import Graph
    from roam_core.model.parallel import ParallelSetting
    from roam_core.model.plan import Plan
    from roam_core.trace.optimizers import OptimizerFactory
    from roam_core.trace.traced_step import PlaceholderRole, TracedStep

__all__ = ["BatchMismatchError", "PlannedStep"]

_logger = logging.getLogger(__name__)


class BatchMismatchError(ExecutorError):
    """A batch whose shapes, dtypes or non-tensor arguments differ from the traced ones."""


class PlannedStep:
    """A training step that runs a plan in one arena, called once per batch.

    Parameters
    ----------
    model : nn.Module
        The model, with real parameters (on any device; they move into the arena).  It is
        trained in place: its parameters and buffers become views of their arena slots.
    plan : Plan
        A plan for the ``steady`` trace of exactly this step (fingerprint checked).
    loss_fn : callable, optional
        ``loss = loss_fn(model(*batch))``; ``None``: the model returns the loss.
    optimizer : {"adamw", "adam", "sgd"} or callable, optional
        A name (defaults as in :func:`roam_core.trace.trace_training_step`) or a factory
        ``params -> Optimizer`` (single-tensor: ``foreach=False``).  Built fresh here and
        exposed as :attr:`optimizer` (a scheduler may change its learning rate).
    example_inputs : sequence, optional
        Positional inputs of the traced shapes (real or meta); default: the first batch.
    device : {"cpu", "cuda"}
        Where the arena lives.
    graph : Graph, optional
        The graph the plan was made for: only used to say what differs when the plan does
        not fit this model.
    verify : bool
        Check every call (addresses, strides), not only the first.
    cuda_graph : bool
        CUDA only: capture and replay the step as a CUDA graph (see the module notes).
    parallel : ParallelSetting, optional
        The step of one data-parallel rank (``docs/parallel.md``): ``model`` holds the rank's
        shards (:func:`roam_core.trace.parallel.shard_model`) and a process group of
        ``parallel.world_size`` ranks is initialised; every rank runs the same plan.
    precision : str
        The precision the plan's graph was traced in.
    **optimizer_kwargs
        Hyper-parameters for a named optimizer.

    Raises
    ------
    PlanFormatError
        The plan was made for another graph (other model, parameters, batch shapes, loss,
        optimizer or device).
    PlanInvalidError
        The plan's order breaks a dependency of the step.
    ExecutorError
        Meta parameters, an unsupported optimizer, no CUDA device, or a failed op.

    Examples
    --------
    >>> import torch, torch.nn.functional as F
    >>> from roam_core import make_plan, trace_training_step, PlannerConfig
    >>> class Net(torch.nn.Module):
    ...     def __init__(self): super().__init__(); self.fc = torch.nn.Linear(4, 2)
    ...     def forward(self, x, y): return F.mse_loss(self.fc(x), y)
    >>> net, x, y = Net(), torch.randn(3, 4), torch.randn(3, 2)
    >>> graph = trace_training_step(net, [x, y], optimizer="sgd")
    >>> plan = make_plan(graph, PlannerConfig(workers=1, solve_layout=False), method="eager")
    >>> step = PlannedStep(net, plan, optimizer="sgd", example_inputs=[x, y])
    >>> losses = [step(x, y) for _ in range(3)]      # the loss falls
    >>> bool(losses[2] < losses[0]), net.fc.weight.data_ptr() >= step.runner.base
    (True, True)
    """

    def __init__(self, model: nn.Module, plan: Plan,
                 loss_fn: Callable[[Any], torch.Tensor] | None = None,
                 optimizer: str | OptimizerFactory | None = None, *,
                 example_inputs: Sequence[Any] | None = None,
                 device: str | torch.device = "cpu", graph: Graph | None = None,
                 verify: bool = False,
                 cuda_graph: bool = False, parallel: ParallelSetting | None = None,
                 precision: str = "fp32", **optimizer_kwargs: Any) -> None:
        self.model, self.plan, self.loss_fn = model, plan, loss_fn
        self.device = resolve_device(device)
        self.verify = bool(verify)
        self.cuda_graph = bool(cuda_graph)
        if self.cuda_graph and (self.device.type != "cuda"
                                or not hasattr(torch.cuda, "CUDAGraph")):
            raise ExecutorError("cuda_graph=True needs device='cuda' and torch.cuda.CUDAGraph")
        self._optimizer_spec, self._optimizer_kwargs = optimizer, optimizer_kwargs
        self._graph_hint = graph
        self._parallel, self._precision = parallel, precision
        self.calls = 0
        self.optimizer: torch.optim.Optimizer | None = None
        self._ready = False
        self._capture: Any = None
        if example_inputs is not None:
            self._setup(example_inputs)

    # ------------------------------------------------------------------ set-up
    def _setup(self, example_inputs: Sequence[Any]) -> None:
        model, dev = self.model, self.device
        named_params = unique_named_parameters(model)
        named_buffers = unique_named_buffers(model)
        metas = [n for n, t in named_params + named_buffers if t.is_meta]
        if metas:
            raise ExecutorError(
                f"{type(model).__name__} has {len(metas)} parameters/buffers on the meta device "
                f"({metas[0]}, ...): give PlannedStep a model with real values (e.g. "
                "model.to_empty(device=...) and initialise it)")
        # 1. everything that can fail, before anything changes
        factory, traced = self._traced(example_inputs)
        params = [p for _, p in named_params]
        buffers = [b for _, b in named_buffers]
        opt = factory(params)
        check_supported(opt)
        scalars = OptimizerScalars(opt, traced, params, device=dev)
        runner = ArenaRunner(traced.gm, traced.graph, traced.values, self.plan.offsets,
                             self.plan.arena_bytes, dev, check_addresses=True, rng=traced.rng)
        if self.cuda_graph and runner.rng.active:  # before anything changes
            raise ExecutorError(
                "cuda_graph=True: this step rewinds the RNG (torch.utils.checkpoint with "
                "dropout, or a recompute plan that re-draws dropout masks), and setting a "
                "generator's state cannot be captured in a CUDA graph; "
                "use cuda_graph=False")
        program = runner.program(self.plan.order, scalar_slots=scalars.slots)
        if self.cuda_graph and runner.off_device:
            raise ExecutorError(
                f"cuda_graph=True: the step has {len(runner.off_device)} tensors off the GPU "
                f"(e.g. {runner.off_device[0]!r}, such as Adam's CPU step counters), whose "
                "updates a CUDA graph would not replay; use capturable=True or SGD")
        # 2. residents into the arena: parameters, buffers, fresh optimizer state
        roles = list(traced.placeholders)
        residents = params + buffers
        state_keys = _load_residents(runner, roles, residents, len(params), opt)
        # 3. the model and the optimizer now hold their arena slots
        with torch.no_grad():
            for r, t in zip(roles[:len(residents)], residents, strict=True):
                t.data = runner.read(r.node)
        for p, key, node in state_keys:
            opt.state[p][key] = runner.read(node)
        self.traced, self.runner, self.program, self.scalars = traced, runner, program, scalars
        self.optimizer = opt
        self._state_keys = state_keys
        self._residents = [(t, r.node) for r, t in zip(roles[:len(residents)], residents,
                                                       strict=True)]
        self._inputs = [r.node for r in roles if r.kind == TensorKind.INPUT]
        self._example = list(example_inputs)
        self._ready = True

    def _traced(self, example_inputs: Sequence[Any]) -> tuple[OptimizerFactory, TracedStep]:
        """The optimizer factory and the traced step the plan replays (checked against it)."""
        _, factory = make_optimizer_factory(self._optimizer_spec, "steady",
                                            **self._optimizer_kwargs)
        traced = trace_fx(self.model, example_inputs, self.loss_fn, factory, setting="steady",
                          device=self.device, parallel=self._parallel,
                          precision=self._precision)
        try:
            check_fingerprint(traced.graph, self.plan)
        except PlanFormatError as e:
            raise PlanFormatError(_mismatch(traced, self._graph_hint) or str(e)) from None
        return factory, replayed_step(traced, self.plan)

    # ------------------------------------------------------------------ calls
    def _check_batch(self, batch: Sequence[Any]) -> list[torch.Tensor]:
        if len(batch) != len(self._example):
            raise BatchMismatchError(f"the step was traced with {len(self._example)} inputs, "
                                     f"got {len(batch)}")
        tensors = []
        for i, (x, ex) in enumerate(zip(batch, self._example, strict=True)):
            if isinstance(ex, torch.Tensor):
                if not isinstance(x, torch.Tensor):
                    raise BatchMismatchError(f"input {i}: expected a tensor, got "
                                             f"{type(x).__name__}")
                if tuple(x.shape) != tuple(ex.shape) or x.dtype != ex.dtype:
                    raise BatchMismatchError(
                        f"input {i}: got {tuple(x.shape)} {x.dtype}, the plan was made for "
                        f"{tuple(ex.shape)} {ex.dtype} (plan another batch shape)")
                tensors.append(x)
            elif not (x is ex or x == ex):
                raise BatchMismatchError(f"input {i}: got {x!r}, the step was traced with "
                                         f"{ex!r} (non-tensor inputs are part of the trace)")
        return tensors

    def __call__(self, *batch: Any) -> torch.Tensor:
        """Run one training step on ``batch``; returns the loss (a new tensor)."""
        if not self._ready:
            self._setup(batch)
        tensors = self._check_batch(batch)
        env = self.runner.env
        with torch.no_grad():
            self._sync(env)
            for node, x in zip(self._inputs, tensors, strict=True):
                env[node].copy_(x)
            self.program.scalars[:] = self.scalars.advance()
            if self.calls == 0 or self.verify:
                out = self.program.run_checked(env)
            else:
                out = self._run_fast(env)
        self.calls += 1
        # the optimizer stepped (inside the program): tell an LR scheduler, which otherwise
        # warns that its step() came before optimizer.step()
        self.optimizer._opt_called = True  # type: ignore[union-attr]  # set by _setup
        loss = out[0] if isinstance(out, (list, tuple)) else out
        return loss.detach().clone()

    def _sync(self, env: dict[str, Any]) -> None:
        """Take in values the user put in place of the arena views since the last call.

        ``optimizer.load_state_dict`` (resuming from a checkpoint) replaces the state
        tensors, ``p.data = t`` a parameter's: their values are copied into the slots and the
        views put back; the probe's step counters follow a loaded state.
        """
        opt = self.optimizer
        assert opt is not None
        loaded = False
        for p, key, node in self._state_keys:
            cur = opt.state.get(p, {}).get(key)
            slot = env[node]
            if cur is slot:
                continue
            if not isinstance(cur, torch.Tensor) or cur.shape != slot.shape:
                raise ExecutorError(
                    f"optimizer state {key!r} of a parameter of shape {tuple(p.shape)} was "
                    f"replaced by {type(cur).__name__} "
                    f"{tuple(cur.shape) if isinstance(cur, torch.Tensor) else ''}: PlannedStep "
                    "needs the state the plan was traced with")
            slot.copy_(cur)
            opt.state[p][key] = slot
            loaded = True
        for t, node in self._residents:
            slot = env[node]
            if t.data_ptr() != slot.data_ptr():
                if t.shape != slot.shape or t.dtype != slot.dtype:
                    raise ExecutorError(f"a parameter or buffer of shape {tuple(slot.shape)} "
                                        f"was replaced by one of shape {tuple(t.shape)}")
                slot.copy_(t.detach())
                t.data = slot
        if loaded:
            self.scalars.follow(opt)

    def _run_fast(self, env: dict[str, Any]) -> Any:
        if not self.cuda_graph:
            return self.program.run_fast(env)
        values = list(self.program.scalars)
        cap = self._capture
        if cap is None and self.calls >= 2:  # warmed up by two eager-mode calls
            graph = torch.cuda.CUDAGraph()
            torch.cuda.synchronize(self.device)
            with torch.cuda.graph(graph):
                out = self.program.run_fast(env)
            self._capture = cap = (graph, values, out)
            graph.replay()  # capturing records the kernels without running them
            return out
        if cap is not None and cap[1] == values:
            cap[0].replay()
            return cap[2]
        return self.program.run_fast(env)

    # ------------------------------------------------------------------ facts
    @property
    def arena_bytes(self) -> int:
        """Bytes of the one arena (parameters, state, batch and every planned tensor)."""
        return int(self.plan.arena_bytes)

    def stats(self) -> RunStats:
        """:class:`~roam_core.runtime.arena_runner.RunStats` of the prepared program."""
        p = self.program
        return RunStats(p.counts["out"], p.counts["factory"], p.counts["fallback"],
                        p.extra_peak, p.extra_total, tuple(p.fallback_targets),
                        p.checked_values)


def _load_residents(runner: ArenaRunner, roles: Sequence[PlaceholderRole],
                    residents: Sequence[torch.Tensor], n_params: int,
                    opt: torch.optim.Optimizer) -> list[tuple[nn.Parameter, str, str]]:
    """Copy the parameters and buffers into their slots, fresh optimizer state and zero
    batch inputs into theirs, then the constants; returns ``(param, state key, node)`` of
    every optimizer-state slot."""
    param_of = {r.name: p for r, p in zip(roles[:n_params], residents[:n_params], strict=True)}
    state_keys: list[tuple[nn.Parameter, str, str]] = []
    with torch.no_grad():
        for r, t in zip(roles[:len(residents)], residents, strict=True):
            runner.load_resident(r.node, t.detach())
        for r in roles[len(residents):]:
            fake = runner.nodes[r.node].meta["val"]
            like = torch.zeros(fake.shape, dtype=fake.dtype)
            if r.kind == TensorKind.OPTIMIZER_STATE:
                pname, _, key = r.name.rpartition(":")
                p = param_of[pname]
                runner.load_resident(r.node, fresh_state(opt, p, key, like))
                state_keys.append((p, key, r.node))
            else:  # batch inputs: filled by every call
                runner.load_resident(r.node, like)
    runner.load_constants()
    return state_keys


def _mismatch(traced: TracedStep, graph: Graph | None) -> str | None:
    """What differs between this model's step and the plan's graph, in user terms."""
    if graph is None:
        return None
    mine, theirs = traced.graph, graph
    for r in traced.placeholders:
        a = mine.tensors.get(r.node)
        b = theirs.tensors.get(r.node)
        what = {TensorKind.PARAMETER: "parameter", TensorKind.BUFFER: "buffer",
                TensorKind.OPTIMIZER_STATE: "optimizer state",
                TensorKind.INPUT: "input"}.get(r.kind, "value")
        if b is None:
            return (f"the plan's graph ({theirs.name!r}) has no {what} {r.name!r}: the plan "
                    "was made for another model or optimizer")
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            return (f"{what} {r.name!r} is {a.shape} {a.dtype} here but {b.shape} {b.dtype} "
                    f"in the plan's graph ({theirs.name!r})")
    if len(mine.tensors) != len(theirs.tensors) or len(mine) != len(theirs):
        return (f"this step has {len(mine)} ops and {len(mine.tensors)} storages, the plan's "
                f"graph ({theirs.name!r}) {len(theirs)} and {len(theirs.tensors)}: the model, "
                "loss, optimizer or setting differ (PlannedStep runs steady-setting plans)")
    return None
