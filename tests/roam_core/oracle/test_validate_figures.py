"""The validator checks every figure a plan states (``WRONG_FIGURE``, naming the field)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from roam_core.base.errors import ViolationKind
from roam_core.model.plan import Plan
from roam_core.model.samples import tiny_train_step
from roam_core.oracle.validate import check_plan
from roam_core.oracle.validate.figure_rules import order_profile


@cache
def _plan() -> Plan:
    from roam_core.planner import make_plan
    from roam_core.planner.config import PlannerConfig

    return make_plan(tiny_train_step(), PlannerConfig(workers=1, solve_layout=False))


def _figures(plan: Plan) -> set[str]:
    return {v.subject_id for v in check_plan(tiny_train_step(), plan)
            if v.kind is ViolationKind.WRONG_FIGURE}


def test_a_planned_plan_states_only_true_figures() -> None:
    assert check_plan(tiny_train_step(), _plan()) == []


@pytest.mark.parametrize(("field", "value"), [
    ("planned_peak_bytes", 1), ("resident_bytes", 0), ("baseline_peak_bytes", 10**9),
    ("lower_bound_bytes", 10**15), ("extra_flops", 5), ("step_flops", 7),
    ("solve_seconds", float("nan")), ("solve_seconds", -1.0), ("alignment_bytes", 0),
])
def test_each_false_figure_is_named(field: str, value: object) -> None:
    assert field in _figures(replace(_plan(), **{field: value}))


def test_live_bytes_and_arena_are_recomputed() -> None:
    p = _plan()
    assert "live_bytes" in _figures(replace(p, live_bytes=tuple(x + 1 for x in p.live_bytes)))
    assert _figures(replace(p, live_bytes=())) == set()  # not stated: nothing to check
    low = replace(p, arena_bytes=p.planned_peak_bytes - 512)
    kinds = {v.kind for v in check_plan(tiny_train_step(), low)}
    assert ViolationKind.WRONG_FIGURE in kinds


def test_a_non_permutation_skips_the_figures_but_not_the_alignment() -> None:
    p = replace(_plan(), order=_plan().order[:-1], alignment_bytes=0)
    assert _figures(p) == {"alignment_bytes"}


def test_order_profile_matches_the_simulator() -> None:
    from roam_core.oracle.simulate import simulate

    g, p = tiny_train_step(), _plan()
    resident, live = order_profile(g, p.order, 512)
    prof = simulate(g, p.order, alignment_bytes=512)
    assert (resident, tuple(live)) == (prof.resident_bytes, prof.live_bytes)
