"""Settings of recomputation under a memory budget (the ``recompute`` part of a plan's settings).

Examples
--------
>>> RecomputeConfig(exact_max_ops=0).exact_max_ops
0
>>> RecomputeConfig(windows=-1)
Traceback (most recent call last):
    ...
roam_core.base.errors.ConfigError: recompute.windows must be at least 0, not -1
"""

from __future__ import annotations

from dataclasses import dataclass

from roam_core.base.checks import at_least as _at_least
from roam_core.base.errors import ConfigError
from roam_core.model.device_profiles import DEFAULT_PROFILE

__all__ = ["OBJECTIVES", "RecomputeConfig"]

#: The objectives the budget planner can minimise.
OBJECTIVES = ("time", "flops")


@dataclass(frozen=True, slots=True)
class RecomputeConfig:
    """How the budget planner chooses what to drop and recompute."""

    # What the planner minimises: "time" -- the estimated seconds of the re-runs on
    # device_profile (roam_core.model.cost_model: a roofline of FLOPs and bytes moved plus
    # launch overhead); "flops" -- FLOPs + bytes_weight x bytes moved (the objective before
    # the cost model; elementwise re-runs count 0 FLOPs in torch's counter).
    objective: str = "time"
    # The device the re-runs are priced on: a published profile (h100-sxm, a100-80g, h200),
    # a measured one (cpu, cuda: `roam calibrate`) or a profile JSON file.  Extra seconds are
    # reported on it whatever the objective.
    device_profile: str = DEFAULT_PROFILE
    # With objective "flops": the cost of one byte moved, in FLOPs.
    bytes_weight: float = 1.0
    # Graphs with at most this many ops get the exact recomputation model (CP-SAT over the
    # drop decisions and the order together, roam_core.recompute.exact); larger ones the
    # greedy trajectory over the planner's order (roam_core.recompute.greedy).
    exact_max_ops: int = 60
    # CP-SAT (deterministic) seconds of the exact recomputation model.
    exact_time_limit_s: float = 20.0
    # With a budget, also try the module-structure baselines' drop sets (every block, every
    # 2nd block, sqrt segments, ...) beside the greedy prefix, each pruned to the budget, and
    # keep the cheapest that fits (roam_core.recompute.improve).  Off for a single budget:
    # on GPT2-XL b8 at 80 GiB it halves the extra FLOPs (+0.32% -> +0.16%) but takes 149
    # instead of 19 CPU s.  `roam frontier` turns it on.
    portfolio: bool = False
    # After the greedy (and the portfolio), refine the cheapest drop set that fits by exact
    # windows (roam_core.recompute.windows): at most this many CP-SAT models per budget, each
    # deciding the drops of window_size storages around one costly drop with every other
    # decision fixed (memory modelled exactly from the fixed order, just-in-time re-runs); a
    # window's answer is kept when the evaluator confirms it fits and costs less.  0: off (the
    # default: on the frontier graphs it rarely lowers the extra FLOPs -- once in 30 budgets,
    # ResNet-50 b8 -- for 2-10x the CPU of a budget, benchmarks/results/windows.md; on small
    # random graphs it reaches the fixed-order optimum where the greedy is far above it).
    # 16 is a good value to turn it on.
    windows: int = 0
    # Storages one window decides.
    window_size: int = 12
    # CP-SAT deterministic seconds per window (one worker, fixed seed: reproducible).
    window_time_limit_s: float = 1.0
    # A candidate whose planned (order) peak fits the budget but whose laid-out arena does
    # not is laid out again with this many times the layout's work and safety limit
    # (ArenaConfig.with_effort) before the planner aims lower or takes a costlier drop set:
    # the overshoot is the layout's, not the drop set's.  0: off.
    relayout_effort: float = 4.0

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"unknown recompute objective {self.objective!r}; known: "
                              f"{', '.join(OBJECTIVES)}")
        if not isinstance(self.device_profile, str) or not self.device_profile:
            raise ConfigError(f"recompute.device_profile must name a device profile, not "
                              f"{self.device_profile!r}")
        _at_least("recompute.bytes_weight", self.bytes_weight, 0.0)
        _at_least("recompute.exact_max_ops", self.exact_max_ops, 0)
        _at_least("recompute.exact_time_limit_s", self.exact_time_limit_s, 0.0)
        _at_least("recompute.windows", self.windows, 0)
        _at_least("recompute.window_size", self.window_size, 1)
        _at_least("recompute.window_time_limit_s", self.window_time_limit_s, 0.0)
        if self.relayout_effort != 0:
            _at_least("recompute.relayout_effort", self.relayout_effort, 1.0)
