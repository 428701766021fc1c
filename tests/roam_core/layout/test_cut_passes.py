"""A greedy pass cut by the clock still gives a valid layout: its rest goes above it in
lanes (what keeps ``roam layout`` within ``--time-limit`` on a million rows)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roam_core.layout.dsa_heuristics import lane_offsets, named_order, place_in_order
from roam_core.model.dsa import Buffer, Problem
from roam_core.oracle.validate import check_dsa_solution


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    n = draw(st.integers(1, 40))
    bufs = []
    for i in range(n):
        lo = draw(st.integers(0, 30))
        bufs.append(Buffer(f"b{i}", lo, lo + draw(st.integers(1, 10)),
                           draw(st.integers(0, 5000)), draw(st.sampled_from([1, 1, 2, 512])),
                           None))
    return Problem(tuple(bufs))


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(problems())
def test_a_pass_cut_at_once_is_valid(p: Problem) -> None:
    sol = place_in_order(p, named_order(p, "size"), "best", deadline=0.0, partial=True)
    assert sol is not None
    assert check_dsa_solution(p, sol) == []


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(problems())
def test_lanes_are_valid_and_within_twice_a_class(p: Problem) -> None:
    lower = np.array([b.lower for b in p.buffers])
    upper = np.array([b.upper for b in p.buffers])
    size = np.array([b.size for b in p.buffers])
    off = lane_offsets(lower, upper, size)
    free = Problem(tuple(Buffer(b.id, b.lower, b.upper, b.size) for b in p.buffers))
    from roam_core.model.dsa import Solution

    assert check_dsa_solution(free, Solution.from_offsets(free, off.tolist())) == []
