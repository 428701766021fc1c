"""What a re-run costs: the budget planner's objective, per op, in one unit.

:func:`rerun_costs` gives, for every op of a graph, the cost of running it once more:

* objective ``"time"`` (the default) -- its estimated seconds on the configured device
  profile (:mod:`roam_core.model.cost_model`: a roofline of FLOPs and bytes moved, plus
  launch overhead), so an elementwise re-run costs its bytes at memory bandwidth;
* objective ``"flops"`` -- FLOPs + ``bytes_weight`` x bytes moved (the objective before the
  cost model).

Every search (greedy, portfolio, windows, exact model) reads :attr:`RerunCosts.cost` and
nothing else, and every result also reports :attr:`RerunCosts.seconds` (the estimate on the
profile whatever the objective).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from roam_core.base.graph_cache import PerGraphCache
from roam_core.formats.device_profile_io import resolve_profile
from roam_core.model.cost_model import DeviceProfile, ops_seconds
from roam_core.model.graph import Graph, OpId
from roam_core.model.recompute_ops import op_bytes_moved, op_flops
from roam_core.recompute.config import RecomputeConfig

__all__ = ["RerunCosts", "rerun_costs"]


@dataclass(frozen=True, eq=False)
class RerunCosts:
    """The cost of one re-run of each op of one graph.

    Parameters
    ----------
    objective : str
        ``"time"`` or ``"flops"``.
    profile : DeviceProfile
        The device the seconds are estimated on.
    cost : Mapping of OpId to float
        The objective's cost of one run (seconds, or FLOPs + w x bytes).
    seconds : Mapping of OpId to float
        Estimated seconds of one run on ``profile``.
    unit : str
        The unit of ``cost`` for people (``"s"``, ``"FLOP"``).
    epsilon : float
        A cost too small to matter (it keeps ratios of bytes per cost finite: 1 ns, or
        1 FLOP).
    integer_scale : float
        Multiplier that makes costs integers for CP-SAT (1e9: nanoseconds; 1 for FLOPs).
    """

    objective: str
    profile: DeviceProfile
    cost: Mapping[OpId, float]
    seconds: Mapping[OpId, float]
    unit: str
    epsilon: float
    integer_scale: float

    def integer(self, value: float) -> int:
        """``value`` (in the objective's unit) as a CP-SAT integer."""
        return round(value * self.integer_scale)

    def describe(self) -> str:
        """``"estimated time on h100-sxm"`` style, for notes."""
        return (f"estimated time on {self.profile.name}" if self.objective == "time"
                else "FLOPs + bytes moved")


_CACHE: PerGraphCache[RerunCosts] = PerGraphCache(max_entries=8)


def rerun_costs(graph: Graph, config: RecomputeConfig | None = None,
                profile: DeviceProfile | None = None) -> RerunCosts:
    """The :class:`RerunCosts` of ``graph`` under ``config`` (cached per graph).

    Parameters
    ----------
    graph : Graph
        The graph.
    config : RecomputeConfig, optional
        Objective, device profile and bytes weight (default: :class:`RecomputeConfig`).
    profile : DeviceProfile, optional
        The profile itself (else ``config.device_profile`` is resolved by name).

    Raises
    ------
    ConfigError
        An unknown or uncalibrated device profile.
    """
    cfg = config or RecomputeConfig()
    prof = profile or resolve_profile(cfg.device_profile)
    key = (cfg.objective, cfg.bytes_weight, prof.name,
           tuple(sorted(prof.matmul_flops_per_s.items())), prof.memory_bandwidth_bytes_per_s,
           prof.launch_overhead_s, tuple(sorted(prof.efficiency.items())))

    def build() -> RerunCosts:
        secs = ops_seconds(graph, prof)
        if cfg.objective == "time":
            return RerunCosts("time", prof, secs, secs, "s", 1e-9, 1e9)
        w = cfg.bytes_weight
        cost = {op.id: float(op_flops(graph, op) + w * op_bytes_moved(graph, op))
                for op in graph.ops}
        return RerunCosts("flops", prof, cost, secs, "FLOP", 1.0, 1.0)

    return _CACHE.get_or_build(graph, build, key)
