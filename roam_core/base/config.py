"""Planner knobs: frozen dataclasses with defaults and one comment per field.

Every setting the ROAM planner reads lives here (minimalloc ``SolverParams`` style), so a plan
can record exactly what produced it (:meth:`PlannerConfig.to_dict`), the arena layout's
settings (:class:`ArenaConfig`, ``PlannerConfig.arena``) included.  An impossible setting
(a negative time limit, no workers, an unknown update policy) raises
:class:`~roam_core.base.errors.ConfigError` when the config is made.

Examples
--------
>>> cfg = PlannerConfig(node_limit=40, order=OrderSolverConfig(time_limit_s=2.0))
>>> cfg.order.time_limit_s, cfg.node_limit
(2.0, 40)
>>> PlannerConfig.from_dict(cfg.to_dict()) == cfg
True
>>> PlannerConfig(workers=0)
Traceback (most recent call last):
    ...
roam_core.base.errors.ConfigError: workers must be at least 1, not 0
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from roam_core.base.errors import ConfigError

__all__ = ["UPDATE_POLICIES", "ArenaConfig", "OrderSolverConfig", "PlannerConfig"]

#: Weight-update placement policies understood by :mod:`roam_core.ordering.rewrites`.
UPDATE_POLICIES = ("cost_aware", "asap", "none")


def _at_least(name: str, value: Any, low: float) -> None:
    """Raise :class:`ConfigError` unless ``value`` is a number ``>= low`` (an int when
    ``low`` is)."""
    kinds: tuple[type, ...] = (int,) if isinstance(low, int) else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        kind = "an integer" if kinds == (int,) else "a number"
        raise ConfigError(f"{name} must be {kind}, not {value!r}")
    if not value >= low:  # also catches NaN
        raise ConfigError(f"{name} must be at least {low}, not {value!r}")


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

    def __post_init__(self) -> None:
        _at_least("order.time_limit_s", self.time_limit_s, 0.0)
        _at_least("order.num_search_workers", self.num_search_workers, 1)
        _at_least("order.wall_slack", self.wall_slack, 1.0)
        _at_least("order.relative_gap", self.relative_gap, 0.0)
        _at_least("order.max_range_ops", self.max_range_ops, 1)


@dataclass(frozen=True, slots=True)
class ArenaConfig:
    """Settings of the arena layout (:func:`roam_core.layout.arena.plan_arena`).

    Inside a :class:`PlannerConfig` (its ``arena`` field), ``alignment_bytes``, ``time_limit_s``
    and ``seed`` always follow the planner's ``alignment_bytes``, ``layout_time_limit_s`` and
    ``order.random_seed`` (set those there; the planner also caps the layout budget by what
    ``PlannerConfig.time_limit_s`` leaves).

    Parameters
    ----------
    alignment_bytes : int
        Offset and size granularity (512 like CUDA's caching allocator).
    time_limit_s : float
        Budget of the whole layout (portfolio and sub-task models together).
    task_time_limit_s : float
        CP-SAT limit per sub-task group.
    use_cpsat : bool
        Run the activation-stack + CP-SAT candidate (steps 1-3).
    max_group_tensors : int
        Groups larger than this are cut into chronological chunks for CP-SAT.
    use_dsa : bool
        Run the DSA portfolio candidate (step 4).
    dsa_exact : bool
        Let the DSA candidate run its canonical search (else greedy orders only).
    flip_compact : bool
        Mirror-and-compact every candidate (step 5, cheap) before the polish.
    shake_rounds : int
        Rounds of randomised flip-compaction on the winner (step 5; 0 = off).
    peak_repair : bool
        Re-place the buffers around the load peak of the winner with the exact DSA search
        (step 5; needs ``use_dsa`` and ``dsa_exact``).
    num_workers : int
        CP-SAT workers.
    seed : int
        CP-SAT random seed.
    """

    alignment_bytes: int = 512
    time_limit_s: float = 60.0
    task_time_limit_s: float = 5.0
    use_cpsat: bool = True
    max_group_tensors: int = 150
    use_dsa: bool = True
    dsa_exact: bool = True
    flip_compact: bool = True
    shake_rounds: int = 60
    peak_repair: bool = True
    num_workers: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        _at_least("arena.alignment_bytes", self.alignment_bytes, 1)
        _at_least("arena.time_limit_s", self.time_limit_s, 0.0)
        _at_least("arena.task_time_limit_s", self.task_time_limit_s, 0.0)
        _at_least("arena.max_group_tensors", self.max_group_tensors, 1)
        _at_least("arena.shake_rounds", self.shake_rounds, 0)
        _at_least("arena.num_workers", self.num_workers, 1)


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
    # :func:`roam_core.oracle.proven_bounds.forward_value_groups`), the peak-window chain
    # bound (:func:`roam_core.oracle.proven_bounds.peak_window_chain_bound`, the plan's peak
    # against its greedy chain) and the chain-group bound
    # (:func:`roam_core.oracle.proven_bounds.chain_group_lower_bound`; a few seconds on
    # thousands of ops), cheapest first, while a gap is left.
    # Plan.lower_bound_bytes / proven_gap report the best bound proven.
    tighten_bound: bool = True
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
    # With a budget, also try the module-structure baselines' drop sets (every block, every
    # 2nd block, sqrt segments, ...) beside the greedy prefix, each pruned to the budget, and
    # keep the cheapest that fits (roam_core.recompute.improve).  Off for a single budget:
    # on GPT2-XL b8 at 80 GiB it halves the extra FLOPs (+0.32% -> +0.16%) but takes 149
    # instead of 19 CPU s.  `roam frontier` turns it on.
    recompute_portfolio: bool = False
    # After the greedy (and the portfolio), refine the cheapest drop set that fits by exact
    # windows (roam_core.recompute.windows): at most this many CP-SAT models per budget, each
    # deciding the drops of recompute_window_size storages around one costly drop with every
    # other decision fixed (memory modelled exactly from the fixed order, just-in-time
    # re-runs); a window's answer is kept when the evaluator confirms it fits and costs less.
    # 0: off (the default: on the frontier graphs it rarely lowers the extra FLOPs -- once
    # in 30 budgets, ResNet-50 b8 -- for 2-10x the CPU of a budget,
    # benchmarks/results/windows.md; on small random graphs it reaches the fixed-order
    # optimum where the greedy is far above it).  16 is a good value to turn it on.
    recompute_windows: int = 0
    # Storages one window decides.
    recompute_window_size: int = 12
    # CP-SAT deterministic seconds per window (one worker, fixed seed: reproducible).
    recompute_window_time_limit_s: float = 1.0
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
        bud = self.budget_bytes
        if bud is not None and bud != "auto" and (isinstance(bud, bool) or not isinstance(
                bud, int) or bud <= 0):
            raise ConfigError(f"budget_bytes must be a positive number of bytes, 'auto' or "
                              f"None, not {bud!r}")
        _at_least("recompute_bytes_weight", self.recompute_bytes_weight, 0.0)
        _at_least("recompute_exact_max_ops", self.recompute_exact_max_ops, 0)
        _at_least("recompute_exact_time_limit_s", self.recompute_exact_time_limit_s, 0.0)
        _at_least("recompute_windows", self.recompute_windows, 0)
        _at_least("recompute_window_size", self.recompute_window_size, 1)
        _at_least("recompute_window_time_limit_s", self.recompute_window_time_limit_s, 0.0)
        if not isinstance(self.arena, ArenaConfig):
            raise ConfigError(f"arena must be an ArenaConfig, not {type(self.arena).__name__}")
        # one source for each: the arena follows the planner (also after ``replace``)
        object.__setattr__(self, "arena", replace(
            self.arena, alignment_bytes=self.alignment_bytes,
            time_limit_s=self.layout_time_limit_s, seed=self.order.random_seed))

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
        for key, sub in (("order", OrderSolverConfig), ("arena", ArenaConfig)):
            if isinstance(kw.get(key), Mapping):
                skeys = {f.name for f in fields(sub)}
                kw[key] = sub(**{k: v for k, v in kw[key].items() if k in skeys})
        if kw.get("baselines") is not None:
            kw["baselines"] = tuple(kw["baselines"])
        return cls(**kw)

    def with_order(self, **changes: Any) -> PlannerConfig:
        """A copy with some :class:`OrderSolverConfig` fields changed."""
        return replace(self, order=replace(self.order, **changes))
