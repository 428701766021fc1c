"""The honest headline of a plan: what it saves against eager PyTorch, measured two ways.

Eager PyTorch needs its *allocated* peak (``torch.cuda.max_memory_allocated``) and, through
the caching allocator, its *reserved* bytes (what ``nvidia-smi`` shows;
:func:`~roam_core.oracle.allocator_sim.simulate_allocator` models it).  A plan needs its
planned peak of live bytes, and its arena is the one reservation it makes.  The headline
puts both savings side by side and names them -- planned peak against eager allocated, arena
against eager reserved -- says which setting the graph was traced in (the ROAM paper's
first optimizer step, or steady training), and when nothing is saved against eager
allocated, gives the one-line reason and the next step (a budget plan from the
recomputation frontier).

Examples
--------
>>> from roam_core.model.samples import tiny_train_step
>>> from roam_core.planner import make_plan
>>> from roam_core.planner.config import PlannerConfig
>>> g = tiny_train_step()
>>> h = plan_headline(g, make_plan(g, PlannerConfig(workers=1)))
>>> h.saved_vs_allocated_bytes, h.eager_reserved_bytes
(0, 2097152)
"""

from __future__ import annotations

from dataclasses import dataclass

from roam_core.base.units import format_bytes
from roam_core.model.graph import Graph, TensorKind
from roam_core.model.plan import Plan
from roam_core.oracle.allocator_sim import simulate_allocator
from roam_core.planner.config import PlannerConfig
from roam_core.recompute.greedy import GreedyTrajectory, knee
from roam_core.recompute.objective import rerun_costs

__all__ = [
    "SETTING_TEXT",
    "Headline",
    "NextStep",
    "headline_lines",
    "next_step",
    "plan_headline",
    "setting_text",
]

#: How each tracing setting is named in every headline.
SETTING_TEXT = {
    "roam": "the ROAM paper's setting: the optimizer's first step (its state is created "
            "inside the step and counted as planned memory)",
    "steady": "steady training: a later step (optimizer state resident before the step)",
}
#: Share of the planned peak that weights, gradients and optimizer state must hold for them
#: to be named as what sets the peak.
STATE_SHARE = 0.5
#: A saving against eager allocated below this share of it gets the reason and next step.
LITTLE_SAVED = 0.01


@dataclass(frozen=True, slots=True)
class NextStep:
    """The recomputation frontier's best points as a next step (just-in-time estimates over
    the plan's order, not planned arenas).

    Parameters
    ----------
    knee_bytes, knee_extra_seconds : int, float
        The frontier's knee (``roam plan --budget auto``): its peak and estimated extra time.
    lowest_bytes, lowest_extra_seconds : int, float
        The lowest peak the greedy reaches and its estimated extra time.
    step_seconds : float
        The step's estimated time without recomputation.
    device_profile : str
        The profile the times are estimated on.
    """

    knee_bytes: int
    knee_extra_seconds: float
    lowest_bytes: int
    lowest_extra_seconds: float
    step_seconds: float
    device_profile: str

    def text(self) -> str:
        """One line for people."""
        ss = max(self.step_seconds, 1e-12)
        return (f"next step: a memory budget with recomputation -- `roam plan --budget auto` "
                f"aims at the frontier's knee, about {format_bytes(self.knee_bytes)} for "
                f"+{1e3 * self.knee_extra_seconds:.2f} ms "
                f"({100 * self.knee_extra_seconds / ss:.1f}% of the step); the lowest about "
                f"{format_bytes(self.lowest_bytes)} for +{1e3 * self.lowest_extra_seconds:.2f}"
                f" ms (estimated on {self.device_profile})")


@dataclass(frozen=True, slots=True)
class Headline:
    """A plan against eager PyTorch (see the module docstring).

    Parameters
    ----------
    setting : str
        The graph's tracing setting (``"roam"``, ``"steady"`` or ``"unknown"``).
    eager_allocated_bytes, eager_reserved_bytes : int
        Eager's allocated peak and its reserved bytes (caching-allocator model).
    planned_peak_bytes, arena_bytes : int
        The plan's peak of live bytes and its arena.
    reason : str or None
        Why nothing (or under 1 %) is saved against eager allocated (``None`` otherwise).
    extra_seconds, step_seconds : float
        Estimated time the plan's recomputation adds, and the step's (0: none or unknown).
    device_profile : str
        The profile of those estimates (``""``: none).
    """

    setting: str
    eager_allocated_bytes: int
    eager_reserved_bytes: int
    planned_peak_bytes: int
    arena_bytes: int
    reason: str | None = None
    extra_seconds: float = 0.0
    step_seconds: float = 0.0
    device_profile: str = ""

    @property
    def saved_vs_allocated_bytes(self) -> int:
        """Eager's allocated peak less the planned peak."""
        return self.eager_allocated_bytes - self.planned_peak_bytes

    @property
    def saved_vs_reserved_bytes(self) -> int:
        """Eager's reserved bytes less the arena."""
        return self.eager_reserved_bytes - self.arena_bytes


def setting_text(graph: Graph) -> str:
    """The graph's tracing setting in words (``"unknown setting"`` for custom graphs)."""
    s = str(graph.origin.get("setting", ""))
    return SETTING_TEXT.get(s, f"setting {s}" if s else "unknown setting (a custom graph)")


def _reason(graph: Graph, plan: Plan) -> str:
    """Why the plan's peak is not below eager's allocated peak, in one line."""
    state = sum(t.size_bytes for t in graph.tensors.values() if t.kind in (
        TensorKind.PARAMETER, TensorKind.GRADIENT, TensorKind.OPTIMIZER_STATE))
    peak = max(plan.planned_peak_bytes, 1)
    if state >= STATE_SHARE * peak:
        return (f"weights, gradients and optimizer state ({format_bytes(state)}, "
                f"{100 * min(state / peak, 1.0):.0f}% of the peak) set the peak: only "
                "recomputation or a smaller optimizer state goes lower")
    if plan.lower_bound_bytes and plan.planned_peak_bytes <= plan.lower_bound_bytes:
        return (f"eager's order is already at the lower bound "
                f"({format_bytes(plan.lower_bound_bytes)}, held at some step by every valid "
                "order): only recomputation goes lower")
    return ("no order roam found is below eager's here (the gap to the lower bound is left "
            "open): recomputation goes lower")


def plan_headline(graph: Graph, plan: Plan, *, eager_reserved_bytes: int | None = None
                  ) -> Headline:
    """The :class:`Headline` of ``plan`` (``eager_reserved_bytes``: when the caller has the
    allocator model's figure already)."""
    reserved = eager_reserved_bytes
    if reserved is None:
        reserved = simulate_allocator(graph).peak_reserved_bytes
    saved = plan.baseline_peak_bytes - plan.planned_peak_bytes
    little = saved <= LITTLE_SAVED * plan.baseline_peak_bytes and not plan.recompute
    return Headline(str(graph.origin.get("setting", "unknown")), plan.baseline_peak_bytes,
                    reserved, plan.planned_peak_bytes, plan.arena_bytes,
                    _reason(graph, plan) if little else None, plan.extra_seconds,
                    plan.step_seconds, plan.device_profile)


def next_step(graph: Graph, plan: Plan, config: PlannerConfig | None = None) -> NextStep | None:
    """The frontier's knee and lowest point as estimated by the greedy drop trajectory over
    ``plan``'s order (``None`` when the plan already recomputes or nothing can be dropped).

    Raises
    ------
    ConfigError
        An unknown or uncalibrated device profile in ``config.recompute``.
    """
    if plan.recompute:
        return None
    cfg = config or PlannerConfig()
    costs = rerun_costs(graph, cfg.recompute)
    t = GreedyTrajectory(graph, plan.order, alignment_bytes=plan.alignment_bytes,
                         costs=costs).run()
    if len(t.points) < 2:
        return None
    k = knee(t.points)
    low = min(t.points, key=lambda p: (p.peak_bytes, p.extra_cost))
    return NextStep(k.peak_bytes, k.extra_seconds, low.peak_bytes, low.extra_seconds,
                    float(sum(costs.seconds.values())), costs.profile.name)


def headline_lines(h: Headline, nxt: NextStep | None = None) -> list[str]:
    """The headline as text lines (the CLI prints them; the app shows them as rows)."""
    def pct(saved: int, of: int) -> str:
        return f"{100 * saved / of:.1f} %" if of else "-"

    lines = [
        f"saving vs eager allocated: {format_bytes(h.saved_vs_allocated_bytes)} "
        f"({pct(h.saved_vs_allocated_bytes, h.eager_allocated_bytes)}; planned peak "
        f"{format_bytes(h.planned_peak_bytes)} vs eager's peak allocated "
        f"{format_bytes(h.eager_allocated_bytes)})",
        f"saving vs eager reserved: {format_bytes(h.saved_vs_reserved_bytes)} "
        f"({pct(h.saved_vs_reserved_bytes, h.eager_reserved_bytes)}; arena "
        f"{format_bytes(h.arena_bytes)} vs eager's reserved "
        f"{format_bytes(h.eager_reserved_bytes)}, what nvidia-smi shows)",
        f"setting: {SETTING_TEXT.get(h.setting, h.setting)}",
    ]
    if h.extra_seconds > 0:
        lines.append(f"recomputation: +{1e3 * h.extra_seconds:.3f} ms per step "
                     f"({100 * h.extra_seconds / max(h.step_seconds, 1e-12):.2f}% of "
                     f"{1e3 * h.step_seconds:.3f} ms, estimated on {h.device_profile})")
    if h.reason is not None:
        what = "nothing" if h.saved_vs_allocated_bytes <= 0 else "little (under 1 %)"
        lines.append(f"{what} saved vs eager allocated: {h.reason}")
        if nxt is not None:
            lines.append(nxt.text())
    return lines
