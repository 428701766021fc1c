"""Settings of :func:`roam_core.planner.make_plan`: one frozen dataclass per layer, nested.

Every setting the planner reads is here or in the config of the layer that consumes it
(:class:`~roam_core.ordering.config.OrderSolverConfig`,
:class:`~roam_core.layout.config.ArenaConfig`,
:class:`~roam_core.recompute.config.RecomputeConfig`), so a plan records exactly what made it
(:meth:`PlannerConfig.to_dict`).  An impossible setting raises
:class:`~roam_core.base.errors.ConfigError` when the config is made.

Examples
--------
>>> cfg = PlannerConfig(node_limit=40, order=OrderSolverConfig(time_limit_s=2.0))
>>> cfg.order.time_limit_s, cfg.node_limit
(2.0, 40)
>>> PlannerConfig.from_dict(cfg.to_dict()) == cfg
True
>>> old = PlannerConfig.from_dict({"recompute_windows": 16})  # old plan files
>>> old.recompute.windows, old.recompute.objective
(16, 'flops')
>>> PlannerConfig(workers=0)
Traceback (most recent call last):
    ...
roam_core.base.errors.ConfigError: workers must be at least 1, not 0
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from roam_core.base.checks import at_least as _at_least
from roam_core.base.errors import ConfigError
from roam_core.layout.config import ArenaConfig
from roam_core.model.stage_cost import good_enough_bytes
from roam_core.ordering.config import UPDATE_POLICIES, OrderSolverConfig
from roam_core.recompute.config import RecomputeConfig

__all__ = ["ArenaConfig", "OrderSolverConfig", "PlannerConfig", "RecomputeConfig"]


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
    # Peak-directed search over the whole order on the input graph (no rewrites, no tree
    # borders; :mod:`roam_core.ordering.lns`): candidate orders scored at most (0 = off).  A
    # work limit, not a clock, so the plan does not depend on machine load.
    search_evaluations: int = 4000
    # When a gap to the lower bound is left, tighten the bound with the choice bound over
    # forward-value groups (backward products of forward values,
    # :func:`roam_core.oracle.bounds.op_groups.forward_value_groups`), the peak-window chain
    # bound (:func:`roam_core.oracle.bounds.chain.peak_window_chain_bound`, the plan's peak
    # against its greedy chain) and the chain-group bound
    # (:func:`roam_core.oracle.bounds.chain.chain_group_lower_bound`; a few seconds on
    # thousands of ops), cheapest first, while a gap is left.
    # Plan.lower_bound_bytes / proven_gap report the best bound proven.
    tighten_bound: bool = True
    # Compute the arena layout with the layout solvers (False: greedy best-fit only).
    solve_layout: bool = True
    # Safety limit of the layout stage, CPU seconds of the layout's thread (its steps are
    # cut by work; roam_core/base/cpu_clock.py).  On the wall clock it bound on a loaded
    # machine and the layout moved with the load (efficientnet_b0 b1's layout is about 8
    # CPU s; at 20 wall s its flip, repair, shake and polish were cut at load 4.9 on 2
    # cores: 228 KiB above its peak instead of 41 KiB); CPU seconds do not grow with it.
    layout_time_limit_s: float = 60.0
    # The value contract (docs/planning_time.md): every stage that only polishes (the
    # layout's promotion, repair, flip, shake and CP-SAT polish, the peak windows, the
    # whole-order search, the tighter bounds) is skipped or stops once what it polishes is
    # within max(good_enough_gap x bound, good_enough_bytes) of its bound: the arena of the
    # planned peak, the planned peak of the proven lower bound.  0 and 0: polish to the bound.
    good_enough_gap: float = 1e-4
    good_enough_bytes: int = 64 * 1024
    # Memory budget (bytes, resident included) for the arena; None: no recomputation, just
    # the lowest peak by order and layout.  "auto": the knee of the recomputation frontier.
    # With a budget the planner drops forward storages and recomputes them in the backward,
    # minimising the added cost, so that the arena fits.
    budget_bytes: int | str | None = None
    # Recomputation under a budget: how drops are chosen (roam_core.recompute.config).
    recompute: RecomputeConfig = field(default_factory=RecomputeConfig)
    # Arena layout settings (alignment, budget and seed follow the fields above).
    arena: ArenaConfig = field(default_factory=ArenaConfig)

    def __post_init__(self) -> None:
        _at_least("node_limit", self.node_limit, 1)
        if not isinstance(self.order, OrderSolverConfig):
            raise ConfigError(f"order must be an OrderSolverConfig, not "
                              f"{type(self.order).__name__}")
        if self.time_limit_s is not None:
            _at_least("time_limit_s", self.time_limit_s, 0.0)
        if self.workers is not None:
            _at_least("workers", self.workers, 1)
        if self.update_policy not in UPDATE_POLICIES:
            raise ConfigError(f"unknown update policy {self.update_policy!r}; known: "
                              f"{', '.join(UPDATE_POLICIES)}")
        if self.baselines is not None and (isinstance(self.baselines, str) or not all(
                isinstance(b, str) for b in self.baselines)):
            raise ConfigError(f"baselines must be a tuple of method names, not "
                              f"{self.baselines!r}")
        _at_least("alignment_bytes", self.alignment_bytes, 1)
        _at_least("polish_rounds", self.polish_rounds, 0)
        _at_least("search_evaluations", self.search_evaluations, 0)
        _at_least("layout_time_limit_s", self.layout_time_limit_s, 0.0)
        _at_least("good_enough_gap", self.good_enough_gap, 0.0)
        _at_least("good_enough_bytes", self.good_enough_bytes, 0)
        bud = self.budget_bytes
        if bud is not None and bud != "auto" and (isinstance(bud, bool) or not isinstance(
                bud, int) or bud <= 0):
            raise ConfigError(f"budget_bytes must be a positive number of bytes, 'auto' or "
                              f"None, not {bud!r}")
        if not isinstance(self.recompute, RecomputeConfig):
            raise ConfigError(f"recompute must be a RecomputeConfig, not "
                              f"{type(self.recompute).__name__}")
        if not isinstance(self.arena, ArenaConfig):
            raise ConfigError(f"arena must be an ArenaConfig, not {type(self.arena).__name__}")
        # one source for each: the arena follows the planner (also after ``replace``)
        object.__setattr__(self, "arena", replace(
            self.arena, alignment_bytes=self.alignment_bytes,
            time_limit_s=self.layout_time_limit_s, seed=self.order.random_seed,
            good_enough_gap=self.good_enough_gap, good_enough_bytes=self.good_enough_bytes))

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
        # settings written before RecomputeConfig existed: flat ``recompute_*`` keys
        legacy = {k.removeprefix("recompute_"): v for k, v in data.items()
                  if k.startswith("recompute_")}
        if legacy and not isinstance(kw.get("recompute"), Mapping):
            kw["recompute"] = legacy
        rec = kw.get("recompute")
        if isinstance(rec, Mapping) and "objective" not in rec:
            # plans made before the cost model minimised FLOPs + bytes_weight x bytes
            kw["recompute"] = {**rec, "objective": "flops"}
        for key, sub in (("order", OrderSolverConfig), ("arena", ArenaConfig),
                         ("recompute", RecomputeConfig)):
            if isinstance(kw.get(key), Mapping):
                skeys = {f.name for f in fields(sub)}
                kw[key] = sub(**{k: v for k, v in kw[key].items() if k in skeys})
        if kw.get("baselines") is not None:
            kw["baselines"] = tuple(kw["baselines"])
        return cls(**kw)

    def good_enough(self, bound_bytes: int) -> int:
        """The contract's slack above ``bound_bytes``: ``max(ceil(good_enough_gap x bound),
        good_enough_bytes)``.

        >>> PlannerConfig().good_enough(2 * 2**30)
        214749
        """
        return good_enough_bytes(bound_bytes, self.good_enough_gap, self.good_enough_bytes)

    def with_order(self, **changes: Any) -> PlannerConfig:
        """A copy with some :class:`OrderSolverConfig` fields changed."""
        return replace(self, order=replace(self.order, **changes))

    def with_recompute(self, **changes: Any) -> PlannerConfig:
        """A copy with some :class:`RecomputeConfig` fields changed."""
        return replace(self, recompute=replace(self.recompute, **changes))
