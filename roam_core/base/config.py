"""Planner knobs: frozen dataclasses with defaults and one comment per field.

Every setting the ROAM planner reads lives here (minimalloc ``SolverParams`` style), so a plan
can record exactly what produced it (:meth:`PlannerConfig.to_dict`).  Layout (arena) settings
belong to :mod:`roam_core.layout.arena`.

Examples
--------
>>> cfg = PlannerConfig(node_limit=40, order=OrderSolverConfig(time_limit_s=2.0))
>>> cfg.order.time_limit_s, cfg.node_limit
(2.0, 40)
>>> PlannerConfig.from_dict(cfg.to_dict()) == cfg
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

__all__ = ["UPDATE_POLICIES", "OrderSolverConfig", "PlannerConfig"]

#: Weight-update placement policies understood by :mod:`roam_core.ordering.rewrites`.
UPDATE_POLICIES = ("cost_aware", "asap", "none")


@dataclass(frozen=True, slots=True)
class OrderSolverConfig:
    """Settings of one CP-SAT ordering solve (one sub-task)."""

    # Wall-clock limit per sub-task solve, seconds.
    time_limit_s: float = 5.0
    # CP-SAT search workers per sub-task.  1 keeps the search deterministic; sub-tasks are
    # parallelised by the planner's executor instead.
    num_search_workers: int = 1
    # CP-SAT random seed (with ``deterministic`` and one worker, same seed -> same plan).
    random_seed: int = 0
    # Bound each solve by CP-SAT *deterministic* time (= ``time_limit_s``) so that results do
    # not depend on machine speed; the wall limit then becomes ``wall_slack`` x the limit.
    deterministic: bool = True
    # Safety factor on the wall limit when ``deterministic`` is set.
    wall_slack: float = 4.0
    # Stop a solve early once the sub-task peak is at or below the global lower bound (no
    # order can do better for the whole graph, so further search is wasted).
    stop_at_lower_bound: bool = True
    # Relative gap at which CP-SAT stops (0 = prove optimality).
    relative_gap: float = 0.0
    # Largest range (ops) modelled exactly; longer ranges keep the hint order.
    max_range_ops: int = 400
    # Log CP-SAT search progress (debugging only).
    log_search: bool = False


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """Settings of :func:`roam_core.planner.make_plan`."""

    # NL: the most ops one sub-task orders itself (ROAM's node limit; the paper uses 30-300).
    node_limit: int = 60
    # Per-sub-task CP-SAT settings.
    order: OrderSolverConfig = field(default_factory=OrderSolverConfig)
    # Overall budget, seconds (None = no cap): sub-tasks not finished in time keep the base
    # order, and the layout gets what is left (at least 1 s, at most layout_time_limit_s).
    time_limit_s: float | None = None
    # Worker processes for sub-task solves (None = one per CPU; 1 = in-process, no pool).
    workers: int | None = None
    # Weight-update placement: "cost_aware" (ASAP unless that raises the peak), "asap"
    # (right after the gradient, ROAM's constrain_weight_updates_early) or "none".
    update_policy: str = "cost_aware"
    # Zero-fan-in ops (constants, state inits) run just before their first consumer.
    zero_fanin_just_in_time: bool = True
    # Heuristic orders tried for the hint and the "never worse" guard (None = all registered).
    baselines: tuple[str, ...] | None = None
    # Allocator granularity: every storage is rounded up to a multiple of this.
    alignment_bytes: int = 512
    # Polishing rounds after the merge: re-solve a window of ``2 * node_limit`` steps centred
    # on the peak step of the merged order (windows may straddle sub-task borders).
    polish_rounds: int = 4
    # Compute the arena layout with the layout solvers (False: greedy best-fit only).
    solve_layout: bool = True
    # Budget of the layout stage, seconds.
    layout_time_limit_s: float = 20.0
    # Memory budget (bytes, resident included) for the arena; None: no recomputation, just
    # the lowest peak by order and layout.  "auto": the knee of the recomputation frontier.
    # With a budget the planner drops forward storages and recomputes them in the backward,
    # minimising the added cost, so that the arena fits.
    budget_bytes: int | str | None = None
    # Recompute cost of one byte moved, in FLOPs (elementwise re-runs count 0 FLOPs in
    # torch's counter but still move bytes); the objective is FLOPs + this x bytes.
    recompute_bytes_weight: float = 1.0
    # Graphs with at most this many ops get the exact recomputation model (CP-SAT over the
    # drop decisions and the order together, roam_core.recompute.exact); larger ones the
    # greedy trajectory over the planner's order (roam_core.recompute.greedy).
    recompute_exact_max_ops: int = 60
    # CP-SAT (deterministic) seconds of the exact recomputation model.
    recompute_exact_time_limit_s: float = 20.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able settings (for ``Plan.settings``)."""
        out = asdict(self)
        out["baselines"] = list(self.baselines) if self.baselines is not None else None
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlannerConfig:
        """Inverse of :meth:`to_dict`; unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        if isinstance(kw.get("order"), Mapping):
            okeys = {f.name for f in fields(OrderSolverConfig)}
            kw["order"] = OrderSolverConfig(**{k: v for k, v in kw["order"].items()
                                               if k in okeys})
        if kw.get("baselines") is not None:
            kw["baselines"] = tuple(kw["baselines"])
        return cls(**kw)

    def with_order(self, **changes: Any) -> PlannerConfig:
        """A copy with some :class:`OrderSolverConfig` fields changed."""
        return replace(self, order=replace(self.order, **changes))
