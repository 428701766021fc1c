"""Compare two plans of a stored graph: which plans there are, and the comparison itself.

A choice is a string: ``"base:<method>"`` is a baseline order of :data:`BASELINE_METHODS`
(planned with the Plan card's settings, as pressing Plan with that method would; cached
like any plan) and ``"plan:<key>"`` a plan in the cache (roam's plan, a budget plan of the
frontier, an imported plan).  The comparison is memoised per graph and pair of plan keys.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace

import plotly.graph_objects as go

from app.analysis.settings import BASELINE_METHODS, PlanSettings
from app.core import state
from app.core.formatting import fmt_bytes
from app.core.memo import memoised
from app.services import planning
from app.services.figure_cache import copy_figure, figure_json
from app.services.plan_data import after_data
from app.services.view_graph import view_graph
from app.views.budget.data import frontier_key, frontiers_made
from app.views.budget.model import method_label
from app.views.compare.figure import compare_curves_figure
from app.views.compare.model import (
    Held,
    Row,
    held_steps,
    lifetime_rows,
    metric_rows,
    module_diff_rows,
)
from app.views.memory_by_module.data import module_attribution
from roam_core.base.errors import PlanFormatError
from roam_core.model.graph import TensorId

__all__ = ["BASE", "PLAN", "Compared", "Comparison", "compare_figure", "compared_plans",
           "compared_ref", "comparison", "frontier_keys",
           "plan_choices", "resolve_choice", "step_seconds"]

BASE, PLAN = "base:", "plan:"


@dataclass(frozen=True)
class Comparison:
    """What the Compare card shows besides the curves (rows are JSON for ``DataTable``)."""

    metrics: list[Row]
    modules: list[Row]
    lifetimes: list[Row]
    note: str


def _plan_label(key: str, what: str) -> str:
    p = state.get_plan(key)
    return f"{what}: {p.method}, peak {fmt_bytes(p.planned_peak_bytes)}"


def _frontier_options(graph_key: str, frontier: str | None) -> list[tuple[str, str]]:
    """``(value, label)`` of every plan of the frontier record ``frontier``."""
    rec = state.get_json(frontier) if frontier else None
    if not rec or rec.get("graph") != graph_key:
        return []
    out = []
    for p in rec.get("points") or []:
        key = p.get("plan_key")
        if not key or not state.has_plan(key):
            continue
        what = (f"budget plan: roam at {fmt_bytes(p['budget_bytes'])}"
                if p["method"] == "roam" and p.get("budget_bytes") is not None
                else f"budget plan: {method_label(p['method'])}")
        out.append((PLAN + key, f"{what}, peak {fmt_bytes(p['peak_bytes'])}"))
    return out


def plan_choices(graph_key: str, shown: str | None, made: Sequence[str | None],
                 imported: str | None, frontiers: Sequence[str | None],
                 settings: PlanSettings | None) -> list[dict[str, str]]:
    """The plans of graph ``graph_key`` one may compare, as dropdown options.

    Parameters
    ----------
    graph_key : str
        The graph.
    shown : str or None
        Key of the plan the views show.
    made : sequence of str or None
        Keys of plans made in this page (the last Plan press).
    imported : str or None
        Key of the last imported plan of this graph.
    frontiers : sequence of str or None
        Keys of frontier records (the Budget view's); their plans are listed.
    settings : PlanSettings or None
        The Plan card's settings: roam's plan for them is listed when it is cached.

    Returns
    -------
    list of dict
        ``{"label", "value"}``: the baselines first, then the stored plans (each once).
    """
    opts: dict[str, str] = {BASE + m: f"baseline: {label}" for m, label in BASELINE_METHODS}
    stored: list[tuple[str | None, str]] = [(shown, "plan shown")]
    if settings is not None:
        stored.append((planning.cached_plan_key(graph_key, replace(settings, method="roam")),
                       "roam's plan"))
    stored += [(k, "plan made") for k in made] + [(imported, "imported plan")]
    for key, what in stored:
        if key and PLAN + key not in opts and state.has_plan(key):
            opts[PLAN + key] = _plan_label(key, what)
    for f in frontiers:
        for value, label in _frontier_options(graph_key, f):
            opts.setdefault(value, label)
    return [{"label": label, "value": value} for value, label in opts.items()]


def frontier_keys(graph_key: str, result: dict[str, str] | None,
                  settings: PlanSettings | None) -> list[str | None]:
    """Frontier records to list plans from: the page's last one, the one cached for the
    Plan card's settings at the Budget view's defaults (8 budgets, min-cut on), and every
    other this session made of the graph (other budgets or settings, earlier page loads)."""
    keys: list[str | None] = [result.get("key") if result else None]
    if settings is not None:
        keys.append(frontier_key(graph_key, replace(settings, method="roam"), 8, True))
    return keys + [k for k in frontiers_made(graph_key) if k not in keys]


def resolve_choice(graph_key: str, choice: str, settings: PlanSettings) -> str:
    """The plan key of a choice (a baseline is planned, or found cached).

    Raises
    ------
    PlanFormatError
        The plan is gone from the cache, or was made for another graph.
    """
    if choice.startswith(BASE):
        return planning.plan_graph(graph_key, replace(settings, method=choice[len(BASE):]))
    key = choice.removeprefix(PLAN)
    if not state.has_plan(key):
        raise PlanFormatError("that plan is no longer in the cache; plan again")
    plan, graph = state.get_plan(key), state.get_graph(graph_key)
    if plan.graph_fingerprint != graph.fingerprint():
        raise PlanFormatError(f"that plan was made for graph '{plan.graph_name}', not for "
                              f"'{graph.name}'")
    return key


@memoised(8)
def step_seconds(graph_key: str) -> tuple[float, str]:
    """The step's estimated seconds without recomputation and the cost model's device
    profile (:func:`roam_core.recompute.objective.rerun_costs`, default settings)."""
    from roam_core.recompute.objective import rerun_costs  # the cost model: on first use

    costs = rerun_costs(state.get_graph(graph_key))
    return float(sum(costs.seconds.values())), costs.profile.name


@memoised(16)
def _held(graph_key: str, plan_key: str) -> dict[TensorId, Held]:
    """:func:`held_steps` of a stored plan (memoised; callers only read it)."""
    return held_steps(state.get_graph(graph_key), state.get_plan(plan_key),
                      view_graph(graph_key, plan_key))


@memoised(16, copy=copy.deepcopy)
def comparison(graph_key: str, key_a: str, key_b: str) -> Comparison:
    """The metrics, per-module and lifetime tables of plans A and B (memoised)."""
    graph = state.get_graph(graph_key)
    a, b = state.get_plan(key_a), state.get_plan(key_b)
    ss, profile = step_seconds(graph_key)
    modules = module_diff_rows(module_attribution(graph_key, key_a),
                               module_attribution(graph_key, key_b))
    lives = lifetime_rows(graph, _held(graph_key, key_a), _held(graph_key, key_b),
                          max(a.alignment_bytes, b.alignment_bytes))
    if a.device_profile and b.device_profile and a.device_profile != b.device_profile:
        priced = (f"A's on the {a.device_profile} profile, B's on {b.device_profile}: "
                  "not comparable, so no difference is shown")
    else:
        priced = f"on the {a.device_profile or b.device_profile or profile} profile"
    note = (f"Extra time: the cost model's estimate, {priced} (the step "
            f"without re-runs: {1e3 * (a.step_seconds or b.step_seconds or ss):.3f} ms). "
            "Per module: bytes live at each plan's own peak. Lifetimes: steps each plan "
            "holds a tensor (its re-run copies included), in that plan's own steps.")
    return Comparison(metric_rows(a, b, ss), modules, lives, note)


@memoised(16, copy=copy_figure, frozen=figure_json)
def compare_figure(graph_key: str, key_a: str, label_a: str, key_b: str, label_b: str
                   ) -> go.Figure:
    """The two memory curves on the normalised step axis (memoised)."""
    return compare_curves_figure(after_data(graph_key, key_a).curve, label_a,
                                 after_data(graph_key, key_b).curve, label_b)


@dataclass(frozen=True)
class Compared:
    """Two stored plans of one graph compared, with their names (``a_label``, ``b_label``:
    the pick without its peak, as the figure's legend names them)."""

    key_a: str
    a_label: str
    key_b: str
    b_label: str


def compared_ref(graph_key: str, key_a: str, a_label: str, key_b: str, b_label: str
                 ) -> dict[str, str]:
    """The store value naming a comparison (read back by :func:`compared_plans`)."""
    return {"graph": graph_key, "a": key_a, "a_label": a_label, "b": key_b,
            "b_label": b_label}


def compared_plans(graph_key: str, ref: dict[str, str] | None) -> Compared | None:
    """The comparison ``ref`` names, when it is of graph ``graph_key`` and both plans are
    still stored; else ``None`` (nothing to compare)."""
    if not ref or ref.get("graph") != graph_key:
        return None
    keys = (ref.get("a"), ref.get("b"))
    if not all(k and state.has_plan(k) for k in keys):
        return None
    return Compared(str(keys[0]), ref.get("a_label") or "A", str(keys[1]),
                    ref.get("b_label") or "B")
