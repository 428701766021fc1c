"""The plans of one planned step, by batch shape and micro-batch: :class:`StepPlans`.

A data loader's last batch, variable-length text and gradient accumulation all ask one
training step for more than one traced graph.  :class:`~roam_core.runtime.planned_step.
PlannedStep` keeps one :class:`Variant` per **key**: the shapes and dtypes of the batch's
tensors and the micro-batch *phase* (``"step"`` without accumulation; ``"accumulate"`` or
``"update"`` with it, :mod:`roam_core.trace.step_spec`).  A variant holds the traced step,
its plan and, once it ran, its runner over the shared resident values.

Where a variant's plan comes from (:meth:`StepPlans.plan_for`), first match wins:

1. the plans the user gave (matched by graph fingerprint);
2. the on-disk cache (:class:`~roam_core.formats.plan_cache.PlanCache`: JSON, validated);
3. the planner, once, with one :class:`NewShapeWarning` naming the shape and the seconds
   it took; the plan is cached.  ``on_new_shape="error"`` refuses instead
   (:class:`BatchMismatchError`).
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from roam_core.base.errors import ConfigError
from roam_core.model.graph import TensorKind
from roam_core.runtime.step_context import StepMismatchError

if TYPE_CHECKING:
    from roam_core.formats.plan_cache import PlanCache
    from roam_core.model.graph import Graph
    from roam_core.model.plan import Plan
    from roam_core.runtime.arena_runner import ArenaRunner
    from roam_core.runtime.program import Program
    from roam_core.runtime.scalars import OptimizerScalars
    from roam_core.trace.traced_step import TracedStep

__all__ = ["ON_NEW_SHAPE", "BatchMismatchError", "NewShapeWarning", "StepPlans", "Variant",
           "VariantKey", "batch_key", "planner_key"]

_logger = logging.getLogger(__name__)

#: What a batch of a shape without a plan does: trace and plan it, or refuse it.
ON_NEW_SHAPE = ("plan", "error")

Planner = Callable[["Graph"], "Plan"]


class BatchMismatchError(StepMismatchError):
    """A batch whose shapes, dtypes or non-tensor arguments the step has no plan for."""


class NewShapeWarning(UserWarning):
    """A batch shape was traced and planned during training (once per shape)."""


@dataclass(frozen=True, slots=True)
class VariantKey:
    """What selects a plan: the batch tensors' shapes and dtypes, and the micro-batch phase.

    Examples
    --------
    >>> k = batch_key([torch.zeros(4, 8), torch.zeros(4, dtype=torch.long), 3], "step")
    >>> k.describe()
    'batch (4, 8) float32, (4,) int64'
    """

    shapes: tuple[tuple[tuple[int, ...], str], ...]
    phase: str

    def describe(self) -> str:
        """``batch (4, 8) float32, (4,) int64`` (plus the micro-batch phase if any)."""
        parts = ", ".join(f"{s} {d}" for s, d in self.shapes)
        tail = f" ({self.phase} micro-batch)" if self.phase != "step" else ""
        return f"batch {parts}{tail}"


def batch_key(batch: Sequence[Any], phase: str) -> VariantKey:
    """The :class:`VariantKey` of a batch (non-tensor items are not part of it)."""
    return VariantKey(tuple((tuple(x.shape), str(x.dtype).replace("torch.", ""))
                            for x in batch if isinstance(x, torch.Tensor)), phase)


def planner_key(planner: Any) -> str:
    """A stable text naming how plans are made (part of the plan cache key)."""
    if planner is None or hasattr(planner, "__dataclass_fields__"):
        return f"roam:{planner!r}"
    key = getattr(planner, "roam_cache_key", None)
    if isinstance(key, str):
        return key
    return f"{getattr(planner, '__module__', '?')}.{getattr(planner, '__qualname__', planner)}"


@dataclass(eq=False)
class Variant:
    """One traced step of a :class:`~roam_core.runtime.planned_step.PlannedStep` and its plan.

    ``runner`` and ``program`` are built when the variant first runs (and again after the
    shared workspace grew); ``scalars`` is ``None`` for a micro-batch without update.
    """

    key: VariantKey
    traced: TracedStep
    plan: Plan
    scalars: OptimizerScalars | None
    workspace_bytes: int
    inputs: list[str]
    runner: ArenaRunner | None = None
    program: Program | None = None
    capture: Any = None
    calls: int = 0
    how: str = ""  # "given", "cache" or "planned"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def updates(self) -> bool:
        """Whether this micro-batch ends with the optimizer update."""
        return self.traced.spec.updates

    def drop_runner(self) -> None:
        """Forget the runner (its arena view is stale): rebuilt and checked on next use."""
        self.runner = self.program = self.capture = None


def workspace_bytes(traced: TracedStep, plan: Plan, shared: set[str]) -> int:
    """Bytes of the plan's range ``[low, high)`` of storages that are not ``shared``."""
    low, high = plan.arena_bytes, 0
    for t in traced.graph.tensors.values():
        if t.id in shared or not t.size_bytes:
            continue
        off = int(plan.offsets[t.id])
        low, high = min(low, off), max(high, off + t.size_bytes)
    return max(0, high - min(low, high))


class StepPlans:
    """Where the plans of a planned step come from (see the module notes).

    Parameters
    ----------
    plans : sequence of Plan
        Plans the user gave (any order; matched by graph fingerprint).
    planner : PlannerConfig or callable, optional
        How a new graph is planned: a :class:`~roam_core.planner.config.PlannerConfig` for
        :func:`roam_core.planner.make_plan` (default ``PlannerConfig(workers=1,
        time_limit_s=60)``), or a callable ``graph -> Plan`` (its ``roam_cache_key``
        attribute, if any, names it in the cache key).
    cache : PlanCache or None
        The on-disk cache (``None``: none).
    on_new_shape : {"plan", "error"}
        What a graph without a plan does.
    """

    def __init__(self, plans: Sequence[Plan], planner: Any, cache: PlanCache | None,
                 on_new_shape: str) -> None:
        if on_new_shape not in ON_NEW_SHAPE:
            raise ConfigError(f"on_new_shape must be one of {', '.join(ON_NEW_SHAPE)}, got "
                              f"{on_new_shape!r}")
        self.given = {p.graph_fingerprint: p for p in plans}
        self.planner = planner
        self.key = planner_key(planner)
        self.cache = cache
        self.on_new_shape = on_new_shape
        self.planned_seconds = 0.0

    def lookup(self, graph: Graph) -> tuple[Plan, str] | None:
        """A given or cached plan of ``graph``, with where it came from."""
        given = self.given.get(graph.fingerprint())
        if given is not None:
            return given, "given"
        if self.cache is not None:
            cached = self.cache.load(graph, self.key)
            if cached is not None:
                return cached, "cache"
        return None

    def plan_for(self, graph: Graph, what: str, trace_s: float, *,
                 asked: bool = False) -> tuple[Plan, str]:
        """The plan of ``graph`` (``what``: the shape, for messages); see the module notes.
        ``asked=True``: the user asked for this shape (the first batch of a step built
        without plans, :meth:`PlannedStep.prepare`): it is planned whatever
        ``on_new_shape`` says, and logged instead of warned about.

        Raises
        ------
        BatchMismatchError
            No given or cached plan and ``on_new_shape="error"``.
        """
        found = self.lookup(graph)
        if found is not None:
            if found[1] == "cache":
                _logger.info("PlannedStep: %s: plan from the cache", what)
            return found
        if self.on_new_shape == "error" and not asked:
            raise BatchMismatchError(
                f"{what}: the step has no plan for it and on_new_shape='error' (give "
                "PlannedStep a plan for this shape, pad batches to planned shapes "
                "(roam_core.runtime.buckets), or use on_new_shape='plan')")
        t0 = time.perf_counter()
        plan = self._make(graph)
        dt = time.perf_counter() - t0
        self.planned_seconds += dt
        where = ""
        if self.cache is not None:
            try:
                where = f"; cached in {self.cache.save(graph, self.key, plan)}"
            except OSError as e:  # a read-only cache must not stop training
                where = f"; not cached ({e})"
        msg = (f"PlannedStep: traced and planned a new {what} in {trace_s + dt:.1f} s "
               f"(trace {trace_s:.1f} s, plan {dt:.1f} s){where}")
        if not asked:
            warnings.warn(msg, NewShapeWarning, stacklevel=5)
        else:
            _logger.info("%s", msg)
        return plan, "planned"

    def _make(self, graph: Graph) -> Plan:
        if self.planner is not None and not hasattr(self.planner, "__dataclass_fields__"):
            return self.planner(graph)
        from roam_core.planner import make_plan
        from roam_core.planner.config import PlannerConfig

        cfg = self.planner or PlannerConfig(workers=1, time_limit_s=60.0)
        return make_plan(graph, cfg)


def shared_nodes(traced: TracedStep, kinds: frozenset[TensorKind]) -> set[str]:
    """Placeholder node names (= storage ids) of ``kinds``."""
    return {r.node for r in traced.placeholders if r.kind in kinds}


def check_batch(batch: Sequence[Any], example: Sequence[Any]) -> list[torch.Tensor]:
    """The batch's tensors; raises :class:`BatchMismatchError` when its length or a
    non-tensor item differs from the first batch's (those are baked into the trace)."""
    if len(batch) != len(example):
        raise BatchMismatchError(f"the step was traced with {len(example)} inputs, got "
                                 f"{len(batch)}")
    tensors = []
    for i, (x, ex) in enumerate(zip(batch, example, strict=True)):
        if isinstance(ex, torch.Tensor):
            if not isinstance(x, torch.Tensor):
                raise BatchMismatchError(f"input {i}: expected a tensor, got "
                                         f"{type(x).__name__}")
            tensors.append(x)
        elif isinstance(x, torch.Tensor) or not (x is ex or x == ex):
            raise BatchMismatchError(f"input {i}: got {x!r}, the step was traced with "
                                     f"{ex!r} (non-tensor inputs are part of the trace)")
    return tensors
