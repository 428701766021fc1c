"""Monolithic (MODeL-style) CP-SAT ordering: exact on tiny graphs, hinted, bounded."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from roam_core.base.errors import GraphError
from roam_core.oracle.brute_force import brute_force_order
from roam_core.oracle.simulate import simulate
from roam_core.oracle.validate import check_order
from roam_core.ordering.monolithic import solve_monolithic
from roam_core.ordering.registry import best_heuristic_order
from tests.builders import two_param_step
from tests.strategies import random_graphs


@pytest.mark.slow  # ~3-16 s: CP-SAT / exact search on many instances
@settings(max_examples=20)
@given(random_graphs(max_ops=7))
def test_optimum_equals_brute_force(g):
    r = solve_monolithic(g, time_limit_s=10, alignment_bytes=1)
    assert r.status == "optimal"
    assert check_order(g, r.order) == []
    assert r.peak_bytes == brute_force_order(g, alignment_bytes=1).peak_bytes
    assert r.best_bound_bytes == r.peak_bytes
    assert r.peak_bytes == simulate(g, r.order, alignment_bytes=1).peak_bytes


def test_never_worse_than_the_hint_and_bound_is_sound():
    g = two_param_step("adam", act_bytes=512)
    hint = best_heuristic_order(g)
    r = solve_monolithic(g, time_limit_s=5)
    assert check_order(g, r.order) == []
    assert r.peak_bytes <= hint.profile.peak_bytes
    assert r.best_bound_bytes <= r.peak_bytes
    assert r.hint_peak_bytes == hint.profile.peak_bytes
    assert r.status in {"optimal", "feasible", "hint"}


def test_given_hint_and_size_limit():
    g = two_param_step("sgd")
    r = solve_monolithic(g, time_limit_s=2, hint=g.op_ids)
    assert r.hint_method == "given"
    assert r.peak_bytes <= simulate(g).peak_bytes
    with pytest.raises(GraphError, match="at most"):
        solve_monolithic(g, max_ops=3)
