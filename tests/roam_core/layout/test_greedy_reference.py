"""The greedy placement driver against a straightforward reference.

:func:`roam_core.layout.dsa_heuristics.place_in_order` keeps the placed boxes sorted by offset
and scans them with numpy; the reference here is the rule written out in plain Python: for each
buffer, the union of the offset intervals of the placed buffers that overlap it in time, its
free gaps below the highest top (each start rounded up to the buffer's alignment), then the
smallest gap that holds the buffer (best fit, lowest on ties) or the lowest one (first fit),
else the rounded-up top.  The portfolio's early stop at the bound and its reuse of known passes
must give the same result as the full portfolio.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roam_core.layout.dsa_heuristics import (
    ORDERS,
    greedy_by_size,
    named_order,
    place_against,
    place_in_order,
    portfolio,
)
from roam_core.model.dsa import Buffer, Problem
from roam_core.oracle.validate import check_dsa_solution


def _ceil(x: int, a: int) -> int:
    return -(-x // a) * a


def _reference(problem: Problem, order: list[int], fit: str) -> list[int]:
    """Offsets of the greedy rule, written out: O(n^2) pure Python."""
    bs = problem.buffers
    offsets = [0] * len(bs)
    placed: list[int] = []
    for i, b in enumerate(bs):
        if b.offset is not None:
            offsets[i] = b.offset
            if b.size:
                placed.append(i)
    for i in order:
        b = bs[i]
        if b.offset is not None:
            continue
        if b.size == 0:
            offsets[i] = 0
            continue
        spans = sorted((offsets[j], offsets[j] + bs[j].size) for j in placed
                       if bs[j].lower < b.upper and bs[j].upper > b.lower)
        gaps: list[tuple[int, int]] = []  # (start, end) of the free gaps below the top
        reach = 0
        for lo, hi in spans:
            if lo > reach:
                gaps.append((reach, lo))
            reach = max(reach, hi)
        a = b.alignment
        fitting = [(end - _ceil(start, a), _ceil(start, a)) for start, end in gaps
                   if end - _ceil(start, a) >= b.size]
        if not fitting:
            offsets[i] = _ceil(reach, a)
        elif fit == "first":
            offsets[i] = min(off for _, off in fitting)
        else:
            offsets[i] = min(fitting)[1]  # smallest room, then lowest offset
        placed.append(i)
    return offsets


@st.composite
def _problems(draw: st.DrawFn, max_buffers: int = 14, max_time: int = 10,
              max_size: int = 9) -> Problem:
    n = draw(st.integers(0, max_buffers))
    bufs = []
    stack = 0  # fixed buffers are stacked, so they never overlap each other
    for i in range(n):
        lo = draw(st.integers(0, max_time - 1))
        hi = draw(st.integers(lo + 1, max_time))
        size = draw(st.integers(0, max_size))
        align = draw(st.sampled_from((1, 1, 2, 3, 4)))
        offset = None
        if draw(st.integers(0, 5)) == 0:
            offset = _ceil(stack, align)
            stack = offset + size
        bufs.append(Buffer(f"b{i}", lo, hi, size, align, offset))
    return Problem(tuple(bufs))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_problems(), st.sampled_from(("best", "first")), st.randoms(use_true_random=False))
def test_place_in_order_equals_the_reference(problem: Problem, fit: str,
                                             rnd: random.Random) -> None:
    order = list(range(len(problem)))
    rnd.shuffle(order)
    sol = place_in_order(problem, order, fit)
    assert sol is not None
    assert list(sol.offsets) == _reference(problem, order, fit)
    assert check_dsa_solution(problem, sol) == []


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(_problems(), st.sampled_from(sorted(ORDERS)), st.sampled_from(("best", "first")))
def test_named_orders_equal_the_reference(problem: Problem, name: str, fit: str) -> None:
    order = named_order(problem, name)
    sol = place_in_order(problem, order, fit)
    assert sol is not None
    assert list(sol.offsets) == _reference(problem, order, fit)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_medium_random_problems_equal_the_reference(seed: int) -> None:
    """A few hundred buffers with long and short lifetimes (many overlaps, many equal
    offsets and sizes): every named order, both fits."""
    rng = random.Random(seed)
    bufs = []
    for i in range(300):
        lo = rng.randrange(200)
        hi = lo + (rng.randrange(1, 6) if rng.random() < 0.7 else rng.randrange(50, 200))
        bufs.append(Buffer(f"b{i}", lo, hi, rng.choice((1, 2, 4, 8, 16, rng.randrange(1, 40)))))
    p = Problem(tuple(bufs))
    for name in ORDERS:
        for fit in ("best", "first"):
            order = named_order(p, name)
            sol = place_in_order(p, order, fit)
            assert sol is not None
            assert list(sol.offsets) == _reference(p, order, fit), (name, fit)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(_problems(), st.randoms(use_true_random=False))
def test_place_against_equals_the_reference(problem: Problem, rnd: random.Random) -> None:
    """Free buffers (alignment 1) against fixed boxes: the reference on the problem of the
    fixed ones (offsets pinned) followed by the free ones."""
    fx = [b for b in problem.buffers if b.offset is not None]
    fr = [Buffer(b.id, b.lower, b.upper, b.size) for b in problem.buffers if b.offset is None]
    order = list(range(len(fr)))
    rnd.shuffle(order)

    def arr(vals: list[int]) -> np.ndarray:
        return np.asarray(vals, np.int64)

    got = place_against(arr([b.lower for b in fx]), arr([b.upper for b in fx]),
                        arr([b.offset or 0 for b in fx]), arr([b.size for b in fx]),
                        arr([b.lower for b in fr]), arr([b.upper for b in fr]),
                        arr([b.size for b in fr]), order)
    ref = _reference(Problem(tuple(fx + fr)), [len(fx) + k for k in order], "best")
    assert got.tolist() == ref[len(fx):]


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(_problems(max_buffers=10))
def test_portfolio_stop_at_the_bound_and_known_passes_change_nothing(problem: Problem) -> None:
    full = portfolio(problem)
    lb = problem.lower_bound()
    short = portfolio(problem, target=lb)
    known = portfolio(problem, target=lb, known={"greedy:size:best": greedy_by_size(problem)})
    assert short[0].offsets == known[0].offsets == full[0].offsets
    assert short[1] == known[1] == full[1]
    assert short[2] == known[2] == full[2][:len(short[2])]
    if full[0].height > lb:  # never at the bound: every pass runs
        assert short[2] == full[2]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(_problems(), st.sampled_from(("best", "first")), st.sampled_from((1, 2, 5)),
       st.randoms(use_true_random=False))
def test_dropping_boxes_past_their_last_use_changes_nothing(problem: Problem, fit: str,
                                                            every: int,
                                                            rnd: random.Random) -> None:
    """The placement loop drops the boxes that no later buffer overlaps; compacting after
    every step (or every few) gives the reference's offsets, pinned buffers included."""
    from roam_core.layout import dsa_heuristics

    order = [i for i, b in enumerate(problem.buffers) if b.offset is None]
    rnd.shuffle(order)
    _placed_with(dsa_heuristics, "_COMPACT_EVERY", every, problem, order, fit)


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 12)), max_size=10),
       st.lists(st.tuples(st.integers(0, 30), st.integers(1, 12)), min_size=1, max_size=10),
       st.randoms(use_true_random=False))
def test_last_overlap_equals_a_scan(queries, boxes, rnd: random.Random) -> None:
    """``last_overlap``: for every box the highest rank among the queries that share a step
    with it, -1 when none does."""
    from roam_core.layout.dsa_heuristics import last_overlap

    ql = np.array([a for a, _ in queries], np.int64)
    qh = ql + np.array([w for _, w in queries], np.int64)
    rank = list(range(len(queries)))
    rnd.shuffle(rank)
    bl = np.array([a for a, _ in boxes], np.int64)
    bh = bl + np.array([w for _, w in boxes], np.int64)
    ref = [max((rank[j] for j in range(len(queries)) if ql[j] < bh[i] and qh[j] > bl[i]),
               default=-1) for i in range(len(boxes))]
    assert last_overlap(ql, qh, np.array(rank, np.int64), bl, bh).tolist() == ref


@pytest.mark.slow
@pytest.mark.parametrize("wide_from", [1, 2])
@settings(max_examples=150, deadline=None)
@given(problem=_problems(), fit=st.sampled_from(("best", "first")),
       rnd=st.randoms(use_true_random=False))
def test_the_candidate_gap_scan_equals_the_reference(
        wide_from: int, problem: Problem, fit: str, rnd: random.Random) -> None:
    """The gap scan for many overlapping boxes (only the boxes whose lower neighbour leaves
    room are candidates) gives the plain scan's offsets: forced on for every buffer here."""
    import roam_core.layout.dsa_heuristics as dh

    order = list(range(len(problem)))
    rnd.shuffle(order)
    _placed_with(dh, "_CANDIDATES_FROM", wide_from, problem, order, fit)


def _placed_with(module: object, name: str, value: int, problem: Problem, order: list[int],
                 fit: str) -> None:
    """``place_in_order`` with ``module.name = value`` gives the reference's offsets."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        sol = place_in_order(problem, order, fit)
    finally:
        setattr(module, name, saved)
    assert sol is not None
    assert list(sol.offsets) == _reference(problem, order, fit)


def test_the_candidate_gap_scan_equals_the_plain_one_on_medium_problems() -> None:
    import roam_core.layout.dsa_heuristics as dh

    rng = np.random.default_rng(7)
    for _ in range(300):
        m = int(rng.integers(1, 60))
        tops = np.sort(rng.integers(1, 400, m))  # boxes of random heights, sorted by offset
        offs = np.sort(np.minimum(tops - 1, rng.integers(0, 400, m)))
        tops = np.maximum(tops, offs + 1)
        for s in (1, 3, 17, 90):
            for a in (1, 4):
                for best in (True, False):
                    assert (dh._lowest_gap_wide(offs, tops, s, a, best)
                            == dh._lowest_gap(offs, tops, s, a, best)), (offs, tops, s, a)


def test_the_unit_gap_scan_equals_the_plain_one_on_random_boxes() -> None:
    """The alignment-1 scan (first gap in Python, the others in one vector) picks the plain
    scan's gap, ties between the first gap and a later one included (small ranges)."""
    import roam_core.layout.dsa_heuristics as dh

    rng = np.random.default_rng(11)
    tied = 0
    for _ in range(600):
        m = int(rng.integers(1, 40))
        span = int(rng.choice([20, 400]))
        tops = np.sort(rng.integers(1, span, m))
        offs = np.sort(np.minimum(tops - 1, rng.integers(0, span, m)))
        tops = np.maximum(tops, offs + 1)
        for s in (1, 2, 3, 17, 90):
            for best in (True, False):
                got = dh._lowest_gap_unit(offs, tops, s, best)
                assert got == dh._lowest_gap(offs, tops, s, 1, best), (offs, tops, s, best)
                tied += bool(best and got == 0 < s <= offs[0] and m > 1
                             and (offs[1:] - np.maximum.accumulate(tops)[:-1] == offs[0]).any())
    assert tied  # the first gap won a tie with a later one somewhere


@st.composite
def _peak_first_problems(draw: st.DrawFn) -> tuple[Problem, list[int]]:
    """Buffers live at one common step first (some of size 0, now and then one of alignment
    2, which ends the stacked head), then any others: the shape of a largest-section-first
    order on a training step."""
    peak = draw(st.integers(2, 8))
    bufs = []
    for i in range(draw(st.integers(1, 12))):
        lo = draw(st.integers(0, peak))
        hi = draw(st.integers(peak + 1, 12))
        align = 2 if draw(st.integers(0, 7)) == 0 else 1
        bufs.append(Buffer(f"h{i}", lo, hi, draw(st.integers(0, 9)), align))
    head = len(bufs)
    for i in range(draw(st.integers(0, 10))):
        lo = draw(st.integers(0, 11))
        bufs.append(Buffer(f"b{i}", lo, draw(st.integers(lo + 1, 12)), draw(st.integers(0, 9))))
    rest = list(range(head, len(bufs)))
    draw(st.randoms(use_true_random=False)).shuffle(rest)
    return Problem(tuple(bufs)), list(range(head)) + rest


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_peak_first_problems(), st.sampled_from(("best", "first")))
def test_a_stacked_head_of_overlapping_buffers_equals_the_reference(
        case: tuple[Problem, list[int]], fit: str) -> None:
    """The buffers at the head of the order that share a step are stacked at once (the
    sizes' running sum) where the loop would scan for each; the offsets are the
    reference's, and the head is what the loop would stack."""
    from roam_core.layout import dsa_heuristics

    problem, order = case
    sol = place_in_order(problem, order, fit)
    assert sol is not None
    assert list(sol.offsets) == _reference(problem, order, fit)
    lower, upper, size, align = dsa_heuristics.buffer_arrays(problem)
    head = dsa_heuristics._overlapping_head(lower, upper, size, align, np.asarray(order))
    live = [i for i in order[:head] if size[i]]
    assert all(problem.buffers[i].alignment == 1 for i in live)
    assert all(problem.buffers[a].lower < problem.buffers[b].upper
               for a in live for b in live)
    if head < len(order):  # the next one breaks the head: misaligned or not at a common step
        nxt = problem.buffers[order[head]]
        assert nxt.size
        assert nxt.alignment > 1 or any(
            nxt.lower >= problem.buffers[i].upper or nxt.upper <= problem.buffers[i].lower
            for i in live)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_peak_first_problems(), st.sampled_from(("best", "first")), st.sampled_from((0, 1, 4)),
       st.sampled_from((1, 2, 1 << 14)))
def test_the_head_seen_as_runs_equals_the_reference(
        case: tuple[Problem, list[int]], fit: str, few: int, cached: int) -> None:
    """With the stacked head looked up as runs of overlapping boxes (from any head size),
    runs spliced in or sorted in, and the remembered runs dropped after every few lookups,
    the offsets are still the reference's."""
    from unittest import mock

    from roam_core.layout import dsa_heuristics

    problem, order = case
    with mock.patch.multiple(dsa_heuristics, _STACK_FROM=1, _FEW_RUNS=few,
                             _STACK_CACHED=cached):
        sol = place_in_order(problem, order, fit)
    assert sol is not None
    assert list(sol.offsets) == _reference(problem, order, fit)


def test_runs_of_a_stack_are_its_overlapping_boxes_merged() -> None:
    """``_Stack.runs``: the maximal sequences of consecutive boxes overlapping a window,
    each as one range; a window meeting every box gives one run, one meeting none none."""
    from roam_core.layout.dsa_heuristics import _Stack

    lo = np.array([0, 2, 1, 3, 0])
    hi = np.array([9, 5, 8, 4, 6])
    size = np.array([2, 3, 1, 4, 2])
    top = np.cumsum(size)
    stack = _Stack(lo, hi, top - size, top)
    offs, tops = stack.runs(4, 5)  # boxes 0, 1, 2 and 4 overlap [4, 5); box 3 ends at 4
    assert offs.tolist() == [0, 10]
    assert tops.tolist() == [6, 12]
    offs, tops = stack.runs(3, 4)  # every box
    assert (offs.tolist(), tops.tolist()) == ([0], [12])
    offs, tops = stack.runs(9, 10)  # none
    assert (offs.tolist(), tops.tolist()) == ([], [])
    assert stack.runs(4, 5)[0] is stack.runs(4, 5)[0]  # remembered by the rank pair
