"""Proven DSA lower bounds above the live-set bound (issue 13), held against exact optima."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from roam_core.layout.dsa_bounds import height_grain, window_lower_bound
from roam_core.layout.dsa_solver import solve_dsa
from roam_core.model.dsa import Buffer, Problem
from tests.roam_core.layout.test_dsa_solver import _brute_min_height
from tests.strategies import problems


@st.composite
def _scaled(draw: st.DrawFn) -> Problem:
    """Small problems with every size a multiple of a common factor (so the grain bites)."""
    p = draw(problems(max_buffers=6, max_time=6, max_size=4))
    k = draw(st.sampled_from([1, 2, 3]))
    return Problem(tuple(dataclasses.replace(b, size=b.size * k) for b in p.buffers))


class TestWindowLowerBound:
    @settings(max_examples=60, deadline=None)
    @given(_scaled(), st.sampled_from([(1,), (2,), (1, 2, 4), (8, 16, 32, 64)]))
    def test_never_above_the_exact_optimum(self, p: Problem, widths: tuple[int, ...]) -> None:
        opt = _brute_min_height(p)
        bound, nodes = window_lower_bound(p, node_budget=2000, deadline=1e18, widths=widths)
        assert p.lower_bound() <= bound <= opt
        assert nodes <= 2000 + 64

    @settings(max_examples=60, deadline=None)
    @given(_scaled())
    def test_grain_divides_the_optimum(self, p: Problem) -> None:
        opt = _brute_min_height(p)
        assert opt % height_grain(p) == 0
        # a bound just below the optimum rounds up to at most the optimum
        if opt:
            bound, _ = window_lower_bound(p, node_budget=0, deadline=1e18, start=opt - 1)
            assert bound == opt

    @settings(max_examples=40, deadline=None)
    @given(_scaled())
    def test_solver_bound_is_valid(self, p: Problem) -> None:
        r = solve_dsa(p, time_limit_s=5)
        assert r.lower_bound <= _brute_min_height(p) <= r.solution.height

    def test_fixed_offsets_give_the_live_set_bound(self) -> None:
        p = Problem((Buffer("a", 0, 2, 2, offset=1), Buffer("b", 1, 3, 3)))
        assert window_lower_bound(p, node_budget=1000, deadline=1e18) == (5, 0)
        assert height_grain(p) == 1
