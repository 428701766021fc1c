"""What fits: the memory a graph needs four ways, and the largest configuration under a size.

For one traced graph (one batch size / sequence length) :func:`fit_row` measures

* ``eager_reserved``: PyTorch eager's reserved memory (the simulated caching allocator on the
  program order, :func:`~roam_core.oracle.allocator_sim.simulate_allocator`);
* ``roam``: roam's arena without recomputation;
* ``roam_recompute_<p>pct``: the smallest arena roam reaches with recomputation adding at
  most ``p`` % extra time (the greedy trajectory's lowest peak within that cost, planned and
  laid out by :class:`~roam_core.planner.budget.BudgetPlanner`).  With ``memory_bytes`` given,
  only what decides "fits" is planned: nothing when roam fits without recomputation, else
  the cheapest plan that fits (``plan_at(memory_bytes)``), which fits a method when its extra
  time is within the method's limit.

**Extra time.**  A plan's extra time is its re-runs' estimated seconds on the planner's
device profile (``config.recompute.device_profile``, :mod:`roam_core.model.cost_model`: a
roofline per op, so bandwidth-bound elementwise re-runs cost time too) as a share of the
step's estimated seconds (:func:`extra_time_pct`); rows record the profile.

:func:`largest_fitting` then answers "largest batch (tokens) that fits ``memory_bytes``"
for each method over a sweep of rows.  Torch-free: the caller traces (``roam_core.zoo``;
:mod:`roam_core.zoo.fit_sweep` runs whole sweeps, on a Dask cluster too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roam_core.base.errors import BudgetInfeasibleError
from roam_core.model.graph import Graph
from roam_core.planner.config import PlannerConfig

__all__ = ["EXTRA_TIME_ESTIMATE", "FIT_METHODS", "FitRow", "extra_time_pct", "fit_row",
           "largest_fitting", "method_label"]

#: Extra-time limits (percent of the step) of the recomputation methods.
RECOMPUTE_LIMITS_PCT = (5.0, 25.0)
#: How :func:`extra_time_pct` estimates extra time (printed by ``roam fit``).
EXTRA_TIME_ESTIMATE = ("extra time: the re-runs' estimated seconds as a share of the step's, "
                       "on the device profile's roofline (docs/cost_model.md)")


def extra_time_pct(extra_seconds: float, step_seconds: float) -> float:
    """A recomputation plan's extra time, percent of the step's (see the module notes).

    Examples
    --------
    >>> extra_time_pct(0.05, 1.0), extra_time_pct(1e-3, 0.0)
    (5.0, 100.0)
    """
    if step_seconds <= 0:  # a step priced at 0 s: a re-run is not free, call it 100 %
        return 0.0 if extra_seconds <= 0 else 100.0
    return 100.0 * float(extra_seconds) / float(step_seconds)
#: Methods of a :class:`FitRow`, in report order.
FIT_METHODS = ("eager_reserved", "roam", "roam_recompute_5pct", "roam_recompute_25pct")


def method_label(method: str) -> str:
    """Words for a method name (``"roam_recompute_5pct"`` -> ``"roam + recompute ≤5% time"``)."""
    if method == "eager_reserved":
        return "PyTorch eager (reserved)"
    if method.startswith("roam_recompute_"):
        return f"roam + recompute ≤{method[len('roam_recompute_'):-3]}% time"
    return method


@dataclass(frozen=True, slots=True)
class FitRow:
    """Memory one configuration needs, by method.

    Parameters
    ----------
    batch_size : int
        Batch size traced.
    seq_len : int or None
        Sequence length (token models), else ``None``.
    graph_name : str
        The traced graph's name.
    peak_bytes : dict
        ``{method: bytes}`` for every name of :data:`FIT_METHODS`.
    extra_time_pct : dict
        ``{method: percent}``: estimated extra time of each recomputation plan (0 for the
        others), :func:`extra_time_pct`.
    step_flops : int
        FLOPs of the step without recomputation.
    precision : str
        The traced step's precision (``fp32`` for rows written before it was recorded).
    step_seconds : float
        The step's estimated seconds on ``device_profile``.
    device_profile : str
        The profile the extra time is estimated on.
    """

    batch_size: int
    seq_len: int | None
    graph_name: str
    peak_bytes: Mapping[str, int]
    extra_time_pct: Mapping[str, float] = field(default_factory=dict)
    step_flops: int = 0
    precision: str = "fp32"
    step_seconds: float = 0.0
    device_profile: str = ""

    @property
    def tokens(self) -> int:
        """``batch_size * seq_len`` (just the batch size without a sequence)."""
        return self.batch_size * (self.seq_len or 1)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-able)."""
        return {"batch_size": self.batch_size, "seq_len": self.seq_len,
                "graph_name": self.graph_name, "peak_bytes": dict(self.peak_bytes),
                "extra_time_pct": dict(self.extra_time_pct), "step_flops": self.step_flops,
                "precision": self.precision, "step_seconds": self.step_seconds,
                "device_profile": self.device_profile}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FitRow:
        """Inverse of :meth:`to_dict` (rows written before the time estimate held FLOP
        shares under ``extra_flops_pct``: those are not read as time)."""
        return cls(int(d["batch_size"]), d.get("seq_len"), str(d.get("graph_name", "")),
                   {k: int(v) for k, v in d["peak_bytes"].items()},
                   {k: float(v) for k, v in (d.get("extra_time_pct") or {}).items()},
                   int(d.get("step_flops", 0)), str(d.get("precision", "fp32")),
                   float(d.get("step_seconds", 0.0)), str(d.get("device_profile", "")))

    def fits(self, memory_bytes: int) -> dict[str, bool]:
        """``{method: peak <= memory_bytes}``."""
        return {m: b <= memory_bytes for m, b in self.peak_bytes.items()}


def fit_row(graph: Graph, config: PlannerConfig, *, batch_size: int,
            seq_len: int | None = None,
            limits_pct: Sequence[float] = RECOMPUTE_LIMITS_PCT,
            memory_bytes: int | None = None, executor: Any = None,
            eager_graph: Graph | None = None) -> FitRow:
    """The memory ``graph`` needs: eager reserved, roam, roam with recomputation.

    Parameters
    ----------
    graph : Graph
        One traced configuration.
    config : PlannerConfig
        Planner settings (``budget_bytes`` is ignored).
    batch_size, seq_len : int
        The configuration (recorded in the row).
    limits_pct : sequence of float
        Extra-time limits of the recomputation methods (percent of the step).
    memory_bytes : int, optional
        Plan only what decides whether each method fits this size (see the module notes);
        a method that cannot fit it within its limit gets the greedy trajectory's lowest
        peak within the limit (an estimate above ``memory_bytes``).
    executor : concurrent.futures.Executor, optional
        Where the sub-task solves of the plans run.
    eager_graph : Graph, optional
        The step eager PyTorch runs, when roam plans a different program of the same step
        (``graph`` traced with ``merge_casts``: eager makes every cast); default ``graph``.
        Eager's reserved memory is this graph's, and the recomputation methods' extra time
        is roam's step (``graph``'s seconds plus the re-runs') against this graph's seconds,
        on the same device profile.

    Returns
    -------
    FitRow

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> r = fit_row(tiny_train_step(), PlannerConfig(workers=1), batch_size=1)
    >>> r.peak_bytes["roam"] <= r.peak_bytes["eager_reserved"]
    True
    >>> r.peak_bytes["roam_recompute_25pct"] <= r.peak_bytes["roam"]
    True
    """
    from roam_core.oracle.allocator_sim import simulate_allocator
    from roam_core.planner.budget import BudgetPlanner
    from roam_core.recompute.objective import rerun_costs

    eager = graph if eager_graph is None else eager_graph
    reserved = int(simulate_allocator(eager, eager.op_ids).peak_reserved_bytes)
    bp = BudgetPlanner(graph, config, executor=executor)
    ref_s = bp.step_seconds if eager_graph is None else float(sum(rerun_costs(
        eager_graph, config.recompute, bp.costs.profile).seconds.values()))

    def pct_of(extra_s: float) -> float:  # roam's step against eager's, in percent
        if eager_graph is None:
            return extra_time_pct(extra_s, ref_s)
        return extra_time_pct(bp.step_seconds + extra_s - ref_s, ref_s)

    base = bp.base.arena_bytes
    peaks: dict[str, int] = {"eager_reserved": reserved, "roam": base}
    pcts: dict[str, float] = {"eager_reserved": 0.0, "roam": 0.0}
    names = [f"roam_recompute_{lim:g}pct" for lim in limits_pct]
    precision = str(graph.origin.get("precision", "fp32"))
    if memory_bytes is not None:
        peaks.update(_recompute_at(bp, memory_bytes, limits_pct, names, pcts, pct_of))
        return FitRow(batch_size, seq_len, graph.name, peaks, pcts, bp.step_flops, precision,
                      bp.step_seconds, bp.device_profile)
    points = bp.trajectory[2] if bp.step_seconds > 0 else []
    for lim, name in zip(limits_pct, names, strict=True):
        within = [p.peak_bytes for p in points if pct_of(p.extra_seconds) <= lim]
        best, pct = base, 0.0
        if within and min(within) < base:
            try:
                plan = bp.plan_at(int(min(within)))
                got = pct_of(plan.extra_seconds)
                if got <= lim and plan.arena_bytes < best:
                    best, pct = plan.arena_bytes, got
            except BudgetInfeasibleError:
                pass  # fragmentation: keep the plan without recomputation
        peaks[name], pcts[name] = best, pct
    return FitRow(batch_size, seq_len, graph.name, peaks, pcts, bp.step_flops, precision,
                  bp.step_seconds, bp.device_profile)


def _recompute_at(bp: Any, memory_bytes: int, limits_pct: Sequence[float],
                  names: Sequence[str], pcts: dict[str, float],
                  pct_of: Callable[[float], float]) -> dict[str, int]:
    """Peaks of the recomputation methods when only "does it fit ``memory_bytes``" matters:
    no plan when roam fits without recomputation, else the cheapest plan that fits
    (``pct_of``: a plan's extra seconds -> its extra time in percent)."""
    base = bp.base.arena_bytes
    if base <= memory_bytes:
        pcts.update(dict.fromkeys(names, 0.0))
        return dict.fromkeys(names, base)
    plan = None
    try:
        plan = bp.plan_at(memory_bytes)
    except BudgetInfeasibleError:
        pass
    got = pct_of(plan.extra_seconds) if plan is not None else None
    points = bp.trajectory[2] if bp.step_seconds > 0 else []
    out: dict[str, int] = {}
    for lim, name in zip(limits_pct, names, strict=True):
        if plan is not None and got is not None and got <= lim:
            out[name], pcts[name] = int(plan.arena_bytes), got
            continue
        within = [p.peak_bytes for p in points if pct_of(p.extra_seconds) <= lim]
        # no plan within the limit fits: the lowest peak the greedy reaches within it, and
        # the extra time the cheapest plan that fits needs (none when nothing fits)
        out[name] = max(int(min(within, default=base)), memory_bytes + 1)
        if got is not None:
            pcts[name] = got
    return out


def largest_fitting(rows: Sequence[FitRow], memory_bytes: int
                    ) -> dict[str, FitRow | None]:
    """For each method, the row with the most tokens whose peak fits ``memory_bytes``.

    A method counts as fitting a row only when it also fits every smaller batch of the same
    sequence length (memory grows with the batch; a non-monotone blip does not count).

    Examples
    --------
    >>> rows = [FitRow(b, None, "g", {"roam": 10 * b}) for b in (1, 2, 4)]
    >>> largest_fitting(rows, 25)["roam"].batch_size
    2
    """
    out: dict[str, FitRow | None] = {}
    methods = sorted({m for r in rows for m in r.peak_bytes},
                     key=lambda m: FIT_METHODS.index(m) if m in FIT_METHODS else 99)
    for m in methods:
        best: FitRow | None = None
        by_seq: dict[int | None, list[FitRow]] = {}
        for r in rows:
            by_seq.setdefault(r.seq_len, []).append(r)
        for group in by_seq.values():
            for r in sorted(group, key=lambda r: r.batch_size):
                if m not in r.peak_bytes or r.peak_bytes[m] > memory_bytes:
                    break
                if best is None or r.tokens > best.tokens:
                    best = r
        out[m] = best
    return out
