"""Execute a plan for a graph file: rebuild the step from the graph's ``origin``.

Graphs traced from the zoo or from a Hugging Face config record how they were made
(``Graph.origin = {"source": "zoo", "model", "batch_size", "seq_len", "setting",
"optimizer", "attention", "precision"}``, or ``"source": "hf"`` with the config:
:func:`roam_core.zoo.hf.hf_origin`; ``"merge_casts": true`` when traced with merged casts).
:func:`execute_origin` rebuilds that step, re-traces it on the target device in its precision
(casts merged as recorded), checks the fingerprint against the plan, and runs
:func:`roam_core.runtime.execution.execute_traced`.

The model is built on the meta device and given a seeded ``N(0, 0.02)`` init directly on
the target device (:func:`roam_core.runtime.step.prepare_state`): one copy of the weights
exists at a time, even for GPT2-XL, and the CUDA measuring processes rebuild it the same
way from a small picklable recipe.  Graphs from a custom model (``origin.source ==
"custom"``) cannot be rebuilt from a file: call :func:`roam_core.runtime.execute_plan` with
the model in Python.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from roam_core.base.errors import ExecutorError, PlanFormatError
from roam_core.model.parallel import ParallelSetting
from roam_core.runtime.device import resolve_device
from roam_core.runtime.execution import execute_traced
from roam_core.runtime.plan_checks import require_valid
from roam_core.runtime.report import ExecutionReport

if TYPE_CHECKING:
    from roam_core.model.graph import Graph
    from roam_core.model.plan import Plan
    from roam_core.zoo.steps import ZooStep

__all__ = ["REBUILDABLE", "execute_graph", "execute_origin", "merged_zoo_recipe", "origin_step",
           "zoo_recipe"]

#: ``Graph.origin["source"]`` values a graph file can be rebuilt from.
REBUILDABLE = ("zoo", "hf")

_logger = logging.getLogger(__name__)


def _zoo_args(origin: Mapping[str, Any]) -> tuple[Any, ...]:
    if origin.get("source") not in REBUILDABLE:
        raise ExecutorError(
            f"the graph comes from a {origin.get('source', 'custom')!r} model "
            f"({origin.get('model', '?')}), which cannot be rebuilt from the graph file: "
            "run it from Python with roam_core.execute_plan(model, example_inputs, plan, ...)")
    par = ParallelSetting.from_mapping(origin.get("parallel"))
    if par.active:
        raise ExecutorError(
            f"the graph is the step of one rank of {par.describe()}, which runs on "
            f"{par.world_size} ranks: use `roam train {origin.get('model', 'MODEL')} "
            f"--parallel {par.kind} --world-size {par.world_size} --plan PLAN.json`")
    try:
        return (origin["model"], int(origin["batch_size"]), origin.get("seq_len"),
                origin.get("setting", "steady"), origin.get("optimizer"),
                origin.get("attention", "sdpa"))
    except (KeyError, TypeError, ValueError) as e:
        raise ExecutorError(f"graph origin {dict(origin)} lacks the zoo settings: {e}") from e


def origin_step(origin: Mapping[str, Any], device: str = "meta", seed: int = 0) -> ZooStep:
    """The step a zoo or Hugging Face graph was traced from (:data:`REBUILDABLE`)."""
    name, b, t, setting, opt, attention = _zoo_args(origin)
    if origin.get("source") == "hf":
        from roam_core.zoo.hf import hf_step_from_origin

        return hf_step_from_origin(origin, device, seed)
    from roam_core.zoo.steps import build_zoo_step

    return build_zoo_step(name, b, t, setting, opt, device, attention=attention, seed=seed)


def zoo_recipe(origin: Mapping[str, Any]) -> tuple[Any, ...]:
    """Rebuild a zoo or HF step on the meta device: ``(model, inputs, loss_fn,
    optimizer_factory, setting, {}, precision)``.  Picklable through
    ``functools.partial(zoo_recipe, origin)``."""
    step = origin_step(origin)
    return (step.model, step.example_inputs, step.loss_fn, step.optimizer_factory,
            origin.get("setting", "steady"), {}, origin.get("precision", "fp32"))


def merged_zoo_recipe(origin: Mapping[str, Any]) -> tuple[Any, ...]:
    """:func:`zoo_recipe` of a step traced with ``merge_casts`` (``Graph.origin
    ["merge_casts"]``): its tuple and ``True`` (the measuring process re-traces it merged)."""
    return (*zoo_recipe(origin), True)


def execute_origin(origin: Mapping[str, Any], plan: Plan, *, device: str = "cpu",
                   steps: int = 1, check_addresses: bool = True, seed: int = 0,
                   strict: bool = False, measure: str = "auto",
                   snapshot_dir: str | None = None,
                   accumulate_plan: Plan | None = None) -> ExecutionReport:
    """Rebuild the zoo or HF step described by ``origin``, re-trace it, execute ``plan``.

    Parameters
    ----------
    origin : Mapping
        ``Graph.origin`` of the plan's graph (``source`` ``"zoo"`` or ``"hf"``).
    plan : Plan
        The plan (its fingerprint must match the re-traced graph).
    device, steps, check_addresses, seed, strict
        As for :func:`roam_core.runtime.execute_plan`.
    measure : {"auto", "subprocess", "in-process"}
        CUDA peaks: ``auto`` measures in fresh processes.
    snapshot_dir : str, optional
        CUDA: also write ``eager.pickle`` / ``planned.pickle`` memory snapshots there.
    accumulate_plan : Plan, optional
        A step traced with gradient accumulation: the plan of its first k - 1 micro-batches,
        checked (fingerprint and validator) against that micro-batch's graph, traced here.

    Raises
    ------
    ExecutorError
        Custom graph, no CUDA device, or an execution failure.
    PlanFormatError
        The re-traced graph differs from the plan's (e.g. traced on another device).
    """
    from roam_core.trace.step_spec import StepSpec
    from roam_core.trace.tracer import trace_fx

    name, b, _t, setting, _opt, _attention = _zoo_args(origin)
    if origin.get("micro_batch") == "accumulate":
        raise ExecutorError(
            "the graph is a gradient-accumulation micro-batch that only accumulates; "
            "execute the plan of the update micro-batch (`roam trace --accumulation-steps K` "
            "traces it), which runs one whole optimizer step of K micro-batches")
    spec = StepSpec(origin.get("max_grad_norm"), int(origin.get("accumulation_steps", 1)))
    dev = resolve_device(device)
    model, inputs, loss_fn, factory, setting, _, precision = zoo_recipe(origin)
    # a graph traced with merged casts is planned for the merged step (eager makes every cast)
    merged = bool(origin.get("merge_casts", False))
    traced = trace_fx(model, inputs, loss_fn, factory, setting=setting, device=dev,
                      name=f"{name}-b{b}", origin=dict(origin), precision=precision,
                      spec=spec, merge_casts=merged)
    if accumulate_plan is not None:
        if not spec.accumulates:
            raise ExecutorError("an accumulate plan goes with a graph traced with "
                                "--accumulation-steps 2 or more")
        acc = trace_fx(model, inputs, loss_fn, factory, setting=setting, device=dev,
                       name=f"{name}-b{b}", origin=dict(origin), precision=precision,
                       spec=dataclasses.replace(spec, updates=False), merge_casts=merged)
        if accumulate_plan.graph_fingerprint != acc.graph.fingerprint():
            raise PlanFormatError(
                "the accumulate plan was made for another graph than this step's first "
                f"{spec.accumulation_steps - 1} micro-batch(es): plan the graph `roam trace "
                "... --accumulation-steps K --accumulate-only` writes")
        require_valid(acc.graph, accumulate_plan)
    recipe = functools.partial(merged_zoo_recipe if merged else zoo_recipe, dict(origin))
    how = measure
    if measure == "auto":
        # a recipe rebuilds the plain step: a clipping or accumulating one is measured here
        plain = spec == StepSpec()
        how = "subprocess" if dev.type == "cuda" and plain else "in-process"
    return execute_traced(traced, model, inputs, plan, loss_fn=loss_fn, optimizer=factory,
                          device=dev, steps=steps, check_addresses=check_addresses, seed=seed,
                          strict=strict, measure=how, recipe=recipe, snapshot_dir=snapshot_dir,
                          accumulate_plan=accumulate_plan)


def execute_graph(graph: Graph, plan: Plan, **kwargs: Any) -> ExecutionReport:
    """Execute ``plan`` for a loaded graph (the app's "Verify" button, ``roam execute``).

    Checks the plan against ``graph`` first (fingerprint and the whole validator), then
    calls :func:`execute_origin` with ``graph.origin`` and ``kwargs`` (``device``,
    ``steps``, ``seed``, ``check_addresses``, ``strict``, ``measure``, ``snapshot_dir``).
    """
    require_valid(graph, plan)
    return execute_origin(graph.origin, plan, **kwargs)

