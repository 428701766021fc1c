"""DSA solver: validity, exactness against brute force, flag matrix, capacities, CLI."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roam_core.base.cpu_clock import cpu_now
from roam_core.base.errors import InfeasibleError
from roam_core.base.status import SolveStatus
from roam_core.cli import main
from roam_core.formats.dsa_csv import load_problem, loads_problem
from roam_core.layout.dsa_heuristics import ORDERS, greedy_by_size, portfolio
from roam_core.layout.dsa_search import SearchOptions, search_capacity
from roam_core.layout.dsa_solver import solve_dsa
from roam_core.model.dsa import Buffer, Problem, Solution
from roam_core.oracle.validate import check_dsa_solution
from tests.strategies import problems


def _fits(p: Problem, height: int) -> bool:
    """Brute force: is there a layout of height <= ``height``? (every offset tried)."""
    bs = [b for b in p.buffers if b.size]
    offs: list[int | None] = [None] * len(bs)

    def rec(k: int) -> bool:
        if k == len(bs):
            return True
        b = bs[k]
        for o in range(0, height - b.size + 1, b.alignment):
            if all(offs[j] is None or not b.overlaps(bs[j]) or o + b.size <= offs[j]
                   or offs[j] + bs[j].size <= o for j in range(k)):  # type: ignore[operator]
                offs[k] = o
                if rec(k + 1):
                    return True
        offs[k] = None
        return False

    return rec(0)


def _brute_min_height(p: Problem) -> int:
    h = p.lower_bound()
    while not _fits(p, h):
        h += 1
    return h


def _stairs() -> Problem:
    return Problem((Buffer("a", 0, 2, 2), Buffer("b", 1, 3, 1), Buffer("c", 2, 4, 2),
                    Buffer("d", 0, 4, 1), Buffer("e", 3, 5, 3)))


class TestSolveDsa:
    def test_input12_at_capacity_12(self, minimalloc) -> None:
        p = load_problem(f"{minimalloc}/input.12.csv", capacity=12)
        r = solve_dsa(p, time_limit_s=5)
        assert r.solution is not None
        assert r.solution.height <= 12
        assert check_dsa_solution(p, r.solution) == []

    @given(problems())
    @settings(max_examples=40)
    def test_every_output_passes_the_validator(self, p: Problem) -> None:
        r = solve_dsa(p, time_limit_s=1)
        assert r.solution is not None
        assert check_dsa_solution(p, r.solution) == []
        assert r.solution.height >= p.lower_bound() == r.lower_bound or \
            r.lower_bound <= r.solution.height
        if r.status == "optimal":
            assert r.solution.height == r.lower_bound

    @given(problems(max_buffers=6, max_time=5, max_size=4))
    @settings(max_examples=40)
    def test_exact_equals_brute_force_on_tiny(self, p: Problem) -> None:
        r = solve_dsa(p, time_limit_s=5)
        assert r.solution is not None
        assert r.solution.height == _brute_min_height(p)
        assert r.status == "optimal"

    def test_capacity_below_bound_is_infeasible(self, minimalloc) -> None:
        p = load_problem(f"{minimalloc}/input.12.csv")
        with pytest.raises(InfeasibleError, match="lower bound"):
            solve_dsa(p, capacity=11, time_limit_s=2)

    def test_search_proves_infeasibility(self) -> None:
        p = _stairs()
        sol, proven, _, _ = search_capacity(p, p.lower_bound() - 1,
                                            deadline=cpu_now() + 5)
        assert sol is None
        assert proven

    def test_fixed_offsets_are_kept(self) -> None:
        p = Problem((Buffer("f", 0, 4, 2, offset=3), Buffer("a", 0, 2, 3),
                     Buffer("b", 1, 3, 2)))
        r = solve_dsa(p, time_limit_s=2)
        assert r.solution is not None
        assert r.solution.offsets[0] == 3
        assert check_dsa_solution(p, r.solution) == []

    def test_alignment_is_respected(self) -> None:
        p = Problem(tuple(Buffer(f"b{i}", i, i + 3, 3, 4) for i in range(6)))
        r = solve_dsa(p, time_limit_s=2)
        assert r.solution is not None
        assert check_dsa_solution(p, r.solution) == []
        assert all(o % 4 == 0 for o in r.solution.offsets)

    @pytest.mark.slow  # ~3-16 s: CP-SAT / exact search on many instances
    def test_real_instance_within_capacity(self, minimalloc) -> None:
        p = load_problem(f"{minimalloc}/F.1048576.csv", capacity=1048576)
        r = solve_dsa(p, time_limit_s=30)
        assert r.solution is not None
        assert r.solution.height <= 1048576
        assert check_dsa_solution(p, r.solution) == []

    def test_heuristics_only_never_beat_greedy_floor(self, minimalloc) -> None:
        p = load_problem(f"{minimalloc}/A.1048576.csv")
        r = solve_dsa(p, time_limit_s=2, exact=False)
        assert r.solution is not None
        assert r.solution.height <= greedy_by_size(p).height
        # heuristics only: the portfolio, then the promotion passes, no search node
        assert r.method.startswith(("greedy:", "promote:"))
        assert r.nodes == 0
        assert r.solution.height <= min(h for m, h in r.tried if m.startswith("greedy:"))

    def test_cancel_returns_a_layout(self, minimalloc) -> None:
        p = load_problem(f"{minimalloc}/E.1048576.csv")
        r = solve_dsa(p, time_limit_s=30, cancel=lambda: True)
        assert r.solution is not None
        # cancelled before the exact search: no node visited, the portfolio's layout returned
        assert (r.status, r.nodes) == (SolveStatus.CANCELLED, 0)
        assert check_dsa_solution(p, r.solution) == []


class TestDeterministicWork:
    @pytest.mark.slow
    def test_same_work_limit_same_offsets(self, minimalloc) -> None:
        """The search is cut by nodes, not the clock: two runs (one with a far looser wall-clock
        limit) give identical offsets, and the result says the work limit stopped it."""
        p = load_problem(f"{minimalloc}/J.1048576.csv").with_capacity(None)
        a = solve_dsa(p, time_limit_s=60, work_limit=1500)
        b = solve_dsa(p, time_limit_s=600, work_limit=1500)
        assert a.solution is not None
        assert b.solution is not None
        assert a.solution.offsets == b.solution.offsets
        assert (a.nodes, a.method, a.lower_bound) == (b.nodes, b.method, b.lower_bound)
        assert a.stopped_by == b.stopped_by == "work"
        assert 0 < a.nodes <= 1500
        assert check_dsa_solution(p, a.solution) == []

    def test_minimising_c_reaches_its_bound(self, minimalloc) -> None:
        p = load_problem(f"{minimalloc}/C.1048576.csv").with_capacity(None)
        r = solve_dsa(p, time_limit_s=60, work_limit=3000)
        assert r.solution is not None
        assert r.solution.height == r.lower_bound == 1_039_360
        assert (r.status, r.stopped_by) == (SolveStatus.OPTIMAL, "")
        assert check_dsa_solution(p, r.solution) == []

    def test_capacity_search_node_budget(self, minimalloc) -> None:
        p = load_problem(f"{minimalloc}/E.1048576.csv", capacity=1048576)
        r = solve_dsa(p, time_limit_s=60, work_limit=200)
        assert r.solution is None
        assert (r.status, r.stopped_by) == (SolveStatus.TIMEOUT, "work")
        assert r.nodes <= 200


    def test_large_problems_run_a_fixed_set_of_passes(self, minimalloc, monkeypatch) -> None:
        """Above the search limit only the greedy passes of LARGE_ORDERS run, all of them."""
        from roam_core.layout import dsa_solver

        monkeypatch.setattr(dsa_solver, "MAX_SEARCH_BUFFERS", 50)
        p = load_problem(f"{minimalloc}/A.1048576.csv").with_capacity(None)
        a = solve_dsa(p, time_limit_s=60)
        b = solve_dsa(p, time_limit_s=120)
        greedy = [f"greedy:{o}:best" for o in dsa_solver.LARGE_ORDERS]
        assert [m for m, _ in a.tried][:-1] == greedy
        # then the promotion passes, all of them unless the bound is reached first
        name, height = a.tried[-1]
        assert name.startswith("promote:")
        passes = int(name.rpartition("x")[2])
        assert passes == dsa_solver.LARGE_PROMOTE_PASSES or height == p.lower_bound()
        assert a.tried == b.tried
        assert a.solution is not None
        assert b.solution is not None
        assert a.solution.offsets == b.solution.offsets
        assert (a.nodes, a.stopped_by) == (0, "")

    def test_invalid_layout_never_leaves_the_solver(self, monkeypatch) -> None:
        from roam_core.base.errors import PlanInvalidError
        from roam_core.layout import dsa_solver
        from roam_core.model.dsa import Solution

        p = Problem((Buffer("a", 0, 2, 4), Buffer("b", 1, 3, 4)))
        monkeypatch.setattr(dsa_solver, "portfolio", lambda *a, **k: (
            Solution((0, 2), 6), "greedy:broken", [("greedy:broken", 6)]))
        with pytest.raises(PlanInvalidError):
            solve_dsa(p, time_limit_s=5, exact=False)


class TestPortfolio:
    def test_every_order_is_valid(self, minimalloc) -> None:
        p = load_problem(f"{minimalloc}/B.1048576.csv")
        best, name, tried = portfolio(p)
        assert len(tried) == 2 * len(ORDERS)
        assert best.height == min(h for _, h in tried)
        assert name in dict(tried)
        assert check_dsa_solution(p, best) == []


_FLAGS = [f.name for f in dataclasses.fields(SearchOptions)]
_COMBOS = list(itertools.product([True, False], repeat=len(_FLAGS)))
_CASES = [
    Problem((Buffer("a", 0, 3, 4), Buffer("b", 3, 9, 4), Buffer("c", 0, 9, 4),
             Buffer("d", 9, 21, 4), Buffer("e", 0, 21, 4))),
    _stairs(),
    Problem((Buffer("a", 0, 2, 2), Buffer("b", 1, 3, 2), Buffer("c", 2, 4, 2),
             Buffer("d", 0, 4, 1))),
]


@pytest.mark.slow
@pytest.mark.parametrize("combo", _COMBOS, ids=lambda c: "".join("1" if x else "0" for x in c))
def test_flag_matrix_same_verdicts(combo: tuple[bool, ...]) -> None:
    """Every combination of search switches gives the brute-force verdict (minimalloc style)."""
    opts = SearchOptions(**dict(zip(_FLAGS, combo)))
    for p in _CASES:
        lb = p.lower_bound()
        for cap in (lb - 1, lb, lb + 1):
            sol, proven, _, _ = search_capacity(p, cap, deadline=cpu_now() + 10,
                                                options=opts)
            expect = _fits(p, cap)
            assert (sol is not None) == expect, (p, cap)
            assert proven == (not expect)
            if sol is not None:
                assert sol.height <= cap
                assert check_dsa_solution(p.with_capacity(cap), sol) == []


class TestLayoutCommand:
    def test_writes_offsets(self, minimalloc, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
        out = tmp_path / "out.csv"
        rc = main(["layout", f"{minimalloc}/input.12.csv", "-o", str(out), "--capacity", "12",
                   "--time-limit", "5"])
        assert rc == 0
        assert "height 12" in capsys.readouterr().out
        solved = loads_problem(out.read_text())
        assert all(b.offset is not None for b in solved.buffers)
        assert out.read_text().splitlines()[0] == "id,lower,upper,size,offset"

    def test_impossible_capacity_exits_2(self, minimalloc, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
        rc = main(["layout", f"{minimalloc}/input.12.csv", "-o", str(tmp_path / "o.csv"),
                   "--capacity", "11"])
        assert rc == 2
        assert "capacity" in capsys.readouterr().err

    def test_alignment_flag(self, minimalloc, tmp_path) -> None:  # type: ignore[no-untyped-def]
        out = tmp_path / "out.csv"
        assert main(["layout", f"{minimalloc}/input.12.csv", "-o", str(out),
                     "--alignment", "8", "--time-limit", "2"]) == 0
        assert all(b.offset % 8 == 0 for b in loads_problem(out.read_text()).buffers)

    def test_malformed_csv_exits_2(self, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
        bad = tmp_path / "bad.csv"
        bad.write_text("id,lower,upper,size\na,0,zz,1\n")
        assert main(["layout", str(bad), "-o", str(tmp_path / "o.csv")]) == 2
        assert "row 1" in capsys.readouterr().err


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(problems())
def test_lazy_overlaps_and_shared_sections_match_brute_force(problem: Problem) -> None:
    """The search's per-buffer overlap sets (computed when first placed, shared by the
    preorders) and its section membership (built once, shared, renumbered on use) equal the
    sets a direct scan gives, for every preorder."""
    import numpy as np

    from roam_core.layout import dsa_search as ds

    lower, upper, _, _ = ds.buffer_arrays(problem)
    free = ds._free_buffers(problem)
    shared = ds._Overlaps(lower[free], upper[free])
    for pre in ds.PREORDERS:
        s = ds._Search(problem, 10**9, pre, SearchOptions(), shared)
        lo, up = s.lower, s.upper
        for k in range(s.n):
            want = {j for j in range(s.n) if j != k and lo[j] < up[k] and up[j] > lo[k]}
            assert set(s.overlaps(k).tolist()) == want
        for sec in range(s.nsec):
            got = s._inv_ext[s._members[s.indptr[sec]:s.indptr[sec + 1]]].tolist()
            want = {j for j in range(s.n) if s.slo[j] <= sec < s.shi[j]} | {s.n}
            assert len(got) == len(want)
            assert set(got) == want
            assert got[-1] == s.n
        assert np.array_equal(s.indptr[-1:], [len(s._members)])
    # filled a few sections at a time: the same table
    whole = ds._section_csr(lower[free], upper[free])
    for chunk in (1, 3, 7):
        part = ds._section_csr(lower[free], upper[free], chunk_entries=chunk)
        assert np.array_equal(part[0], whole[0])
        assert np.array_equal(part[1], whole[1])


def _raised(p: Problem):  # type: ignore[no-untyped-def]
    """A valid but poor layout: first fit in increasing size (small buffers low)."""
    from roam_core.layout.dsa_heuristics import place_in_order

    order = sorted(range(len(p.buffers)), key=lambda i: (p.buffers[i].size, i))
    sol = place_in_order(p, order, "first")
    assert sol is not None
    return sol


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(problems(max_buffers=7, max_time=6, max_size=6))
def test_repair_with_the_whole_run_as_window_is_exact(problem: Problem) -> None:
    """A window covering every step frees every buffer: the repair is then the complete
    search, and reaches the brute-force optimum from any start."""
    from roam_core.layout.dsa_repair import repair_peak

    start = _raised(problem)
    best = _brute_min_height(problem)
    sol, _nodes, how = repair_peak(problem, start, best, node_budget=10**6,
                                  deadline=cpu_now() + 60, fractions=(0.0,))
    if start.height <= best:  # nothing to repair: no buffer above the target, no window
        assert sol is None or sol.height <= best
        return
    assert sol is not None
    assert how.startswith("repair@0:")
    assert check_dsa_solution(problem, sol) == []
    assert sol.height <= best


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(problems(max_buffers=8, max_time=8, max_size=8))
def test_repair_in_narrow_windows_is_valid_keeps_pins_and_is_deterministic(
        problem: Problem) -> None:
    """Narrow windows: whatever comes back is valid, within the target, keeps fixed offsets
    fixed, and is the same on a second call (node-limited, not timed)."""
    from roam_core.layout.dsa_repair import repair_peak

    bs = list(problem.buffers)
    if bs:
        bs[0] = dataclasses.replace(bs[0], offset=0)  # one pinned buffer at the bottom
    p = Problem(tuple(bs))
    start = _raised(p)
    lb = p.lower_bound()
    runs = [repair_peak(p, start, lb, node_budget=200, deadline=cpu_now() + 60,
                        fractions=(0.99, 0.7)) for _ in range(2)]
    assert runs[0] == runs[1]
    sol, nodes, _ = runs[0]
    assert nodes <= 200 + 64
    if sol is not None:
        assert check_dsa_solution(p, sol) == []
        assert sol.height <= lb
        if bs:
            assert sol.offsets[0] == 0


@settings(max_examples=60, deadline=None)
@given(problems(max_buffers=7, max_time=6, max_size=6), st.integers(0, 3))
def test_repair_from_starts_with_the_whole_run_as_window_is_exact(problem: Problem,
                                                                  pin: int) -> None:
    """Several starts, one window covering every step: each pair's search is complete, so
    the round-robin reaches the brute-force optimum (within the budget, the same on a
    second call), the start it names is one that was given, and the layout is valid."""
    from roam_core.layout.dsa_heuristics import greedy_by_size
    from roam_core.layout.dsa_repair import repair_from_starts

    starts = [_raised(problem), greedy_by_size(problem)][: 1 + pin % 2]
    best = _brute_min_height(problem)
    runs = [repair_from_starts(problem, starts, best, node_budget=10**5,
                               deadline=cpu_now() + 60, fraction=0.0)
            for _ in range(2)]
    assert runs[0] == runs[1]
    sol, nodes, how, k = runs[0]
    assert nodes <= 10**5
    if all(s.height <= best for s in starts):  # no buffer above the target, no window
        return
    assert sol is not None
    assert check_dsa_solution(problem, sol) == []
    assert sol.height <= best
    assert 0 <= k < len(starts)
    # (a start already within the target gets a window too: fraction 0 frees every
    # buffer, so the start named may be that one)
    assert starts[k].height > best or any(s.height <= best for s in starts)
    assert how.startswith("repair@0:")


def test_repair_from_starts_turns_to_the_start_that_repairs() -> None:
    """The lowest start cannot be repaired in its window (its search ends without a layout:
    that pair is dropped), the higher one can: the round-robin returns the second start's
    repair at the optimum, in a few nodes; duplicates and an empty list give nothing new."""
    from roam_core.layout.dsa_repair import repair_from_starts, repair_peak

    p = Problem((Buffer("a", 0, 4, 3), Buffer("b", 3, 7, 4), Buffer("c", 0, 2, 2),
                 Buffer("d", 5, 6, 4)))
    low = Solution.from_offsets(p, [2, 5, 0, 0])  # height 9
    high = Solution.from_offsets(p, [8, 4, 0, 0])  # height 11
    assert check_dsa_solution(p, low) == []
    assert check_dsa_solution(p, high) == []
    best = _brute_min_height(p)
    assert best == 8
    deadline = cpu_now() + 60
    assert repair_peak(p, low, best, node_budget=10**4, deadline=deadline,
                       fractions=(0.9,))[0] is None
    sol, nodes, how, k = repair_from_starts(p, [low, high, low], best, node_budget=10**4,
                                            deadline=deadline, fraction=0.9)
    assert sol is not None
    assert sol.height == best
    assert k == 1
    assert check_dsa_solution(p, sol) == []
    assert 0 < nodes <= 64
    assert how.startswith("repair@0.9:")
    assert repair_from_starts(p, [], best, node_budget=100,
                              deadline=deadline) == (None, 0, "repair", -1)


def test_repair_fixes_a_layout_stuck_above_its_peak() -> None:
    """Tiny long-lived buffers stacked on top of the peak (the mobilenet_v2 b1 pattern): the
    repair frees the buffers live at the peak and reaches the bound; the buffers far from
    the peak keep their offsets."""
    from roam_core.layout.dsa_repair import repair_peak

    bufs = [Buffer("big", 4, 6, 8), Buffer("far", 0, 2, 9), Buffer("far2", 8, 10, 9)]
    bufs += [Buffer(f"t{k}", 1 + k, 9 - k, 1) for k in range(3)]  # nested, live at the peak
    p = Problem(tuple(bufs))
    assert p.lower_bound() == 11  # big + the three tiny ones at steps 4-5
    offs = [0, 0, 0, 9, 10, 11]  # the tiny ones above the big one's old spot: height 12
    start = Solution.from_offsets(p, offs)
    assert check_dsa_solution(p, start) == []
    assert start.height == 12
    sol, _nodes, how = repair_peak(p, start, node_budget=1000, deadline=cpu_now() + 60)
    assert sol is not None
    assert sol.height == 11
    assert check_dsa_solution(p, sol) == []
    assert how.startswith("repair@0.97:")
    assert sol.offsets[1] == 0
    assert sol.offsets[2] == 0


def test_solve_dsa_repairs_the_greedy_layout_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Minimising, when the search at the bound runs out of nodes, the repair of the best
    layout runs, inside the same work limit (the greedy portfolio is made to return the
    stuck layout, and the whole-problem search to give up)."""
    from roam_core.layout import dsa_solver as ds

    bufs = [Buffer("big", 4, 6, 8), Buffer("far", 0, 2, 9), Buffer("far2", 8, 10, 9)]
    bufs += [Buffer(f"t{k}", 1 + k, 9 - k, 1) for k in range(3)]
    p = Problem(tuple(bufs))
    stuck = Solution.from_offsets(p, [0, 0, 0, 9, 10, 11])
    tried = [("greedy:stuck", 12)] * (len(ORDERS) * 2)  # every pass ran (not cut by time)
    monkeypatch.setattr(ds, "portfolio", lambda *a, **k: (stuck, "greedy:stuck", tried))
    real = ds.search_capacity

    def whole_gives_up(problem: Problem, capacity: int, **kw: object) -> object:
        if all(b.offset is None for b in problem.buffers):  # the whole problem, not a window
            return None, False, "search:work", 10
        return real(problem, capacity, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ds, "search_capacity", whole_gives_up)
    r = ds.solve_dsa(p, time_limit_s=10, work_limit=500)
    assert r.solution is not None
    assert r.solution.height == 11
    assert r.method.startswith("repair@")
    assert r.status == SolveStatus.OPTIMAL
    assert 0 < r.nodes <= 500


@given(problems(max_buffers=6, max_time=6, max_size=4), st.sampled_from(["best", "first"]),
       st.booleans())
@settings(max_examples=60, deadline=None)
def test_promotion_is_valid_never_worse_bounded_by_brute_force_and_deterministic(
        problem: Problem, fit: str, pin: bool) -> None:
    """The iterated greedy keeps pinned offsets, never returns a layout above its start nor
    below the brute-force optimum, stops at the target, and gives the same layout twice."""
    from roam_core.layout.dsa_heuristics import named_order, place_in_order, promote_high

    pin = pin and bool(problem.buffers)
    if pin:  # pin the first buffer where a greedy pass put it
        first = greedy_by_size(problem).offsets[0]
        problem = Problem((dataclasses.replace(problem.buffers[0], offset=first),
                           *problem.buffers[1:]))
    order = named_order(problem, "size")
    start = place_in_order(problem, order, fit)
    assert start is not None
    optimum = 0 if pin else _brute_min_height(problem)
    runs = [promote_high(problem, order, fit, start, target=problem.lower_bound(), passes=3)
            for _ in range(2)]
    assert runs[0][0].offsets == runs[1][0].offsets
    sol, passes, cut = runs[0]
    assert not cut
    assert 0 <= passes <= 3
    assert check_dsa_solution(problem, sol) == []
    assert optimum <= sol.height <= start.height
    if pin:
        assert sol.offsets[0] == problem.buffers[0].offset
    if start.height <= problem.lower_bound():
        assert passes == 0


def test_promotion_reaches_the_brute_force_optimum_where_every_large_pass_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On the large-problem path (no exact search), all four greedy passes end one unit
    above the optimum; one promotion pass (the buffers above the bound first) reaches it."""
    from roam_core.layout import dsa_solver as ds

    p = Problem((Buffer("a", 4, 7, 1), Buffer("b", 0, 5, 1), Buffer("c", 4, 5, 2),
                 Buffer("d", 3, 6, 1), Buffer("e", 2, 3, 3), Buffer("f", 5, 7, 3)))
    monkeypatch.setattr(ds, "MAX_SEARCH_BUFFERS", 0)  # take the large-problem path
    r = ds.solve_dsa(p, time_limit_s=10)
    assert [h for m, h in r.tried if m.startswith("greedy:")] == [6, 6, 6, 6]
    assert r.solution is not None
    assert r.solution.height == _brute_min_height(p) == p.lower_bound() == 5
    assert r.method == "promote:size:best"
    assert r.status == SolveStatus.OPTIMAL
    assert r.nodes == 0
    assert r.stopped_by == ""
    assert check_dsa_solution(p, r.solution) == []
    # with a capacity the passes aim at it
    rc = ds.solve_dsa(p, time_limit_s=10, capacity=5)
    assert rc.solution is not None
    assert rc.solution.height == 5
    assert rc.method == "promote:size:best"


@given(problems(max_buffers=7, max_time=6, max_size=4), st.sampled_from(["best", "first"]))
@settings(max_examples=60, deadline=None)
def test_promotion_stops_at_a_fixed_point_with_the_same_layout(problem: Problem,
                                                               fit: str) -> None:
    """Once the buffers above the target are in front already, every further pass repeats
    the same layout: stopping there gives what running out the passes gives."""
    import numpy as np

    from roam_core.layout.dsa_heuristics import named_order, place_in_order, promote_high

    order = named_order(problem, "size")
    start = place_in_order(problem, order, fit)
    assert start is not None
    target = problem.lower_bound()
    sol, passes, _ = promote_high(problem, order, fit, start, target=target, passes=12)
    size = np.array([b.size for b in problem.buffers], np.int64)
    best = cur = start
    for _ in range(12):  # the loop without the fixed-point stop
        if best.height <= target:
            break
        high = np.array(cur.offsets, np.int64) + size > target
        if not high.any():
            break
        order = [i for i in order if high[i]] + [i for i in order if not high[i]]
        cur = place_in_order(problem, order, fit)
        assert cur is not None
        best = cur if cur.height < best.height else best
    assert sol.offsets == best.offsets
    assert passes <= 12
