"""The :class:`Plan` record: an operator order plus a byte offset for every storage.

Arena convention: one arena holds every storage.  Resident storages (parameters, buffers,
inputs, optimizer state created before the step) are live for the whole step; planned
storages are live on their lifetime in ``order`` (see :mod:`roam_core.oracle.simulate`).  Every
offset is a multiple of ``alignment_bytes`` and every size is rounded up to it.
``arena_bytes`` is ``max(offset + rounded size)`` over all storages, so it covers the resident
bytes too, and ``arena_bytes >= planned_peak_bytes`` always.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from roam_core.base.status import SolveStatus
from roam_core.model.graph import ControlEdge, OpId, TensorId
from roam_core.model.recompute_ops import RecomputeOp
from roam_core.model.stage_cost import StageCost

__all__ = ["Plan", "SolveRecord"]


@dataclass(frozen=True, slots=True)
class SolveRecord:
    """Provenance of one solver call (a sub-task's ordering or layout, a merge, ...).

    Parameters
    ----------
    stage : str
        ``"order"``, ``"layout"``, ``"merge"``, ``"baseline"``, ...
    task_id : str
        The sub-task (or ``"global"``).
    status : SolveStatus
        How it ended (``OPTIMAL``, ``FEASIBLE``, ``HEURISTIC``, ``CANCELLED``, ...; a ``str``
        enum, written to plan files as its value).
    objective : int or None
        The value found (bytes), if any.
    best_bound : int or None
        The best proven bound (bytes), if any.
    wall_time_s : float
        Seconds spent.
    size : int
        Ops (order) or tensors (layout) in the problem.
    """

    stage: str
    task_id: str
    status: SolveStatus
    objective: int | None
    best_bound: int | None
    wall_time_s: float
    size: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.status, SolveStatus):  # a plain string of a member's value
            object.__setattr__(self, "status", SolveStatus(self.status))


@dataclass(frozen=True)
class Plan:
    """An execution plan for one graph.

    Parameters
    ----------
    graph_fingerprint : str
        ``Graph.fingerprint()`` of the graph it was made for.
    graph_name : str
        For people.
    method : str
        ``"roam"`` or the name of the baseline that produced the order.
    order : tuple of OpId
        The operator order.
    offsets : Mapping of TensorId to int
        Byte offset of every storage (resident and planned) in the arena.
    alignment_bytes : int
        Offset and size granularity.
    arena_bytes : int
        ``max(offset + rounded size)``; covers the resident storages.
    planned_peak_bytes : int
        Simulated peak of ``order`` including the resident bytes.
    resident_bytes : int
        Rounded bytes of the resident storages.
    baseline_peak_bytes : int
        Simulated peak of program (eager) order, "allocated".
    lower_bound_bytes : int
        Live-set lower bound on the peak of any valid order.
    live_bytes : tuple of int
        Per-step live bytes of ``order`` (planned storages only; add ``resident_bytes``).
    solve_seconds : float
        Wall time of the whole planning run.
    task_tree : Mapping or None
        JSON summary of the planner's task tree (see ``roam_core.ordering.decompose``).
    task_of_op : Mapping of OpId to str
        The sub-task each op was ordered in (empty for baselines).
    extra_edges : tuple of ControlEdge
        Ordering rewrites the planner added (weight-update placement); the order honours
        them, but a valid plan need not.
    provenance : tuple of SolveRecord
        Every solver call.
    settings : Mapping
        The planner settings used.
    notes : tuple of str
        Human-readable remarks (e.g. "returned the best baseline: it was better").
    recompute : tuple of RecomputeOp
        Forward ops re-run in the backward to rebuild dropped storages (empty: nothing is
        recomputed).  ``order`` then contains the recompute ops' ids and ``offsets`` their
        new storages; lifetimes, peaks and checks are those of
        :func:`roam_core.model.recompute_ops.expand_graph` ``(graph, recompute)``.
    extra_flops : int
        FLOPs the recompute ops add to the step (0 without recomputation).
    step_flops : int
        FLOPs of the step without recomputation (0 when unknown).
    extra_seconds : float
        Estimated seconds the recompute ops add to the step on ``device_profile``
        (:mod:`roam_core.model.cost_model`; 0 without recomputation).
    step_seconds : float
        Estimated seconds of the step without recomputation on ``device_profile`` (0 when
        unknown: plans made before the cost model).
    device_profile : str
        The device profile the seconds are estimated on (``""``: none, older plans).
    stages : tuple of StageCost
        Per planner stage, in the order they ran: seconds, bytes gained, work against its
        budget and why it stopped (:mod:`roam_core.model.stage_cost`; empty in plans made
        before stages were recorded).
    """

    graph_fingerprint: str
    graph_name: str
    method: str
    order: tuple[OpId, ...]
    offsets: Mapping[TensorId, int]
    alignment_bytes: int
    arena_bytes: int
    planned_peak_bytes: int
    resident_bytes: int
    baseline_peak_bytes: int
    lower_bound_bytes: int
    live_bytes: tuple[int, ...] = ()
    solve_seconds: float = 0.0
    task_tree: Mapping[str, Any] | None = None
    task_of_op: Mapping[OpId, str] = field(default_factory=dict)
    extra_edges: tuple[ControlEdge, ...] = ()
    provenance: tuple[SolveRecord, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    recompute: tuple[RecomputeOp, ...] = ()
    extra_flops: int = 0
    step_flops: int = 0
    extra_seconds: float = 0.0
    step_seconds: float = 0.0
    device_profile: str = ""
    stages: tuple[StageCost, ...] = ()

    @property
    def proven_gap(self) -> float | None:
        """Planned peak / best proven lower bound (1.0: proven optimal order); ``None``
        without a bound."""
        if self.lower_bound_bytes <= 0:
            return None
        return self.planned_peak_bytes / self.lower_bound_bytes

    @property
    def fragmentation(self) -> float:
        """``arena_bytes / planned_peak_bytes - 1`` (0 when the layout is perfect)."""
        return self.arena_bytes / self.planned_peak_bytes - 1 if self.planned_peak_bytes else 0.0
