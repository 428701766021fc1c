"""A candidate whose planned peak fits the budget but whose arena overshoots is laid out
again with more effort before the budget planner pays for more recomputation.

The first layouts here are cut down to one greedy pass (every polishing stage off), so the
arena overshoots its peak by a few KiB; the re-layout (``ArenaConfig.with_effort``) has
every stage on.  Both are bounded by work, not the clock: deterministic.
"""

from __future__ import annotations

import pytest

from roam_core.base.errors import BudgetInfeasibleError, ConfigError
from roam_core.base.units import format_bytes
from roam_core.layout.config import ArenaConfig
from roam_core.oracle.validate import check_plan
from roam_core.planner.budget import BudgetPlanner
from roam_core.planner.config import PlannerConfig
from roam_core.recompute.config import RecomputeConfig
from tests.builders import random_train_graph

#: one greedy pass, nothing polished
GREEDY_ONLY = ArenaConfig(use_cpsat=False, use_dsa=False, flip_compact=False, shake_rounds=0,
                          peak_repair=False, promote_passes=0, polish_rounds=0)
#: a planned peak of this training step with one drop; its greedy arena is 33,280 B
BUDGET = 31_744


def _planner(effort: float) -> BudgetPlanner:
    cfg = PlannerConfig(workers=1, arena=GREEDY_ONLY).with_recompute(relayout_effort=effort)
    return BudgetPlanner(random_train_graph(1, 12), cfg)


@pytest.mark.slow
def test_the_relayout_fits_the_cheaper_drop_set() -> None:
    without = _planner(0.0).plan_at(BUDGET)  # aims lower: one more drop
    bp = _planner(4.0)
    plan = bp.plan_at(BUDGET)
    assert plan.arena_bytes <= BUDGET
    assert plan.planned_peak_bytes <= BUDGET
    assert check_plan(bp.graph, plan) == []
    assert len(plan.recompute) < len(without.recompute)
    assert plan.extra_seconds < without.extra_seconds
    assert any("laid out again with more effort" in n for n in plan.notes), plan.notes
    assert any(c.stage.startswith("relayout.") for c in plan.stages)
    assert not any(n.startswith("laid out again") for n in without.notes)


@pytest.mark.slow
def test_a_refusal_states_the_smallest_arena_made_relaid_ones_included() -> None:
    bp = _planner(4.0)
    relaid = bp.plan_at(BUDGET)
    too_low = bp.graph.resident_bytes() + 512
    with pytest.raises(BudgetInfeasibleError) as err:
        bp.plan_at(too_low)
    smallest = err.value.smallest_peak_bytes
    assert smallest == min(p.arena_bytes for p in bp.made)
    assert smallest <= relaid.arena_bytes
    assert format_bytes(smallest) in str(err.value)


def test_effort_scales_every_work_limit_and_turns_every_stage_on() -> None:
    more = GREEDY_ONLY.with_effort(4)
    d = ArenaConfig()
    assert (more.shake_rounds, more.promote_passes) == (4 * d.shake_rounds, 4 * d.promote_passes)
    assert (more.search_nodes, more.polish_rounds) == (4 * d.search_nodes, 4 * d.polish_rounds)
    assert more.time_limit_s == 4 * d.time_limit_s
    assert all((more.use_dsa, more.use_cpsat, more.peak_repair, more.flip_compact))
    with pytest.raises(ConfigError, match="relayout_effort"):
        RecomputeConfig(relayout_effort=0.5)


@pytest.mark.slow
def test_plans_made_without_a_budget_are_laid_out_again_before_a_refusal() -> None:
    bp = _planner(4.0)
    drops = bp.trajectory[1][:1]
    first = bp.plan_for_drops(drops, "first_drop")  # a baseline's way: no budget, no re-layout
    assert first.planned_peak_bytes <= BUDGET < first.arena_bytes
    assert bp.relay_out_made(BUDGET)
    again = bp.made[-1]
    assert again.recompute == first.recompute
    assert again.arena_bytes <= BUDGET
    assert check_plan(bp.graph, again) == []
    assert not bp.relay_out_made(BUDGET)  # once per drop set


def test_the_cheapest_candidate_aimed_lower_beats_a_costlier_fit() -> None:
    cfg = PlannerConfig(workers=1, arena=GREEDY_ONLY).with_recompute(relayout_effort=0.0,
                                                                      exact_max_ops=0)
    bp = BudgetPlanner(random_train_graph(1, 12), cfg, portfolio=True)
    budget = 28_672
    plan = bp.plan_at(budget)
    assert plan.arena_bytes <= budget
    assert check_plan(bp.graph, plan) == []
    assert any("aimed that much lower" in n for n in plan.notes), plan.notes
    costlier = [p for p in bp.made if p.arena_bytes <= budget
                and p.extra_seconds > plan.extra_seconds]
    assert costlier  # the search's first fit, which this plan replaced
