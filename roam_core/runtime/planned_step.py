"""Train with a plan: :class:`PlannedStep` runs forward, backward and update in one arena.

``loss = step(*batch)`` runs the whole training step of a plan, step after step: the ops in
the plan's order, every tensor at its planned offset.  The model's parameters and buffers
and the optimizer's state live in one buffer of their own
(:class:`~roam_core.runtime.resident_store.ResidentStore`): after set-up each parameter's
``.data`` is its slot and ``optimizer.state[p]`` holds slot views, so ``state_dict()``,
``optimizer.state_dict()`` and ``torch.save`` work as in an ordinary loop.  Everything else a
step allocates lives in one workspace the plans of all batch shapes share.

Never silently different: a call either computes what the eager loop computes (bit for bit
on CPU) or raises a :class:`~roam_core.runtime.step_context.StepMismatchError` saying what
changed and what to do, *before* anything changed.  Checked at every call:

1. the model was not trained by another ``PlannedStep`` since this one's last call (their
   optimizer states differ);
2. the :class:`~roam_core.runtime.step_context.StepContext`: autocast, ``requires_grad``,
   ``training``, torch.nn module settings, the tensors trained, the optimizer's flags;
3. gradients: nobody assigned a ``.grad`` by hand (after a call every trained parameter's
   ``.grad`` is an :class:`~roam_core.runtime.absent_grads.AbsentGrad` that raises when
   read, e.g. by ``clip_grad_norm_``: pass ``max_grad_norm=`` instead);
4. the batch: a shape with no plan yet is traced and planned once (a
   :class:`~roam_core.runtime.step_plans.NewShapeWarning`), or refused with
   ``on_new_shape="error"``; non-tensor arguments must equal the first batch's;
5. the optimizer's code path (:class:`~roam_core.runtime.scalars.ScalarProbes`).

Then the user's writes since the last call are taken in (``p.data = t``,
``optimizer.load_state_dict``), the batch is copied into its slots, the optimizer's per-step
scalars are set, and the variant's prepared :class:`~roam_core.runtime.program.Program`
runs: *checked* on its first call (every output's address, shape and strides), then the
fast path.  Autocast is off while it runs: the plan's ops already carry the casts they were
traced with.

Precision (``precision=``, as the step was traced; :mod:`roam_core.trace.precision`):
``bf16-mixed`` and ``fp16-mixed`` run the traced casts of autocast (nothing to set up);
``bf16`` casts the model's floating parameters and buffers to bf16 in place at set-up (as
``model.to(torch.bfloat16)``) and each batch's floating tensors as they are copied in;
``fp16-mixed`` keeps a ``torch.amp.GradScaler`` (:attr:`PlannedStep.scaler`) whose scale
lives in the step's buffer: a step whose gradients hold inf/NaN skips the update and backs
the scale off, as ``scaler.step(optimizer); scaler.update()`` does (:attr:`skipped`).
With ``max_grad_norm`` or ``accumulation_steps`` the update call unscales the summed
gradients once (``scaler.unscale_(optimizer)``) before the clip, as an eager fp16 loop does.

Plans must be made for the ``steady`` trace (``trace_training_step(..., setting="steady")``);
the first call starts from a fresh optimizer as an eager loop does
(:func:`~roam_core.runtime.scalars.fresh_state`).  On CUDA, ``cuda_graph=True`` captures a
variant's fast path after its second call and replays it while the optimizer's scalars
stay those of the captured step; not yet run on a GPU.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from roam_core.base.checks import require_type
from roam_core.base.errors import ExecutorError, PlanFormatError
from roam_core.model.graph import TensorId, TensorKind
from roam_core.model.plan import Plan
from roam_core.runtime.absent_grads import GradGuard
from roam_core.runtime.arena_runner import ArenaRunner, RunStats
from roam_core.runtime.device import resolve_device
from roam_core.runtime.plan_checks import check_fingerprint, replayed_step
from roam_core.runtime.resident_store import SHARED_KINDS, ResidentStore
from roam_core.runtime.scalars import OptimizerScalars, ScalarProbes, check_supported
from roam_core.runtime.step_context import StepContext, StepMismatchError
from roam_core.runtime.step_plans import (
    BatchMismatchError,
    StepPlans,
    Variant,
    VariantKey,
    batch_key,
    check_batch,
    shared_nodes,
    workspace_bytes,
)
from roam_core.trace.optimizers import make_optimizer_factory
from roam_core.trace.params import unique_named_buffers, unique_named_parameters
from roam_core.trace.precision import (
    StepPrecision,
    ready_grad_scaler,
    resolve_precision,
    scaler_settings,
)
from roam_core.trace.step_spec import StepSpec
from roam_core.trace.tracer import trace_fx

if TYPE_CHECKING:
    from roam_core.model.graph import Graph
    from roam_core.model.parallel import ParallelSetting
    from roam_core.runtime.program import Program
    from roam_core.trace.optimizers import OptimizerFactory
    from roam_core.trace.traced_step import TracedStep

__all__ = ["BatchMismatchError", "PlannedStep"]

_logger = logging.getLogger(__name__)
#: ``model.__dict__`` key naming the PlannedStep that last trained the model.
_OWNER = "_roam_planned_step"


class PlannedStep:
    """A training step that runs plans in one arena, called once per batch (micro-batch).

    Parameters
    ----------
    model : nn.Module
        The model, with real parameters (on any device; they move into the step's buffer).
        It is trained in place: its parameters and buffers become views of their slots.
    plan : Plan, sequence of Plan, or None
        Plans for the ``steady`` trace of this step (matched by graph fingerprint).  The
        first batch (``example_inputs``) must match one of them; other shapes are planned
        on first use.  ``None``: every shape is planned on first use (or taken from the
        plan cache).
    loss_fn : callable, optional
        ``loss = loss_fn(model(*batch))``; ``None``: the model returns the loss.
    optimizer : {"adamw", "adam", "sgd"} or callable, optional
        A name (defaults as in :func:`roam_core.trace.trace_training_step`) or a factory
        ``params -> Optimizer`` (SGD without dampening, Adam, AdamW, Adamax, RMSprop,
        Adagrad; ``foreach`` True or False; ``fused=True`` is refused).  Built fresh here
        and exposed as :attr:`optimizer` (a scheduler may change its learning rate).
    example_inputs : sequence, optional
        Positional inputs of the first shape (real or meta); default: the first batch.
    device : {"cpu", "cuda"}
        Where the step runs.
    graph : Graph, optional
        The graph the plan was made for: only used to say what differs when the plan does
        not fit this model.
    verify : bool
        Check every call (addresses, strides), not only each variant's first.
    cuda_graph : bool
        CUDA only: capture and replay each variant as a CUDA graph (see the module notes).
    max_grad_norm : float, optional
        Clip the gradients' total 2-norm to this inside the step, as
        ``torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)`` before
        ``optimizer.step()`` (:attr:`last_grad_norm` is the norm it returned).
    accumulation_steps : int
        Micro-batches per optimizer step: each call takes one micro-batch; the k-th call
        also clips and updates (:mod:`roam_core.trace.step_spec` names the eager loop).
    on_new_shape : {"plan", "error"}
        A batch shape with no plan: trace and plan it once (warning), or refuse it.
    planner : PlannerConfig or callable, optional
        How new shapes are planned (:class:`~roam_core.runtime.step_plans.StepPlans`).
    plan_cache : str, path-like, False or None
        Directory of cached plans (``None``: :func:`~roam_core.formats.plan_cache.
        default_cache_dir`; ``False``: no disk cache).  Only plans made here are written.
    precision : {"fp32", "bf16-mixed", "bf16", "fp16-mixed"}
        The precision the plans' step was traced in (see the module notes); ``fp16-mixed``
        not with clipping or accumulation yet.  With ``parallel``: ``fp32``, and with FSDP
        ``bf16-mixed`` (FSDP2's mixed precision policy); others raise ``ConfigError``.
    merge_casts : bool
        Trace the step with autocast's repeated casts of one activation made once
        (:mod:`roam_core.trace.identical_casts`; bit-identical values, fewer bytes), as
        ``roam trace --merge-casts``: the plans must be made for that step (a plan of the
        other setting is refused with a :class:`PlanFormatError` naming it).
    grad_scaler : torch.amp.GradScaler, optional
        ``fp16-mixed``: the user's scaler (``init_scale``, ``growth_factor``,
        ``backoff_factor``, ``growth_interval``); it becomes :attr:`scaler`, its scale and
        growth tracker are loaded into the step's buffer.  Default: torch's defaults.
    parallel : ParallelSetting, optional
        The step of one data-parallel rank (``docs/parallel.md``): ``model`` holds the rank's
        shards (:func:`roam_core.trace.parallel.shard_model`) and a process group of
        ``parallel.world_size`` ranks is initialised; every rank runs the same plan (no
        clipping or accumulation yet: ``ConfigError``).
    **optimizer_kwargs
        Hyper-parameters for a named optimizer.

    Raises
    ------
    PlanFormatError
        The plans were made for another graph (other model, parameters, batch shapes, loss,
        optimizer, precision, clipping or device).
    PlanInvalidError
        A plan's order breaks a dependency of the step.
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
    >>> bool(losses[2] < losses[0]), step.holds(net.fc.weight)
    (True, True)
    """

    def __init__(self, model: nn.Module, plan: Plan | Sequence[Plan] | None = None,
                 loss_fn: Callable[[Any], torch.Tensor] | None = None,
                 optimizer: str | OptimizerFactory | None = None, *,
                 example_inputs: Sequence[Any] | None = None,
                 device: str | torch.device = "cpu", graph: Graph | None = None,
                 verify: bool = False, cuda_graph: bool = False,
                 max_grad_norm: float | None = None, accumulation_steps: int = 1,
                 on_new_shape: str = "plan", planner: Any = None,
                 plan_cache: Any = None, precision: str = "fp32",
                 parallel: ParallelSetting | None = None, grad_scaler: Any = None,
                 merge_casts: bool = False, **optimizer_kwargs: Any) -> None:
        require_type(model, nn.Module, "PlannedStep: model")
        given: list[Plan] = ([] if plan is None else [plan] if isinstance(plan, Plan)
                             else _plan_list(plan))
        if parallel is not None and parallel.active:
            _check_parallel(parallel, resolve_precision(precision).name, max_grad_norm,
                            accumulation_steps)
        self.model, self.loss_fn = model, loss_fn
        self.device = resolve_device(device)
        self.precision = resolve_precision(precision)
        self._merge_casts = bool(merge_casts)
        #: autocast and, for ``fp16-mixed``, the grad scaler (its state in the step's buffer)
        settings = scaler_settings(grad_scaler, self.precision)
        self.mixed = StepPrecision(self.precision, self.device, scaler=(
            None if grad_scaler is None else ready_grad_scaler(grad_scaler, self.device)))
        self.verify = bool(verify)
        self.cuda_graph = bool(cuda_graph)
        if self.cuda_graph and (self.device.type != "cuda"
                                or not hasattr(torch.cuda, "CUDAGraph")):
            raise ExecutorError("cuda_graph=True needs device='cuda' and torch.cuda.CUDAGraph")
        self.spec = StepSpec(max_grad_norm, accumulation_steps, grad_scaler=settings)
        self._plans = StepPlans(given, planner, _cache(plan_cache), on_new_shape)
        self._optimizer_spec, self._optimizer_kwargs = optimizer, optimizer_kwargs
        self._graph_hint = graph
        self._parallel = parallel
        self.calls = 0
        #: the micro-batch the next call takes (0 .. accumulation_steps - 1)
        self.micro_batch = 0
        self.optimizer: torch.optim.Optimizer | None = None
        #: the total gradient norm of the last update (``max_grad_norm`` set), else None
        self.last_grad_norm: torch.Tensor | None = None
        self.variants: dict[VariantKey, Variant] = {}
        self._ready = False
        self._token = object()
        self._last: Variant | None = None
        self._active: Variant | None = None
        self._workspace: torch.Tensor | None = None
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
        _, self._factory = make_optimizer_factory(self._optimizer_spec, "steady",
                                                  **self._optimizer_kwargs)
        params = [p for _, p in named_params]
        check_supported(self._factory(params))
        self._example = list(example_inputs)
        phases = ("accumulate", "update") if self.spec.accumulates else ("step",)
        traced = [self._trace(self._example, ph) for ph in phases]
        found = [self._plans.lookup(t[1].graph) for t in traced]
        if self._plans.given and not any(f is not None and f[1] == "given" for f in found):
            raise PlanFormatError(self._first_mismatch(traced[-1][1], phases[-1]))
        # the step's dtypes (``bf16``; the optimizer and its probes see them): a cast keeps
        # the parameter objects but replaces the buffers
        self.precision.cast_module(model)
        named_buffers = unique_named_buffers(model)
        opt = self._factory(params)
        self._named_params, self._named_buffers = named_params, named_buffers
        self._params = params
        self.optimizer = opt
        self._probes = ScalarProbes(opt, device=dev)
        firsts = [self._new_variant(*t, found=f) for t, f in zip(traced, found, strict=True)]
        self.context = StepContext.capture(model, named_params, opt, dev)
        # 2. the shared values: parameters, buffers, fresh optimizer state, accumulators
        store = ResidentStore(firsts[0].traced, dev)
        store.load(named_params, named_buffers, opt)
        store.bind(named_params, named_buffers, opt)
        self.mixed.set_state(store.scaler_slots(self.mixed.state()))
        self.store = store
        self._grads = GradGuard(named_params)
        self._ready = True

    def _first_mismatch(self, traced: TracedStep, phase: str) -> str:
        plan = next(iter(self._plans.given.values()))
        try:
            check_fingerprint(traced.graph, plan)
        except PlanFormatError as e:
            return (self._merge_mismatch(phase) or _mismatch(traced, self._graph_hint)
                    or str(e))
        return "the plans given match no step of this model"  # pragma: no cover

    def _merge_mismatch(self, phase: str) -> str | None:
        """The plans' step merged autocast's casts and this one not (or the reverse): said
        from the graph given, else found by tracing the step with the other setting."""
        other = not self._merge_casts
        hint = self._graph_hint
        if hint is not None:
            differs = bool(hint.origin.get("merge_casts", False)) == other
        else:  # only on the error path: one more trace names the setting that differs
            _, alt, _ = self._trace(self._example, phase, merge_casts=other)
            differs = alt.graph.fingerprint() in self._plans.given
        if not differs:
            return None
        made = "with" if other else "without"
        return (f"the plan was made for this step traced {made} merged casts (merge_casts="
                f"{other}) but this PlannedStep has merge_casts={self._merge_casts}: build it "
                f"with merge_casts={other} ({'add' if other else 'leave out'} --merge-casts "
                "in `roam train`), or plan the step as traced here")

    @property
    def merge_casts(self) -> bool:
        """Whether the step makes autocast's repeated casts once (set when built: the plans
        are made for that step)."""
        return self._merge_casts

    def _trace(self, batch: Sequence[Any], phase: str,
               merge_casts: bool | None = None) -> tuple[VariantKey, TracedStep, float]:
        """The step traced for ``batch`` and the micro-batch ``phase`` (``merge_casts``:
        default the step's own setting)."""
        t0 = time.perf_counter()
        merge = self._merge_casts if merge_casts is None else merge_casts
        traced = trace_fx(self.model, batch, self.loss_fn, self._factory, setting="steady",
                          device=self.device, spec=self.spec.for_phase(phase),
                          precision=self.precision, parallel=self._parallel,
                          merge_casts=merge)
        return batch_key(batch, phase), traced, time.perf_counter() - t0

    def _new_variant(self, key: VariantKey, traced: TracedStep, trace_s: float, *,
                     found: tuple[Plan, str] | None = None, asked: bool = False) -> Variant:
        """The variant of a traced step: its plan found or made, replay and scalars set up
        (``asked``: a shape the user asked for, planned whatever ``on_new_shape`` says)."""
        plan, how = found or self._plans.plan_for(traced.graph, key.describe(), trace_s,
                                                  asked=asked or not self._ready)
        check_fingerprint(traced.graph, plan)
        replayed = replayed_step(traced, plan)
        scalars = None
        if replayed.spec.updates:
            assert self.optimizer is not None  # built by _setup before any variant
            scalars = OptimizerScalars(self.optimizer, replayed, self._params,
                                       device=self.device, probes=self._probes)
        if self.cuda_graph and replayed.rng.has_jumps:
            raise ExecutorError(
                "cuda_graph=True: this step rewinds the RNG (torch.utils.checkpoint with "
                "dropout, or a recompute plan that re-draws dropout masks), and setting a "
                "generator's state cannot be captured in a CUDA graph; use cuda_graph=False")
        shared = shared_nodes(replayed, SHARED_KINDS)
        v = Variant(key, replayed, plan, scalars, workspace_bytes(replayed, plan, shared),
                    [r.node for r in replayed.placeholders if r.kind == TensorKind.INPUT],
                    how=how)
        v.extra["trace_seconds"] = trace_s
        self.variants[key] = v
        return v

    # ------------------------------------------------------------------ calls
    def __call__(self, *batch: Any) -> torch.Tensor:
        """Run one training step (one micro-batch) on ``batch``; returns its loss."""
        if not self._ready:
            self._setup(batch)
        variant, tensors, cleared = self._checked(batch)
        assert self.optimizer is not None
        recs = None
        with torch.no_grad():
            if self.store.sync(self.optimizer):
                self._probes.follow(self.optimizer)
            if variant.updates:
                recs = self._probes.advance()  # undone and raised on another code path
            # ---- from here on the call changes the step's state
            self._reset_cleared(cleared)
            runner, program = self._activate(variant)
            env = runner.env
            for node, x in zip(variant.inputs, tensors, strict=True):
                env[node].copy_(x)
            if variant.scalars is not None and recs is not None:
                program.scalars[:] = variant.scalars.values_of(recs)
            with _autocast_off(self.device):
                if variant.calls == 0 or self.verify:
                    out = program.run_checked(env)
                else:
                    out = self._run_fast(variant, env)
        variant.calls += 1
        self.calls += 1
        self._last = variant
        self.micro_batch = (self.micro_batch + 1) % self.spec.accumulation_steps
        self.model.__dict__[_OWNER] = self._token
        self._grads.install()
        outs = out if isinstance(out, (list, tuple)) else [out]
        if program.skipped:  # the grad scaler found inf/NaN: no update, no step count
            self._probes.follow(self.optimizer)
        if variant.updates:
            # the optimizer stepped (inside the program): tell an LR scheduler, which
            # otherwise warns that its step() came before optimizer.step()
            self.optimizer._opt_called = True  # type: ignore[attr-defined]  # torch's flag
            if len(outs) > 1:
                self.last_grad_norm = outs[1].detach().clone()
        return outs[0].detach().clone()

    def _checked(self, batch: Sequence[Any]) -> tuple[Variant, list[torch.Tensor], list[int]]:
        """Every check of a call (module notes 1-4); changes nothing but the plans."""
        owner = self.model.__dict__.get(_OWNER)
        if owner is not None and owner is not self._token and self.calls:
            raise StepMismatchError(
                "this model was trained by another PlannedStep since this one's last call: "
                "their optimizer states differ, so going on here would train with stale "
                "moments. Use one PlannedStep for every batch shape (it plans new shapes on "
                "first use and shares one optimizer), or go on with the other one")
        self.context.check(self.optimizer)
        cleared = self._grads.cleared()
        tensors = check_batch(batch, self._example)
        phase = self.spec.phase if not self.spec.accumulates else (
            "update" if self.micro_batch == self.spec.accumulation_steps - 1 else "accumulate")
        key = batch_key(batch, phase)
        variant = self.variants.get(key)
        if variant is None:
            variant = self._new_variant(*self._trace(batch, phase))
        return variant, tensors, cleared

    def _reset_cleared(self, cleared: list[int]) -> None:
        """Eager semantics of ``zero_grad`` between micro-batches: the partial sums of the
        cleared parameters are dropped (``None``: ``-0.0``; ``zero_()``: ``+0.0``)."""
        if not cleared or not self.spec.accumulates or self.micro_batch == 0:
            return
        accs = self.store.accumulators()
        for i in cleared:
            name, p = self._grads.params[i]
            acc = accs.get(name)
            if acc is not None:
                zeroed = getattr(self._grads.markers[i], "zeroed", False) and p.grad is not None
                acc.fill_(0.0 if zeroed else -0.0)

    def _activate(self, v: Variant) -> tuple[ArenaRunner, Program]:
        """The variant's runner over the store and the shared workspace (built on first use,
        rebuilt when the workspace grew); its constants reloaded when another variant ran."""
        ws = self._workspace
        if ws is None or ws.numel() < v.workspace_bytes:
            self._workspace = torch.empty(max(v.workspace_bytes, 1), dtype=torch.uint8,
                                          device=self.device)
            for each in self.variants.values():
                each.drop_runner()
            self._active = None
        if v.runner is None or v.program is None:
            external, other = self.store.slots_for(v.traced)
            runner = ArenaRunner(v.traced.gm, v.traced.graph, v.traced.values, v.plan.offsets,
                                 v.plan.arena_bytes, self.device, check_addresses=True,
                                 rng=v.traced.rng, amp=v.traced.amp, external=external,
                                 workspace=self._workspace)
            if self.cuda_graph and runner.off_device:
                raise ExecutorError(
                    f"cuda_graph=True: the step has {len(runner.off_device)} tensors off the GPU "
                    f"(e.g. {runner.off_device[0]!r}, such as Adam's CPU step counters), whose "
                    "updates a CUDA graph would not replay; use capturable=True or SGD")
            _bind(runner, v.traced, external, other)
            slots = v.scalars.slots if v.scalars is not None else None
            v.program = runner.program(v.plan.order, scalar_slots=slots)
            v.runner = runner
            v.calls = 0  # its first run is checked
        elif self._active is not v:
            v.runner.load_constants(again=True)
        self._active = v
        return v.runner, v.program

    def _run_fast(self, v: Variant, env: dict[str, Any]) -> Any:
        assert v.program is not None
        if not self.cuda_graph:
            return v.program.run_fast(env)
        values = list(v.program.scalars)
        cap = v.capture
        if cap is None and v.calls >= 2:  # warmed up by two eager-mode calls
            graph = torch.cuda.CUDAGraph()
            torch.cuda.synchronize(self.device)
            with torch.cuda.graph(graph):
                out = v.program.run_fast(env)
            v.capture = cap = (graph, values, out)
            graph.replay()  # capturing records the kernels without running them
            return out
        if cap is not None and cap[1] == values:
            cap[0].replay()
            return cap[2]
        return v.program.run_fast(env)

    def prepare(self, *batch: Any) -> None:
        """Trace and plan (or load) the step for a batch of this shape without training."""
        if not self._ready:
            self._setup(batch)
        phases = ("accumulate", "update") if self.spec.accumulates else (self.spec.phase,)
        for ph in phases:
            if batch_key(batch, ph) not in self.variants:
                self._new_variant(*self._trace(batch, ph), asked=True)

    def close(self) -> None:
        """Take the gradient markers off the parameters (``p.grad = None``)."""
        if self._ready:
            self._grads.remove()

    # ------------------------------------------------------------------ facts
    def holds(self, t: torch.Tensor) -> bool:
        """Whether ``t`` (a parameter, buffer or optimizer state) lives in the step's buffer."""
        if not self._ready:
            return False
        lo = self.store.buffer.data_ptr()
        return lo <= t.data_ptr() < lo + self.store.nbytes

    @property
    def plan(self) -> Plan:
        """The plan of the last variant run (the first one's before any call)."""
        return self._current().plan

    @property
    def traced(self) -> TracedStep:
        return self._current().traced

    @property
    def runner(self) -> ArenaRunner | None:
        return self._current().runner

    @property
    def program(self) -> Program | None:
        return self._current().program

    @property
    def scalars(self) -> OptimizerScalars | None:
        return self._current().scalars

    def _current(self) -> Variant:
        if self._last is not None:
            return self._last
        if not self.variants:
            raise ExecutorError("the step is not set up yet: call it once, or pass "
                                "example_inputs=")
        return next(iter(self.variants.values()))

    @property
    def scaler(self) -> Any:
        """The ``torch.amp.GradScaler`` of an ``fp16-mixed`` step (``None`` otherwise); its
        ``scale`` and ``growth_tracker`` are slots of the step's buffer after set-up."""
        return self.mixed.scaler

    @property
    def skipped(self) -> bool:
        """Whether the last call skipped the update (the grad scaler found inf/NaN)."""
        prog = self._last.program if self._last is not None else None
        return bool(prog is not None and prog.skipped)

    @property
    def arena_bytes(self) -> int:
        """Bytes the step holds: the shared values plus the largest plan's workspace (for
        one plan whose residents lie at its bottom, the plan's ``arena_bytes``)."""
        if not self._ready:
            return int(self._current().plan.arena_bytes)
        ws = 0 if self._workspace is None else int(self._workspace.numel())
        return self.store.nbytes + max(ws, max(v.workspace_bytes
                                              for v in self.variants.values()))

    @property
    def planned_seconds(self) -> float:
        """Seconds spent planning shapes (and micro-batch graphs) here, not given or cached."""
        return self._plans.planned_seconds

    def stats(self) -> RunStats:
        """:class:`~roam_core.runtime.arena_runner.RunStats` of the last variant's program."""
        p = self._current().program
        if p is None:
            return RunStats(0, 0, 0, 0, 0, (), 0)
        return RunStats(p.counts["out"], p.counts["factory"], p.counts["fallback"],
                        p.extra_peak, p.extra_total, tuple(p.fallback_targets),
                        p.checked_values)


def _plan_list(plans: Any) -> list[Plan]:
    """``plans`` as a list of plans; anything else is a :class:`PlanFormatError`."""
    if not isinstance(plans, Sequence) or isinstance(plans, str | bytes):
        raise PlanFormatError("PlannedStep: plan must be a Plan, a list of plans or None, "
                              f"not {type(plans).__name__}")
    for p in plans:
        require_type(p, Plan, "PlannedStep: plan", PlanFormatError)
    return list(plans)


def _cache(plan_cache: Any) -> Any:
    if plan_cache is False:
        return None
    from roam_core.formats.plan_cache import PlanCache, default_cache_dir

    if plan_cache is None or plan_cache is True:
        return PlanCache(default_cache_dir())
    return PlanCache(plan_cache)


def _bind(runner: ArenaRunner, traced: TracedStep, external: dict[TensorId, torch.Tensor],
          other: dict[str, torch.Tensor]) -> None:
    """Point the runner at the shared values and give the batch slots zeros; constants."""
    with torch.no_grad():
        for r in traced.placeholders:
            if r.node in external:
                runner.bind_external(r.node)
            elif r.node in other:
                runner.load_resident(r.node, other[r.node])
            else:  # batch inputs: filled by every call
                fake = runner.nodes[r.node].meta["val"]
                runner.load_resident(r.node, torch.zeros(fake.shape, dtype=fake.dtype))
    runner.load_constants()


@contextlib.contextmanager
def _autocast_off(device: torch.device) -> Iterator[None]:
    """No autocast while the plan runs: its ops carry the casts they were traced with."""
    if not (torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled(device.type)):
        yield
        return
    with torch.autocast("cpu", enabled=False), torch.autocast(device.type, enabled=False):
        yield


def _mismatch(traced: TracedStep, graph: Graph | None) -> str | None:
    """What differs between this model's step and the plan's graph, in user terms."""
    if graph is None:
        return None
    mine, theirs = traced.graph, graph
    for r in traced.placeholders:
        a = mine.tensors[TensorId(r.node)]  # a placeholder's value is one of its storages
        b = theirs.tensors.get(TensorId(r.node))
        what = {TensorKind.PARAMETER: "parameter", TensorKind.BUFFER: "buffer",
                TensorKind.OPTIMIZER_STATE: "optimizer state",
                TensorKind.GRADIENT: "gradient accumulator",
                TensorKind.INPUT: "input"}.get(r.kind, "value")
        if b is None:
            return (f"the plan's graph ({theirs.name!r}) has no {what} {r.name!r}: the plan "
                    "was made for another model, optimizer or accumulation")
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            return (f"{what} {r.name!r} is {a.shape} {a.dtype} here but {b.shape} {b.dtype} "
                    f"in the plan's graph ({theirs.name!r})")
    if len(mine.tensors) != len(theirs.tensors) or len(mine) != len(theirs):
        return (f"this step has {len(mine)} ops and {len(mine.tensors)} storages, the plan's "
                f"graph ({theirs.name!r}) {len(theirs)} and {len(theirs.tensors)}: the model, "
                "loss, optimizer, clipping, precision or setting differ (PlannedStep runs "
                "steady-setting plans)")
    return None


def _check_parallel(parallel: ParallelSetting, precision: str, max_grad_norm: float | None,
                    accumulation_steps: int) -> None:
    """Refuse, before anything changes, what the step of one rank does not run yet."""
    from roam_core.base.errors import ConfigError
    from roam_core.trace.parallel import check_parallel_precision

    check_parallel_precision(parallel.kind, precision)
    if max_grad_norm is not None or accumulation_steps > 1:
        raise ConfigError("gradient clipping and accumulation are not supported with "
                          f"--parallel {parallel.kind} in this version")
