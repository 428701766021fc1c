"""Trace one full training step (forward, loss, backward, optimizer update) into a Graph.

How it works
------------
The model's parameters and buffers are swapped (temporarily) for ``FakeTensor`` copies and
the step ``loss = loss_fn(model(*inputs)); loss.backward(); opt.step(); opt.zero_grad()`` is
traced with ``make_fx(step, tracing_mode="real")`` while a ``FakeTensorMode`` is active.  The
result is one aten-level FX graph; every node carries a fake value, so no real memory is
used and even GPT2-XL traces in seconds.  The model may be an ordinary module or one built on
the meta device; the example inputs may be real or meta (only shapes and dtypes matter).

* **Storages** come from fake storage identity: the first node whose value lives in a storage
  allocates it (:class:`~roam_core.model.graph.Tensor`, ``size_bytes =
  untyped_storage().nbytes()``);
  every later value in the same storage (views, in-place results) is an
  :class:`~roam_core.model.graph.Alias`.
* **Per-parameter updates.**  The optimizer is always built with its *single-tensor*
  implementation (:mod:`roam_core.trace.optimizers`): every update op reads and writes one
  parameter's storages.
* **Phases** come from tracing context, never from node names: the step function records
  the graph's nodes after the forward returns, after the loss is computed, after
  ``backward()`` and after ``opt.step()``.  The op producing the returned loss is always
  phase ``LOSS`` (also when ``loss_fn`` is ``None``).
* **Kinds**: placeholders are ``parameter`` / ``buffer`` / ``optimizer_state`` / ``input``
  (resident); the storage of each parameter's ``.grad`` is ``gradient``; storages held in the
  optimizer state after the step are ``optimizer_state``; storages created in the forward or
  loss phase and read in the backward are ``activation``; the loss is ``output``; everything
  else is ``temporary``.  Tensor constants (``get_attr`` nodes, e.g. ``torch.tensor`` inside
  the optimizer) are resident ``buffer`` storages.
* **Modules and names** (:mod:`roam_core.trace.modules`): every op records the module path
  it ran in (``Op.module``, ``"blocks.0.mlp.fc"``, ``""`` at the top level); backward ops
  take their forward op's module (through autograd sequence numbers), optimizer ops their
  parameter's module.  Every parameter, buffer, gradient and optimizer-state storage records
  its qualified name (``Tensor.name``: ``"fc.weight"``, ``"fc.weight.grad"``,
  ``"fc.weight.exp_avg"``; the keys of ``named_parameters()`` / ``named_buffers()``),
  example inputs are ``"inputs[0]"``.  A wrapper module may set ``roam_name_scope =
  "model"`` to record names relative to its ``model`` submodule.
* **Ordering**: every in-place write is ordered after every earlier access and before every
  later access of its storage (``MUTATION`` control edges, skipping edges already implied by
  a direct data edge); random ops (``torch.Tag.nondeterministic_seeded``) are chained in
  program order (``RNG``).  Any order honouring data and control edges is a correct program.

Precision
---------
``precision`` (:mod:`roam_core.trace.precision`): ``fp32`` (default), ``bf16-mixed``
(autocast), ``bf16`` (everything cast) or ``fp16-mixed`` (autocast fp16 and a grad scaler,
whose ``scale`` / ``growth_tracker`` are resident ``optimizer_state`` storages named
``grad_scaler.scale`` / ``grad_scaler.growth_tracker``; the update ops read the scaler's
``found_inf`` flag, so no update runs before the inf check).  ``Graph.origin["precision"]``
records it.

Settings
--------
``steady`` (default): the optimizer state exists before the traced step (a warm step with
zero gradients runs, on fake tensors, outside the graph), so it is resident.  ``roam`` (the
ROAM paper's evaluation): the optimizer's *first* step is traced, so its state is created
inside the step (``zeros_like`` ops), with ``Adam(lr=0.1, weight_decay=1e-4)`` by default.

Ids and the FX graph (internal API for the executor)
----------------------------------------------------
:func:`trace_fx` returns a :class:`~roam_core.trace.traced_step.TracedStep` holding the
``GraphModule`` and the Graph; :mod:`roam_core.trace.traced_step` says how their ids map.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import get_proxy_mode, make_fx

from roam_core.base.checks import require_type
from roam_core.base.collector import gc_paused
from roam_core.base.errors import ConfigError, TraceError
from roam_core.model.graph import Graph, Phase, TensorKind
from roam_core.model.parallel import ParallelSetting
from roam_core.trace.fx_graph import build_graph, is_random
from roam_core.trace.guards import explain, failed_at, guard_data_dependence
from roam_core.trace.identical_casts import merge_identical_casts
from roam_core.trace.kernel_fakes import KernelFakeMode, fix_fake_values
from roam_core.trace.modules import (
    SCOPE_ATTRIBUTE,
    SEQ_KEY,
    ModuleTracker,
    node_modules,
    scoped_name,
)
from roam_core.trace.optimizers import (
    OptimizerFactory,
    make_optimizer_factory,
    per_parameter,
    warm_step,
)
from roam_core.trace.parallel.process_group import rank_process_group
from roam_core.trace.parallel.program import check_parallel_precision
from roam_core.trace.parallel.rank_trace import RankTrace as _RankTrace
from roam_core.trace.parallel.rank_trace import as_parallel_setting
from roam_core.trace.params import unique_named_buffers, unique_named_parameters
from roam_core.trace.precision import (
    GRAD_SCALER,
    SCALER_STATE,
    AmpGuard,
    Precision,
    StepPrecision,
    new_grad_scaler,
    resolve_precision,
    scaler_settings,
)
from roam_core.trace.rng import RngRecorder, record_rng, rng_timeline
from roam_core.trace.sources import SourceRecorder, node_sources
from roam_core.trace.step_spec import (
    ACCUMULATOR_SUFFIX,
    StepSpec,
    accumulate_and_clip,
    reset_accumulators,
)
from roam_core.trace.traced_step import PlaceholderRole, TracedStep

__all__ = ["trace_fx", "trace_training_step"]

_logger = logging.getLogger(__name__)

#: make_fx is not thread-safe (it patches torch.fx's module-level tracing state)
_TRACE_LOCK = threading.RLock()


def trace_training_step(
    model: nn.Module,
    example_inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    optimizer: str | OptimizerFactory | None = None,
    *,
    setting: str = "steady",
    name: str | None = None,
    origin: Mapping[str, Any] | None = None,
    precision: str = "fp32",
    max_grad_norm: float | None = None,
    accumulation_steps: int = 1,
    accumulate_only: bool = False,
    grad_scaler: Any = None,
    parallel: str | ParallelSetting | None = None,
    world_size: int = 1,
    reshard_after_forward: bool = True,
    fsdp_wrap: str = "blocks",
    **optimizer_kwargs: Any,
) -> Graph:
    """Trace one training step of ``model`` into a :class:`~roam_core.model.graph.Graph`.

    Parameters
    ----------
    model : nn.Module
        Any module, with real or meta parameters (it is restored unchanged afterwards).
    example_inputs : sequence
        Positional inputs of ``model``; tensors may be real or meta (only shapes and dtypes
        matter).  Non-tensor items are passed through unchanged.
    loss_fn : callable, optional
        ``loss = loss_fn(model(*example_inputs))``; ``None`` means the model returns the
        scalar loss itself.
    optimizer : {"adamw", "adam", "sgd"} or callable, optional
        Default ``"adamw"`` (``"adam"`` with lr 0.1, weight decay 1e-4 in the ``roam``
        setting).  SGD uses momentum 0.9.  A callable ``params -> Optimizer`` is used as is,
        except that ``foreach=True`` is traced as the per-parameter update it computes (on
        CPU torch's foreach kernels loop over the same per-tensor kernels); ``fused=True``
        is traced as torch's fused kernel (one op updating every parameter).
    setting : {"steady", "roam"}
        Optimizer state resident before the step, or created by the traced first step.
    name : str, optional
        Graph name (default: the model's class name).
    origin : Mapping, optional
        Stored as ``Graph.origin`` (default ``{"source": "custom", ...}``); its
        ``"precision"`` entry is always set to ``precision``.
    precision : {"fp32", "bf16-mixed", "bf16", "fp16-mixed"}
        Numeric precision of the step (:mod:`roam_core.trace.precision`): the model's own
        dtypes, autocast bf16, everything cast to bf16, or autocast fp16 with a
        ``torch.amp.GradScaler`` (with clipping, the gradients are unscaled first).  With
        ``parallel="fsdp"``: ``"fp32"`` or ``"bf16-mixed"``, which is FSDP2's
        ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` (no autocast);
        with ``parallel="ddp"``: ``"fp32"`` (others raise ``ConfigError``).
    max_grad_norm : float, optional
        Clip the gradients' total 2-norm in the step (:mod:`roam_core.trace.step_spec`).
    accumulation_steps : int
        Micro-batches per optimizer step; with ``k > 1`` the step is the k-th micro-batch
        (backward of ``loss / k``, gradients added into resident accumulators, update).
    accumulate_only : bool
        With ``accumulation_steps > 1``: trace a micro-batch that only accumulates (no
        update), the graph of the first ``k - 1`` micro-batches.
    grad_scaler : torch.amp.GradScaler, optional
        ``fp16-mixed``: the user's scaler, whose growth factor, backoff factor and growth
        interval the traced scale update uses (default: torch's defaults).
    parallel : {"fsdp", "ddp"} or ParallelSetting, optional
        Trace the step of one rank of a data-parallel world (``docs/parallel.md``): FSDP2
        (parameters, gradients and optimizer state sharded 1/W; all-gathers and
        reduce-scatters) or DDP (gradient buckets all-reduced).  ``None``: one device.
    world_size : int
        Ranks in the world (with ``parallel``).
    reshard_after_forward : bool
        FSDP: free each unit's gathered parameters after its forward (FSDP2's default).
    fsdp_wrap : {"blocks", "leaves", "root"}
        FSDP: which modules are ``fully_shard`` units (:mod:`roam_core.trace.parallel.layout`).
    **optimizer_kwargs
        Hyper-parameters forwarded to the torch optimizer.

    Returns
    -------
    Graph

    Raises
    ------
    TraceError
        If tracing or graph construction fails (the message names the failing op).

    Examples
    --------
    >>> import torch
    >>> g = trace_training_step(torch.nn.Linear(4, 2), [torch.empty(3, 4)],
    ...                         loss_fn=lambda y: y.sum(), optimizer="sgd")
    >>> sorted({op.phase.value for op in g.ops})
    ['backward', 'forward', 'loss', 'optimizer']
    """
    require_type(model, nn.Module, "trace_training_step: model", TraceError)
    if not isinstance(example_inputs, Sequence) or isinstance(example_inputs, str | bytes):
        raise TraceError("trace_training_step: example_inputs must be a list or tuple of "
                         f"inputs, not {type(example_inputs).__name__}")
    spec = StepSpec(max_grad_norm, accumulation_steps, not accumulate_only,
                    scaler_settings(grad_scaler, precision))
    return trace_fx(model, example_inputs, loss_fn, optimizer, setting=setting, name=name,
                    origin=origin, precision=precision, spec=spec, parallel=parallel,
                    world_size=world_size, reshard_after_forward=reshard_after_forward,
                    fsdp_wrap=fsdp_wrap, **optimizer_kwargs).graph


def trace_fx(
    model: nn.Module,
    example_inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    optimizer: str | OptimizerFactory | None = None,
    *,
    setting: str = "steady",
    name: str | None = None,
    origin: Mapping[str, Any] | None = None,
    device: str | torch.device = "cpu",
    precision: str | Precision = "fp32",
    spec: StepSpec | None = None,
    parallel: str | ParallelSetting | None = None,
    world_size: int = 1,
    reshard_after_forward: bool = True,
    fsdp_wrap: str = "blocks",
    merge_casts: bool = False,
    **optimizer_kwargs: Any,
) -> TracedStep:
    """Trace a training step and keep the FX program (internal API for the executor).

    Same parameters as :func:`trace_training_step`, plus ``device``: the device of the fake
    tensors (``"cpu"``; ``"cuda"`` only works on a machine with a GPU), ``spec``, the
    clipping and accumulation of the step (:class:`~roam_core.trace.step_spec.StepSpec`),
    and ``merge_casts``: make autocast's repeated casts of one activation once
    (:mod:`roam_core.trace.identical_casts`; bit-identical values, fewer bytes than eager;
    recorded in ``Graph.origin``).
    Returns a :class:`TracedStep`.  The placeholders of ``TracedStep.gm`` are, in order,
    the deduplicated parameters, the buffers, the resident optimizer state (``steady`` only:
    per parameter, the tensor entries of ``opt.state[p]`` in insertion order), the grad
    scaler's ``scale`` and ``growth_tracker`` (``fp16-mixed`` only), the gradient
    accumulators (with accumulation: one per parameter that requires grad) and the tensor
    example inputs, as listed in ``TracedStep.placeholders``.  The step returns ``[loss]``,
    or ``[loss, total_norm]`` when it clips.  Python's cyclic garbage collector is paused
    while tracing (:func:`gc_paused`).  One trace runs at a time per process (make_fx
    patches module-level state): threads that trace at once (a Dask worker's, the app's)
    take turns.  A model made by :func:`roam_core.trace.parallel.shard_model` (real shards
    of one rank) traces with its own layout.
    """
    prec = resolve_precision(precision)
    par = as_parallel_setting(parallel, world_size, reshard_after_forward, fsdp_wrap)
    spec = spec or StepSpec()
    if par.active:
        check_parallel_precision(par.kind, prec.name)
        if spec != StepSpec():
            # a clipped norm needs an all-reduce over the shards that the rank program
            # does not trace yet: refuse rather than plan a different step
            raise ConfigError("gradient clipping and accumulation are not supported with "
                              f"--parallel {par.kind} in this version")
    with _TRACE_LOCK, gc_paused():
        if not par.active:
            return _trace_fx(model, example_inputs, loss_fn, optimizer, setting=setting,
                             name=name, origin=origin, device=device, precision=prec,
                             spec=spec, merge_casts=merge_casts, **optimizer_kwargs)
        with rank_process_group(par.world_size) as group:
            rank = _RankTrace.make(model, par, group, prec.name)
            return _trace_fx(model, example_inputs, loss_fn, optimizer, setting=setting,
                             name=name, origin=origin, device=device, precision=prec,
                             spec=spec, rank=rank, merge_casts=merge_casts,
                             **optimizer_kwargs)


def _trace_fx(
    model: nn.Module,
    example_inputs: Sequence[Any],
    loss_fn: Callable[[Any], torch.Tensor] | None,
    optimizer: str | OptimizerFactory | None,
    *,
    setting: str,
    name: str | None,
    origin: Mapping[str, Any] | None,
    device: str | torch.device,
    precision: Precision,
    spec: StepSpec,
    rank: _RankTrace | None = None,
    merge_casts: bool = False,
    **optimizer_kwargs: Any,
) -> TracedStep:
    t0 = time.perf_counter()
    opt_name, factory = make_optimizer_factory(optimizer, setting, **optimizer_kwargs)
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        # fake CUDA tensors abort the process inside make_fx when no GPU is present
        raise TraceError("tracing on cuda needs a machine with a CUDA GPU; trace on cpu here")
    # closed-over real tensors (e.g. labels captured by loss_fn) become graph constants
    # a rank's mixed precision is FSDP2's policy, run by the rank program (no autocast)
    step_precision = precision if rank is None else resolve_precision("fp32")
    fm = KernelFakeMode(allow_non_fake_inputs=True)
    with _FakeSwap(model, fm, dev, step_precision,
                   rank.shapes if rank is not None else None):
        fake = _FakeStep.build(model, example_inputs, factory, setting, fm, dev,
                               step_precision, spec)
        program = rank.program(model) if rank is not None else None
        gm, ctx, rng_calls = _make_fx(model, loss_fn, fake, fm, spec, program)
    roles = (
        [(TensorKind.PARAMETER, n) for n, _ in fake.named_params]
        + [(TensorKind.BUFFER, n) for n, _ in fake.named_buffers]
        + [(TensorKind.OPTIMIZER_STATE, n) for n in fake.state_names]
        + [(TensorKind.OPTIMIZER_STATE, f"{GRAD_SCALER}:{k}") for k in SCALER_STATE
           if fake.mixed.scaler is not None]
        + [(TensorKind.GRADIENT, n) for n in fake.accumulator_names]
        + [(TensorKind.INPUT, f"inputs[{i}]") for i in fake.tensor_pos]
    )
    phases = ctx.phases(gm.graph)
    rng = rng_timeline(gm, rng_calls, is_random)
    _strip(gm)  # gm is lazy: its recompile() only marks the code stale
    merged = merge_identical_casts(gm) if merge_casts else 0
    # a micro-batch that only accumulates has no unscale and no update to gate
    amp = _amp_guard(gm, ctx) if fake.mixed.scaler is not None and spec.updates else None
    fix_fake_values(gm)  # where torch's fake kernels disagree with the real ones
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == len(roles), (len(placeholders), len(roles))
    ph_roles = tuple(PlaceholderRole(n.name, k, r) for n, (k, r) in
                     zip(placeholders, roles, strict=True))
    consts = tuple(PlaceholderRole(n.name, TensorKind.BUFFER, str(n.target))
                   for n in gm.graph.nodes if n.op == "get_attr")
    gname = name or type(model).__name__
    if origin is None:
        origin = {"source": "custom", "model": type(model).__name__, "setting": setting,
                  "optimizer": opt_name, "torch": torch.__version__,
                  "input_shapes": [list(x.shape) for x in example_inputs
                                   if isinstance(x, torch.Tensor)]}
    # the clip and the micro-batch are part of how the step was made, whoever built origin
    origin = {**origin, **spec.origin(), "precision": precision.name}
    if merge_casts:
        origin = {**origin, "merge_casts": True, "merged_casts": merged}
    if rank is not None:
        origin = {**origin, "parallel": rank.setting.to_dict()}
    graph, values, loss_value = build_graph(
        gm, phases, {r.node: r.kind for r in ph_roles + consts}, ctx.grads, ctx.state,
        name=gname, origin=origin, modules=node_modules(gm),
        sources=node_sources(gm, ctx.sources, SEQ_KEY),
        names={r.node: scoped_name(_storage_name(r), fake.scope) for r in ph_roles},
        named=[(scoped_name(n, fake.scope), t) for n, t in ctx.named],
        extra_inputs={} if amp is None else dict.fromkeys(amp.step_ops, (amp.found_inf,)),
        communication=program.communication if program is not None else ())
    dt = time.perf_counter() - t0
    _logger.info("traced %s: %d ops, %d storages in %.2f s", gname, len(graph),
                 len(graph.tensors), dt)
    return TracedStep(gm, graph, ph_roles, consts, values, loss_value, setting, opt_name, dt,
                      rng, precision.name, amp, spec)


@dataclass
class _FakeStep:
    """The fake values a traced step reads (inside :class:`_FakeSwap`): deduplicated
    parameters and buffers, example inputs, and the optimizer with its resident state."""

    named_params: list[tuple[str, nn.Parameter]]
    named_buffers: list[tuple[str, torch.Tensor]]
    inputs: list[Any]
    tensor_pos: list[int]  # positions of the tensor inputs among ``inputs``
    opt: torch.optim.Optimizer
    state: list[torch.Tensor]  # resident optimizer state, per parameter in insertion order
    state_names: list[str]  # "fc.weight:exp_avg"
    pname: dict[int, str]  # id(parameter) -> qualified name
    scope: str
    tracker: ModuleTracker
    mixed: StepPrecision  # autocast and the grad scaler (with fake resident state)
    #: per parameter, its gradient accumulator (None: frozen, or no accumulation)
    accumulators: list[torch.Tensor | None]
    accumulator_names: list[str]  # the parameters' names, for the accumulators that exist

    @property
    def params(self) -> list[nn.Parameter]:
        return [p for _, p in self.named_params]

    @property
    def buffers(self) -> list[torch.Tensor]:
        return [b for _, b in self.named_buffers]

    @property
    def accumulator_tensors(self) -> list[torch.Tensor]:
        return [a for a in self.accumulators if a is not None]

    @classmethod
    def build(cls, model: nn.Module, example_inputs: Sequence[Any], factory: OptimizerFactory,
              setting: str, fm: FakeTensorMode, dev: torch.device,
              precision: Precision, spec: StepSpec) -> _FakeStep:
        named_params = unique_named_parameters(model)
        named_buffers = unique_named_buffers(model)
        params = [p for _, p in named_params]
        inputs = [_fake_input(x, fm, dev, precision) for x in example_inputs]
        tensor_pos = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
        with fm:
            opt = factory(params)
        per_parameter(opt)
        if setting == "steady":
            warm_step(opt, factory, params, fm, dev)
        state_names: list[str] = []
        state: list[torch.Tensor] = []
        pname = {id(p): n for n, p in named_params}
        scope = str(getattr(model, SCOPE_ATTRIBUTE, "") or "")
        tracker = ModuleTracker(model, pname, scope)
        with fm:  # the grad scaler's scale and growth tracker: fake resident state
            mixed = StepPrecision(precision, dev, scaler=(
                new_grad_scaler(dev, spec.grad_scaler) if precision.grad_scaler else None))
        for p in params:
            for k, v in opt.state.get(p, {}).items():
                if isinstance(v, torch.Tensor):
                    state.append(v)
                    state_names.append(f"{pname[id(p)]}:{k}")
        accs: list[torch.Tensor | None] = [None] * len(params)
        if spec.accumulates:
            with fm:
                accs = [torch.empty(p.shape, dtype=p.dtype, device=dev) if p.requires_grad
                        else None for p in params]
        acc_names = [pname[id(p)] for p, a in zip(params, accs, strict=True) if a is not None]
        return cls(named_params, named_buffers, inputs, tensor_pos, opt, state, state_names,
                   pname, scope, tracker, mixed, accs, acc_names)


def _make_fx(model: nn.Module, loss_fn: Callable[[Any], torch.Tensor] | None,
             fake: _FakeStep, fm: FakeTensorMode,
             spec: StepSpec, program: Any = None) -> tuple[Any, _StepContext, RngRecorder]:
    """Trace ``loss_fn(model(*inputs)); backward; [accumulate, clip]; opt.step();
    opt.zero_grad()`` with make_fx; returns the GraphModule, what the step recorded and the
    RNG calls.  ``program``: the data-parallel program whose hooks run the forward and
    backward of one rank."""
    ctx = _StepContext()
    guards: list[Any] = []
    inputs, tensor_pos, opt, pname, tracker = (fake.inputs, fake.tensor_pos, fake.opt,
                                               fake.pname, fake.tracker)
    mixed = fake.mixed
    k = spec.accumulation_steps

    def step(params_: list, buffers_: list, state_: list, scaler_: list, accs_: list,
             inputs_: list) -> list[torch.Tensor]:
        args = list(inputs)
        for i, x in zip(tensor_pos, inputs_, strict=True):
            args[i] = x
        it = iter(accs_)
        accs = [None if a is None else next(it) for a in fake.accumulators]
        sources = ctx.sources = SourceRecorder(step.__code__)
        with guard_data_dependence(model, guards), sources, (
                program.step() if program is not None else contextlib.nullcontext()):
            with mixed.autocast():
                out = model(*args)
                ctx.mark("forward")
                loss = out if loss_fn is None else loss_fn(out)
            sources.enabled = False  # the backward maps to the forward's frames
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TraceError("the loss must be a tensor with one element")
            scaled = loss / k if k > 1 else loss  # the eager loop's (loss / k).backward()
            ctx.mark("loss")
            tracker.hook_backward(scaled)
            mixed.backward(scaled)
            tracker.set_backward("")
            ctx.grads = [p.grad for p in params_ if p.grad is not None]
            ctx.named.extend((f"{pname[id(p)]}.grad", p.grad) for p in params_
                             if p.grad is not None)
            # a grad scaler unscales (and checks) the summed gradients before the clip
            norm = accumulate_and_clip(params_, accs, spec, unscale=lambda: mixed.unscale(opt))
            ctx.mark("backward")
        if spec.updates:
            if not mixed.unscaled(opt):
                mixed.unscale(opt)
            ctx.mark("unscale")  # the ops after this mark are the update the scaler gates
            opt.step()  # with a scaler: the "no inf found" path (the runtime skips it on inf)
            ctx.mark("step")
            mixed.update()
        tracker.flush()
        ctx.mark("optimizer")
        ctx.state = [v for p in params_ for v in opt.state.get(p, {}).values()
                     if isinstance(v, torch.Tensor)]
        ctx.named.extend((f"{pname[id(p)]}.{k}", v) for p in params_
                         for k, v in opt.state.get(p, {}).items()
                         if isinstance(v, torch.Tensor))
        ctx.named.extend((f"{pname[id(p)]}{ACCUMULATOR_SUFFIX}", a)
                         for p, a in zip(params_, accs, strict=True) if a is not None)
        opt.zero_grad(set_to_none=True)
        if spec.updates:
            reset_accumulators(accs)
        return [loss] if norm is None else [loss, norm]

    try:
        with fm, tracker, record_rng() as rng_calls, _lazy_recompile(), _eager_checkpointing():
            gm = make_fx(step, tracing_mode="real", **_MAKE_FX_OPTIONS)(
                fake.params, fake.buffers, fake.state, mixed.state(),
                fake.accumulator_tensors, [inputs[i] for i in tensor_pos])
    except TraceError:
        raise
    except Exception as e:
        guard = guards[0] if guards else None
        why = explain(e, guard)
        if why is not None:
            raise TraceError(why) from e
        raise TraceError(f"tracing {type(model).__name__} failed{failed_at(guard)}: "
                         f"{type(e).__name__}: {e}") from e
    return gm, ctx, rng_calls


#: make_fx options that only save time: without torch's torch-function metadata mode
#: (``node.meta["torch_fn"]``, which nothing here reads) every traced call skips one Python
#: torch-function layer.  Feature-detected: a torch without the option traces as before.
_MAKE_FX_OPTIONS: dict[str, Any] = (
    {"_disable_torch_fn_metadata_mode": True}
    if "_disable_torch_fn_metadata_mode" in inspect.signature(make_fx).parameters else {})


@contextlib.contextmanager
def _lazy_recompile() -> Iterator[None]:
    """Make the ``GraphModule`` s created inside generate their Python code on first use
    (``forward``, ``.code``, printing) instead of at once and at every ``recompile()``.

    Generating the code of GPT2-XL's 14,000-node step takes about a second and make_fx and
    :func:`_strip` each do it once; the planner only reads ``gm.graph``, so the code is
    generated when (and if) the executor first calls the module.  Uses torch's lazy graph
    module when this torch has it (``torch.fx._lazy_graph_module``, torch >= 2.3), otherwise
    nothing changes.
    """
    try:
        from torch.fx._lazy_graph_module import _use_lazy_graph_module
    except ImportError:  # pragma: no cover - torch without lazy graph modules
        yield
        return
    with _use_lazy_graph_module(True):
        yield


def _eager_checkpointing() -> contextlib.AbstractContextManager[None]:
    """Trace selective activation checkpointing as eager runs it.

    ``torch.utils.checkpoint``'s selective policies (``context_fn``) take any active proxy
    mode for ``torch.compile`` and then cache every op's result instead of re-running the
    ones marked for recomputation; torch's flag for a non-strict ``make_fx`` trace (what this
    trace is) makes them behave as in eager, so the graph holds the re-runs the model really
    does.  Feature-detected: a torch without the flag traces as before.
    """
    ctx = getattr(torch.compiler, "_non_strict_tracing_context", None)
    return ctx() if callable(ctx) else contextlib.nullcontext()


def _storage_name(role: PlaceholderRole) -> str:
    """``Tensor.name`` of a placeholder: ``fc.weight``, ``fc.weight.exp_avg``,
    ``fc.weight.grad_accumulator``, ``inputs[0]``."""
    if role.kind is TensorKind.OPTIMIZER_STATE:
        param, _, key = role.name.rpartition(":")
        return f"{param}.{key}"
    if role.kind is TensorKind.GRADIENT:
        return f"{role.name}{ACCUMULATOR_SUFFIX}"
    return role.name


class _StepContext:
    """Records phase boundaries and grads/state seen inside the traced step."""

    def __init__(self) -> None:
        self.seen: dict[str, set[str]] = {}
        self.grads: list[torch.Tensor] = []
        self.state: list[torch.Tensor] = []
        # (qualified name, tensor) of every gradient and optimizer state seen in the step
        self.named: list[tuple[str, torch.Tensor]] = []
        self.sources: SourceRecorder | None = None

    def mark(self, phase: str) -> None:
        mode = get_proxy_mode()
        assert mode is not None, "mark() called outside make_fx"
        self.seen[phase] = {n.name for n in mode.tracer.graph.nodes}

    def phases(self, graph: torch.fx.Graph) -> dict[str, Phase]:
        order = [("forward", Phase.FORWARD), ("loss", Phase.LOSS),
                 ("backward", Phase.BACKWARD), ("optimizer", Phase.OPTIMIZER)]
        out: dict[str, Phase] = {}
        for n in graph.nodes:
            out[n.name] = next((ph for key, ph in order if n.name in self.seen.get(key, ())),
                               Phase.OTHER)
        return out


def _strip(gm: Any) -> None:
    """Drop profiler nodes and dead code (mutating ops are kept by FX's DCE).

    make_fx emits one ``get_attr`` node per use of a closed-over real tensor (e.g. labels
    captured by ``loss_fn``, read by the loss and by its backward); they are merged into one
    node so the constant is one storage, counted once.
    """
    for n in reversed(list(gm.graph.nodes)):
        if n.op == "call_function" and str(n.target).startswith("profiler.") and not n.users:
            gm.graph.erase_node(n)
    first: dict[int, Any] = {}
    for n in list(gm.graph.nodes):
        if n.op != "get_attr":
            continue
        const = getattr(gm, n.target, None)
        if not isinstance(const, torch.Tensor):
            continue
        keep = first.setdefault(id(const), n)
        if keep is not n:
            n.replace_all_uses_with(keep)
            gm.graph.erase_node(n)
    gm.graph.eliminate_dead_code()
    gm.recompile()


class _FakeSwap:
    """Swap a module's parameters and buffers for fake tensors (in the step's precision);
    restore on exit."""

    def __init__(self, model: nn.Module, fm: FakeTensorMode, device: torch.device,
                 precision: Precision,
                 shapes: Mapping[int, tuple[int, ...]] | None = None) -> None:
        self.model, self.fm, self.device, self.precision = model, fm, device, precision
        self.shapes = shapes or {}  # id(parameter) -> the shape to fake (a rank's shard)
        self.saved: list[tuple[dict[str, Any], str, Any]] = []
        self.fake_of: dict[int, torch.Tensor] = {}

    def _fake(self, t: torch.Tensor, param: bool) -> torch.Tensor:
        if id(t) not in self.fake_of:
            with self.fm:
                e = torch.empty(self.shapes.get(id(t), t.shape),
                                dtype=self.precision.dtype_of(t), device=self.device)
            self.fake_of[id(t)] = nn.Parameter(e, t.requires_grad) if param else e
        return self.fake_of[id(t)]

    def __enter__(self) -> _FakeSwap:
        for m in self.model.modules():
            for table, param in ((m._parameters, True), (m._buffers, False)):
                for k, v in list(table.items()):
                    if v is not None:
                        self.saved.append((table, k, v))
                        table[k] = self._fake(v, param)  # type: ignore[assignment]  # param: a Parameter
        return self

    def __exit__(self, *exc: object) -> None:
        for table, k, v in reversed(self.saved):
            table[k] = v


def _fake_input(x: Any, fm: FakeTensorMode, device: torch.device,
                precision: Precision) -> Any:
    if isinstance(x, torch.Tensor):
        with fm:
            return torch.empty(x.shape, dtype=precision.dtype_of(x), device=device)
    return x


#: The grad scaler's fused unscale and inf check (its second argument is ``found_inf``).
_UNSCALE = torch.ops.aten._amp_foreach_non_finite_check_and_unscale_.default


def _amp_guard(gm: Any, ctx: _StepContext) -> AmpGuard:
    """The update ops of a step with a grad scaler and the flag that gates them."""
    unscale = [n for n in gm.graph.nodes if n.target is _UNSCALE]
    if len(unscale) != 1:
        raise TraceError(f"the grad scaler's step has {len(unscale)} unscale ops, expected 1 "
                         "(gradients of one device and dtype)")
    found_inf = unscale[0].args[1]
    step = ctx.seen["step"] - ctx.seen["unscale"]
    ops = frozenset(n.name for n in gm.graph.nodes if n.name in step
                    and n.op == "call_function")
    return AmpGuard(found_inf.name, ops)
