"""Solve DSA problems: a greedy portfolio, then an exact search over canonical placements.

Method
------
1. **Portfolio** (:mod:`roam_core.layout.dsa_heuristics`): several buffer orders (size, lifetime,
   area, section total, start) times best/first fit; keep the lowest layout.  Above
   ``MAX_SEARCH_BUFFERS`` free buffers (no exact search), a few *promotion* passes follow
   (:func:`~roam_core.layout.dsa_heuristics.promote_high`: the best pass's order again, with
   the buffers that ended above the bound moved to the front).
2. **Exact search** (:class:`_Search`), after the idea of MiniMalloc (Moffitt, ASPLOS'23):
   a depth-first search that only builds *canonical* layouts, where every buffer sits at the
   lowest offset its already placed time-neighbours allow (any valid layout can be pushed down
   into such a form, so nothing is lost).  Buffers are placed in non-decreasing offset order.
   Pruning:

   - *section inference*: time is cut into sections (between consecutive lifetime ends); a
     section's floor plus the sizes of its unplaced buffers must fit the capacity;
   - *unallocated floor*: a section's floor is at least the lowest offset any of its
     unplaced buffers can still take;
   - *monotonic floor*: nothing is placed below the last placed offset, so every section's
     floor is at least that offset;
   - *dominance*: never place a buffer at or above the top some unplaced buffer could reach
     now (that buffer would fit entirely below, so the layout wastes a gap);
   - *canonical order*: buffers at the same offset are placed in static-order rank;
   - *dynamic decomposition*: when no unplaced buffer crosses a section boundary, the two
     sides are solved independently;
   - *memo*: the state of a time range (unplaced buffers, their lowest offsets, the section
     floors) that once failed fails again, so it is remembered and skipped.

   Buffers are tried by lowest feasible offset, then a static preorder (largest section total,
   lifetime, area...).  Several preorders are run round-robin under doubling node limits.
3. **Height minimisation** (no capacity): a search at the bound with a sixth of the nodes;
   if that fails, a *peak repair* of the best layout (:func:`repair_peak`: the buffers live
   where the load is near the bound are searched at it, everything else fixed); then bisect
   the capacity between the proven lower bound
   and the best layout found, each step a capacity-bounded search with a share of the node
   budget; once exhausted budgets have closed the bisection, keep descending in small steps
   below the best layout until the budget is spent.  A bound proven by a step is rounded
   up to the grain of the heights (:func:`height_grain`: every canonical height is a
   multiple of the gcd of sizes, alignments and fixed offsets).
4. **Proven bounds above the live-set bound** (:func:`window_lower_bound`, not run by
   :func:`solve_dsa`): the buffers live in a time window, lifetimes cut to it, are a
   relaxation; when the complete search proves a window does not fit a height, neither does
   the problem.  On MiniMalloc C, D and J no window of up to 64 sections proves anything
   above the live-set bound (``benchmarks/results/dsa.md``).

Deterministic work limits
-------------------------
Where the answer depends on how far a search got, it is cut by a *work count* (search nodes),
never by the clock: the same problem and ``work_limit`` give the same layout on an idle or a
loaded machine.  ``work_limit`` defaults to ``time_limit_s * NODES_PER_S`` (a rate a loaded
2-core machine still reaches); the wall-clock ``time_limit_s`` stays only as an outer safety
limit, and ``DsaResult.stopped_by`` says ``"time"`` when it, not the work count, ended a run.
With a capacity, a layout found is the same whatever the load (the node limits of the
restarts are fixed); only whether one is found before the clock runs out can differ.

The search is complete for problems without fixed offsets: when it finishes without a layout,
none exists (``InfeasibleError``).  With fixed offsets it only steps over them.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from roam_core.base.cancel import is_cancelled
from roam_core.base.errors import InfeasibleError, PlanInvalidError
from roam_core.base.status import SolveStatus
from roam_core.layout.dsa_heuristics import (
    ORDERS,
    buffer_arrays,
    named_order,
    portfolio,
    promote_high,
    section_totals,
)
from roam_core.model.dsa import Problem, Solution
from roam_core.oracle.validate import check_dsa_solution

__all__ = ["BOUND_WIDTHS", "LARGE_PROMOTE_PASSES", "NODES_PER_S", "PREORDERS",
           "REPAIR_FRACTIONS", "REPAIR_PREORDERS", "DsaResult", "SearchOptions",
           "height_grain", "repair_from_starts", "repair_peak", "search_capacity",
           "solve_dsa", "window_lower_bound"]

_logger = logging.getLogger(__name__)
_OPT, _FEAS = SolveStatus.OPTIMAL, SolveStatus.FEASIBLE

#: Above this many free buffers the exact search is skipped (its set-up is quadratic).
MAX_SEARCH_BUFFERS = 6000

#: Greedy passes for problems above ``MAX_SEARCH_BUFFERS`` (every pass is O(n^2)): the
#: orders that win on the large idealloc sets (size: pangu_2.6B; total_length: S_1), best fit.
LARGE_ORDERS = ("size", "total_length", "size_length", "total_size")
#: Iterated-greedy passes (:func:`~roam_core.layout.dsa_heuristics.promote_high`) after the
#: portfolio on problems above ``MAX_SEARCH_BUFFERS`` (a fixed count: deterministic).
#: pangu_2.6B reaches its bound in the first, S_1 1.0026 -> 1.0010 x LB in the first.
LARGE_PROMOTE_PASSES = 4

#: Static preorders (letters: T = max section total, L = lifetime length, A = area,
#: Z = size), tried round-robin.  ("LAT", a third, solved none of MiniMalloc A-K first and
#: cost B and E a third more nodes: A-K together 113k nodes with it, 101k without.)
PREORDERS = ("TLA", "TAL")

_BIG = np.iinfo(np.int64).max // 4
# ufunc reductions without ndarray.max's Python wrapper (the search calls them ~10 per node)
_MAX, _MIN = np.maximum.reduce, np.minimum.reduce
#: Largest section-membership table renumbered once per preorder (above: on every check).
_RENUMBER_MAX = 1 << 24
#: Most buffers for which each preorder keeps its own renumbered overlap sets.
_RENUMBER_OV_MAX = 2048
#: Most failed sub-problem states remembered (the memo is cleared beyond this).
_MEMO_LIMIT = 1_000_000

#: Restart schedule of :func:`search_capacity`: the first node limit per buffer, the growth.
#: (Tuned on MiniMalloc A-K: 113k nodes together with 32, 169k with 2, 145k with 16, 175k
#: with 24, 126k with 40: the count swings with where the limits fall, 32 is no law; with
#: the two preorders: 101k with 32, 137k with 24, 121k with 48, 141k with 64.)
_FIRST_LIMIT, _GROWTH = 32, 2

#: A bisection step of the height minimisation gets 1/_STEP_SHARE of the nodes left.
_STEP_SHARE = 4
#: The peak repair after the first step gets half of the nodes left, at most this.
_REPAIR_MAX_NODES = 5000

#: Search nodes per second of ``time_limit_s`` in the default work limit.  An idle core does
#: about 9,000; 1,000-3,000 were measured on 2 cores at load 11, so the default work fits
#: the time limit even on a heavily shared machine (and the clock rarely decides).
NODES_PER_S = 1000


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """Switches of the exact search; every combination is complete (same verdicts).

    Users should keep the defaults (all on); they exist for benchmarking and tests.
    """

    canonical_only: bool = True  # same-offset buffers placed in preorder rank only
    section_inference: bool = True  # floor + unplaced sizes of each section <= capacity
    dynamic_ordering: bool = True  # try buffers by lowest feasible offset first
    check_dominance: bool = True  # skip placements leaving a gap an unplaced buffer fits
    unallocated_floor: bool = True  # section floor >= lowest offset of its unplaced buffers
    static_preordering: bool = True  # sort buffers by the preorder keys (else input order)
    dynamic_decomposition: bool = True  # solve independent time ranges separately
    monotonic_floor: bool = True  # section floors are at least the last placed offset
    memoize: bool = True  # remember sub-problems (state of a time range) proven to fail


@dataclass(frozen=True, slots=True)
class DsaResult:
    """What :func:`solve_dsa` found.

    Parameters
    ----------
    solution : Solution or None
        The best layout (``None`` only when a capacity was given and none was found).
    lower_bound : int
        A proven lower bound on the height of any layout.
    status : SolveStatus
        ``OPTIMAL`` (height equals the bound), ``FEASIBLE`` (a layout within the
        capacity, or the best found), ``TIMEOUT`` (capacity given, no layout found in time)
        or ``CANCELLED``.
    wall_time_s : float
        Seconds spent.
    method : str
        Which step produced the solution (``"greedy:size:best"``, ``"search:TLA"``, ...).
    nodes : int
        Search nodes visited.
    tried : tuple
        ``(method, height)`` of every heuristic run.
    stopped_by : str
        What ended the search early: ``""`` (it finished: optimal, infeasible, or a layout
        within the capacity), ``"work"`` (the deterministic work limit; the layout depends
        only on the problem and the limit), ``"time"`` (the wall-clock safety limit; the
        layout may differ from run to run) or ``"cancel"``.
    """

    solution: Solution | None
    lower_bound: int
    status: SolveStatus
    wall_time_s: float
    method: str
    nodes: int = 0
    tried: tuple[tuple[str, int], ...] = field(default_factory=tuple)
    stopped_by: str = ""


class _NodeLimit(Exception):
    pass


class _Stop(Exception):
    pass


class _Overlaps:
    """Buffers overlapping each buffer in time, computed when the search first places it.

    Indices are positions among the problem's free non-empty buffers (before any
    preordering), shared by the searches of every preorder.  Building every buffer's set up
    front cost ``O(n^2)`` time and, with long-lived buffers, ``O(n^2)`` memory per preorder
    (several hundred MiB for a 13k-op GPT-2 step); the search usually places far fewer.
    """

    def __init__(self, lower: np.ndarray, upper: np.ndarray) -> None:
        self.lower, self.upper = lower, upper
        self.sets: dict[int, np.ndarray] = {}
        self.dtype = np.int32 if len(lower) < 2**31 else np.int64

    def section_members(self) -> tuple[np.ndarray, np.ndarray]:
        """``(members, indptr)``: the buffers live in each section (CSR, free numbering, a
        sentinel ``n`` last in every section), built once for every preorder's search."""
        if not hasattr(self, "_csr"):
            self._csr = _section_csr(self.lower, self.upper)
        return self._csr

    def __getitem__(self, j: int) -> np.ndarray:
        ov = self.sets.get(j)
        if ov is None:
            hit = (self.lower < self.upper[j]) & (self.upper > self.lower[j])
            hit[j] = False
            ov = np.nonzero(hit)[0].astype(self.dtype)
            self.sets[j] = ov
        return ov


def _section_csr(lo: np.ndarray, up: np.ndarray,
                 chunk_entries: int = 1 << 22) -> tuple[np.ndarray, np.ndarray]:
    """Buffers live in each section (between consecutive distinct lifetime ends), as CSR:
    ``members[indptr[s]:indptr[s + 1]]`` are the buffers of section ``s``, ascending, then the
    sentinel ``n``.  With long-lived buffers the entries number ``O(n x sections)`` (59 M
    on a 54k-op GPT-2 step), so the table is int32 and filled a block of sections at a time
    (the sort's scratch stays at ``chunk_entries``)."""
    n = len(lo)
    pts = np.unique(np.concatenate([lo, up])) if n else np.zeros(1, np.int64)
    slo, shi = np.searchsorted(pts, lo), np.searchsorted(pts, up)
    nsec = max(len(pts) - 1, 0)
    live = np.zeros(nsec + 1, np.int64)
    np.add.at(live, slo, 1)
    np.add.at(live, shi, -1)
    per_sec = np.cumsum(live)[:nsec] + 1  # members and the sentinel
    indptr = np.zeros(nsec + 1, np.int64)
    indptr[1:] = np.cumsum(per_sec)
    members = np.empty(int(indptr[-1]), np.int32)
    c0 = 0
    while c0 < nsec:
        # sections c0 .. c1-1: as many as fit in chunk_entries (at least one)
        c1 = max(c0 + 1, int(np.searchsorted(indptr, indptr[c0] + chunk_entries, "right")) - 1)
        c1 = min(c1, nsec)
        sel = np.nonzero((slo < c1) & (shi > c0))[0]
        a, b = np.maximum(slo[sel], c0), np.minimum(shi[sel], c1)
        spans = b - a
        start = np.cumsum(spans) - spans
        secs = np.arange(int(spans.sum()), dtype=np.int64) - np.repeat(start - a, spans)
        rows = np.repeat(sel.astype(np.int32), spans)
        secs = np.concatenate([secs, np.arange(c0, c1)])
        rows = np.concatenate([rows, np.full(c1 - c0, n, np.int32)])
        srt = np.argsort(secs, kind="stable")  # by section, then buffer, then the sentinel
        members[indptr[c0]:indptr[c1]] = rows[srt]
        c0 = c1
    return members, indptr


def _free_buffers(problem: Problem) -> np.ndarray:
    return np.array([i for i, b in enumerate(problem.buffers) if b.offset is None and b.size > 0],
                    np.int64)


class _Search:
    """Canonical depth-first search at a fixed capacity (state kept in numpy arrays)."""

    def __init__(self, problem: Problem, capacity: int, preorder: str,
                 options: SearchOptions, overlaps: _Overlaps | None = None) -> None:
        self.opts = options
        self.capacity = capacity
        bs = problem.buffers
        lower, upper, size, align = buffer_arrays(problem)
        free = _free_buffers(problem)
        fixed = [i for i, b in enumerate(bs) if b.offset is not None and b.size > 0]
        self.fixed = [(int(lower[i]), int(upper[i]), int(bs[i].offset),  # type: ignore[arg-type]
                       int(bs[i].offset) + int(size[i])) for i in fixed]  # type: ignore[arg-type]
        fx = np.array(self.fixed, np.int64).reshape(-1, 4)
        lo, up, sz, al = lower[free], upper[free], size[free], align[free]
        if options.static_preordering and len(free):
            keys = {"T": section_totals(lo, up, sz), "L": up - lo, "A": sz * (up - lo), "Z": sz}
            perm = np.lexsort(tuple(-keys[c] for c in reversed(preorder)))
        else:
            perm = np.arange(len(free))
        # renumber: buffer k of the search is rank k of the preorder
        self.orig = free[perm]
        lo, up, sz, al = lo[perm], up[perm], sz[perm], al[perm]
        n = len(lo)
        self.n = n
        # buffers overlapping each buffer in time (free-buffer numbering, mapped on use)
        self._ov = overlaps if overlaps is not None else _Overlaps(lower[free], upper[free])
        self._perm = perm
        self._inv = np.empty(n, np.int64)
        self._inv[perm] = np.arange(n)
        self.size = sz
        self.align = al
        self.any_align = bool((al > 1).any())
        self.lower, self.upper = lo, up
        pts = np.unique(np.concatenate([lo, up])) if n else np.zeros(1, np.int64)
        self.slo = np.searchsorted(pts, lo)
        self.shi = np.searchsorted(pts, up)
        nsec = max(len(pts) - 1, 0)
        self.nsec = nsec
        diff = np.zeros(nsec + 1, np.int64)
        np.add.at(diff, self.slo, sz)
        np.add.at(diff, self.shi, -sz)
        self.total0 = np.cumsum(diff)[:nsec]
        # buffers overlapping each buffer in time (free-buffer numbering, mapped on use)
        # section membership (CSR) with a sentinel member ``n`` in every section, shared by
        # the preorders and renumbered (the order within a section does not matter: only
        # its minimum is read)
        self._members, self.indptr = self._ov.section_members()
        self._inv_ext = np.concatenate([self._inv, [n]])
        # the members in this search's numbering, once (unless the table is huge)
        self._mem_s = (self._inv_ext[self._members] if len(self._members) <= _RENUMBER_MAX
                       else None)
        cross = np.zeros(nsec + 1, np.int64)
        np.add.at(cross, self.slo, 1)
        np.add.at(cross, np.maximum(self.shi - 1, self.slo), -1)
        self.cuts0 = np.cumsum(cross)[: max(nsec - 1, 0)]
        self.preorder = preorder
        # fixed buffers overlapping each free one in time: (offsets, tops), by offset
        self.fixed_near: list[tuple[np.ndarray, np.ndarray]] = []
        if len(fx):
            for i in range(n):
                m = (fx[:, 0] < up[i]) & (fx[:, 1] > lo[i])
                o = np.argsort(fx[m, 2], kind="stable")
                self.fixed_near.append((fx[m, 2][o], fx[m, 3][o]))
        # overlaps() renumbered for this search, kept when small (at most n^2 entries)
        self._ov_s: dict[int, np.ndarray] | None = {} if n <= _RENUMBER_OV_MAX else None
        self.rank = np.arange(n)  # tie-break rank of each buffer in its current partition
        self.failed: set[bytes] = set()  # sub-problem states proven to fail
        self.reset()

    def overlaps(self, k: int) -> np.ndarray:
        """Search indices of the buffers overlapping search buffer ``k`` in time."""
        ov = self._ov_s.get(k) if self._ov_s is not None else None
        if ov is None:
            ov = self._inv[self._ov[int(self._perm[k])]]
            if self._ov_s is not None:
                self._ov_s[k] = ov
        return ov

    def reset(self) -> None:
        n = self.n
        self.placed = np.zeros(n + 1, bool)
        self.placed[n] = True
        # lowest offset of each unplaced buffer; _BIG for placed ones and the sentinel, so
        # that a section's minimum over its members is its unplaced minimum
        self.minoff = np.zeros(n + 1, np.int64)
        self.minoff[n] = _BIG
        self.off = np.full(n, -1, np.int64)
        self.best = np.full(n, -1, np.int64)
        self.floor = np.zeros(self.nsec, np.int64)
        self.total = self.total0.copy()
        self.cuts = self.cuts0.copy()
        self.nodes = 0

    # ----------------------------------------------------------------- search
    def run(self, node_limit: int, deadline: float, cancel: Any) -> bool | None:
        """True: layout found (in ``self.best``); False: none exists; None: node limit."""
        self.reset()
        self.node_limit = node_limit
        self.deadline = deadline
        self.cancel = cancel
        if self.n == 0:
            return True
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, 4 * self.n + 2000))
        try:
            ranges = self._split(0, self.nsec, np.arange(self.n))
            # the buffers of each independent range (no buffer crosses a range boundary, so
            # a buffer's first section names its range), ascending within each range
            starts = np.array([a for a, _ in ranges], np.int64)
            which = np.searchsorted(starts, self.slo, "right") - 1
            by_range = np.argsort(which, kind="stable")
            cut = np.searchsorted(which[by_range], np.arange(len(ranges) + 1))
            for k, (a, b) in enumerate(ranges):
                part = by_range[cut[k]:cut[k + 1]].astype(np.int64)
                if len(part) and not self._solve(part, a, b, -1, -1):
                    return False
            return True
        except _NodeLimit:
            self.nodes = node_limit  # the node that hit the limit was not searched
            return None
        finally:
            sys.setrecursionlimit(old)

    def _split(self, a: int, b: int, _part: np.ndarray) -> list[tuple[int, int]]:
        if not self.opts.dynamic_decomposition:
            return [(a, b)]
        zero = np.nonzero(self.cuts[a: max(b - 1, a)] == 0)[0] + a + 1
        bounds = [a, *zero.tolist(), b]
        return list(itertools.pairwise(bounds))

    def _section_members(self, p: int, q: int) -> np.ndarray:
        if self._mem_s is not None:
            return self._mem_s[p:q]
        return self._inv_ext[self._members[p:q]]

    def _check(self, a: int, b: int, offset: int) -> bool:
        if b <= a:
            return True
        fl = self.floor[a:b]
        opts = self.opts
        if opts.section_inference:
            # the cheap floors first: a failure here needs no unplaced-minimum scan
            tot = self.total[a:b]
            base = np.maximum(fl, offset) if opts.monotonic_floor else fl
            if int(_MAX(base + tot)) > self.capacity:
                return False
            if opts.unallocated_floor:  # passed above: only the unplaced minima can fail
                p, q = self.indptr[a], self.indptr[b]
                vals = self.minoff[self._section_members(p, q)]
                secmin = np.minimum.reduceat(vals, self.indptr[a:b] - p)
                secmin[secmin == _BIG] = 0  # no unplaced buffer: no constraint
                return int(_MAX(secmin + tot)) <= self.capacity
        if self.opts.unallocated_floor:
            p, q = self.indptr[a], self.indptr[b]
            vals = self.minoff[self._section_members(p, q)]
            secmin = np.minimum.reduceat(vals, self.indptr[a:b] - p)
            secmin[secmin == _BIG] = 0  # no unplaced buffer: no constraint
            fl = np.maximum(fl, secmin)
        if self.opts.monotonic_floor:
            fl = np.maximum(fl, offset)
        if self.opts.section_inference:
            fl = fl + self.total[a:b]
        return int(_MAX(fl)) <= self.capacity

    def _bump_fixed(self, i: int, o: int) -> int:
        """Lowest offset >= ``o`` clear of the fixed buffers live with ``i`` (aligned)."""
        foff, ftop = self.fixed_near[i]
        if not len(foff):
            return o
        s, a = int(self.size[i]), int(self.align[i])
        while True:
            hit = (foff < o + s) & (ftop > o)
            if not hit.any():
                return o
            o = -(-int(ftop[hit].max()) // a) * a

    def _solve(self, part: np.ndarray, a: int, b: int, min_off: int, min_rank: int) -> bool:
        self.nodes += 1
        if self.nodes > self.node_limit:
            raise _NodeLimit
        if (self.nodes & 63) == 0 and (time.monotonic() > self.deadline
                                        or is_cancelled(self.cancel)):
            raise _Stop
        un = part[~self.placed[part]]
        if len(un) == 0:
            self.best[part] = self.off[part]
            return True
        mo = self.minoff[un]
        opts = self.opts
        key = None
        if opts.memoize:
            state = np.concatenate((np.array((a, b, min_off, min_rank, len(un)), np.int64), un,
                                    mo, self.floor[a:b]))
            # 128-bit digest of the state (stored compactly)
            key = hashlib.blake2b(state.tobytes(), digest_size=16).digest()
            if key in self.failed:
                return False
        if opts.dynamic_ordering:
            o = np.argsort(mo, kind="stable")
            un, mo = un[o], mo[o]
        min_height = int(_MIN(mo + self.size[un]))
        size, slo, shi, rank = self.size, self.slo, self.shi, self.rank
        # every placement at ``off`` must satisfy off + (largest unplaced load) <= capacity
        # (implied by the full check when both floors are on; a cheap filter first)
        quick = opts.monotonic_floor and opts.section_inference and b > a
        off_max = self.capacity - int(_MAX(self.total[a:b])) if quick else 0
        for i, off in zip(un.tolist(), mo.tolist()):
            if quick and off > off_max:
                if opts.dynamic_ordering:
                    break
                continue
            r = int(rank[i])
            if opts.canonical_only and (off < min_off or (off == min_off and r < min_rank)):
                continue
            if opts.check_dominance and off >= min_height:
                if opts.dynamic_ordering:
                    break
                continue
            if self.fixed:
                off = self._bump_fixed(i, off)
                if quick and off > off_max:
                    continue
            s = int(size[i])
            top = off + s
            if top > self.capacity:
                continue
            sl, sh = int(slo[i]), int(shi[i])
            # place i
            self.placed[i] = True
            min_i = self.minoff[i]
            self.minoff[i] = _BIG
            self.off[i] = off
            self.best[i] = off  # the latest write wins once the search succeeds
            ov = self.overlaps(i)
            old_min = self.minoff[ov]
            if self.any_align:
                al = self.align[ov]
                self.minoff[ov] = np.maximum(old_min, -(-top // al) * al)
            else:
                self.minoff[ov] = np.maximum(old_min, top)
            old_floor = self.floor[sl:sh].copy()
            self.floor[sl:sh] = top
            self.total[sl:sh] -= s
            found = False
            if quick:
                # only sections whose floor, load or lowest unplaced offset changed need a
                # look: elsewhere the last check holds and ``off`` passed the filter above
                raised = ov[old_min < self.minoff[ov]]
                if len(raised):  # (clamped: other ranges have their own floors)
                    ca = max(a, min(sl, int(_MIN(slo[raised]))))
                    cb = min(b, max(sh, int(_MAX(shi[raised]))))
                else:
                    ca, cb = sl, sh
            else:
                ca, cb = a, b
            if self._check(ca, cb, off):
                if opts.dynamic_decomposition and sh - sl > 1:
                    seg = self.cuts[sl: sh - 1]
                    seg -= 1
                    zero = (np.nonzero(seg == 0)[0] + sl + 1).tolist()
                    try:
                        if zero:
                            found = self._decompose(part, a, b, zero)
                        else:
                            found = self._solve(part, a, b, off, r)
                    finally:
                        seg += 1
                elif opts.dynamic_decomposition:
                    found = self._solve(part, a, b, off, r)
                else:
                    found = self._solve(part, a, b, off, r)
            # undo
            self.total[sl:sh] += s
            self.floor[sl:sh] = old_floor
            self.minoff[ov] = old_min
            self.minoff[i] = min_i
            self.off[i] = -1
            self.placed[i] = False
            if found:
                return True
        if key is not None:
            if len(self.failed) > _MEMO_LIMIT:
                self.failed.clear()
            self.failed.add(key)
        return False

    def _decompose(self, part: np.ndarray, a: int, b: int, cuts: list[int]) -> bool:
        un = part[~self.placed[part]]
        bounds = [a, *cuts, b]
        for x, y in itertools.pairwise(bounds):
            sub = un[(self.slo[un] >= x) & (self.shi[un] <= y)]
            if not len(sub):
                continue
            sub = self._reorder(sub)
            saved = self.rank[sub]
            self.rank[sub] = np.arange(len(sub))
            try:
                ok = self._solve(sub, x, y, -1, -1)
            finally:
                self.rank[sub] = saved
            if not ok:
                return False
        return True

    def _reorder(self, sub: np.ndarray) -> np.ndarray:
        """``sub`` in the preorder, section totals taken from the unplaced load now."""
        if not self.opts.static_preordering or len(sub) < 2:
            return sub
        tot = np.fromiter((self.total[lo:hi].max() for lo, hi in
                           zip(self.slo[sub].tolist(), self.shi[sub].tolist())), np.int64,
                          len(sub))
        length = self.upper[sub] - self.lower[sub]
        keys = {"T": tot, "L": length, "A": self.size[sub] * length, "Z": self.size[sub]}
        return sub[np.lexsort((sub, *(-keys[c] for c in reversed(self.preorder))))]

    def offsets(self) -> dict[int, int]:
        """Offsets of the last layout found, keyed by problem buffer index."""
        return {int(self.orig[k]): int(self.best[k]) for k in range(self.n)}


def search_capacity(problem: Problem, capacity: int, *, deadline: float,
                    cancel: Any = None, options: SearchOptions = SearchOptions(),
                    preorders: tuple[str, ...] = PREORDERS,
                    cache: dict[str, Any] | None = None,
                    node_budget: int | None = None, first_limit: int | None = None,
                    ) -> tuple[Solution | None, bool, str, int]:
    """Look for a layout of height at most ``capacity``.

    The preorders run round-robin, each restart with twice the node limit of the last; a
    layout found is therefore the same however fast the machine is.

    ``cache`` (a dict owned by the caller) keeps the search set-up, and the failed states
    still valid, between calls on the same problem at different capacities.
    ``node_budget`` caps the nodes of all restarts together (a deterministic work limit);
    ``deadline`` (``time.monotonic()``) is the wall-clock safety limit.  ``first_limit``
    sets the node limit of the first restart (default: 32 per buffer, at most an eighth of
    ``node_budget``).

    Returns
    -------
    (solution, proven_infeasible, method, nodes)
        ``solution`` is ``None`` when none was found; ``proven_infeasible`` is True when the
        search finished without one (no layout exists, barring fixed offsets).  ``method``
        ends in ``":work"`` or ``":time"`` when the node budget or the clock stopped it.
    """
    if cache is not None and cache.get("key") == (id(problem), options, preorders):
        searches = cache["searches"]
        for srch in searches:
            if capacity > srch.capacity:
                srch.failed.clear()  # failures below a capacity say nothing above it
            srch.capacity = capacity
    else:
        lower, upper, _, _ = buffer_arrays(problem)
        free = _free_buffers(problem)
        shared = _Overlaps(lower[free], upper[free])
        searches = [_Search(problem, capacity, p, options, shared) for p in preorders]
        if cache is not None:
            cache.update(key=(id(problem), options, preorders), searches=searches)
    limit = max(_FIRST_LIMIT * searches[0].n, 64)
    if node_budget is not None:  # a small budget still gets restarts and every preorder
        limit = min(limit, max(64, node_budget // 8))
    if first_limit is not None:
        limit = max(1, first_limit)
    nodes = 0
    current = searches[0]
    try:
        while True:
            for name, srch in zip(preorders, searches):
                current = srch
                run_limit = limit
                if node_budget is not None:
                    run_limit = min(limit, node_budget - nodes)
                    if run_limit <= 0:
                        return None, False, "search:work", nodes
                verdict = srch.run(run_limit, deadline, cancel)
                nodes += srch.nodes
                if verdict is None:
                    continue
                if not verdict:
                    return None, not srch.fixed, f"search:{name}", nodes
                offs = [b.offset if b.offset is not None else 0 for b in problem.buffers]
                for k, v in srch.offsets().items():
                    offs[k] = v
                return Solution.from_offsets(problem, offs), False, f"search:{name}", nodes
            limit *= _GROWTH
    except _Stop:
        return None, False, "search:time", nodes + current.nodes


#: Peak windows of :func:`repair_peak`: the steps whose live load is at least this fraction
#: of the target (tried in turn; 0.97 places mobilenet_v2 b1 at its bound in 432 nodes).
REPAIR_FRACTIONS = (0.97, 0.9)
#: Preorders of the repair's search (one run each per window).
REPAIR_PREORDERS = ("TLA", "TAL")


def _live_load(lower: np.ndarray, upper: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Total size live at each step ``0 .. max(upper) - 1``."""
    steps = int(upper.max()) if len(upper) else 0
    diff = np.zeros(steps + 1, np.int64)
    np.add.at(diff, lower, size)
    np.add.at(diff, upper, -size)
    return np.cumsum(diff)[:steps]


def repair_peak(problem: Problem, solution: Solution, target: int | None = None, *,
                node_budget: int, deadline: float, cancel: Any = None,
                fractions: tuple[float, ...] = REPAIR_FRACTIONS,
                options: SearchOptions = SearchOptions(),
                preorders: tuple[str, ...] = REPAIR_PREORDERS,
                ) -> tuple[Solution | None, int, str]:
    """Re-place the buffers around the load peak with the exact search, the rest fixed.

    A layout above the live-set bound is usually wrong only where the load is close to it:
    at a step whose live buffers add up to the bound they must pack without a gap, while
    away from the peak there is slack.  For each fraction ``x`` of ``fractions``, the
    buffers live at a step whose load is at least ``x * target`` (the *window*), and those
    reaching above ``target``, are freed; every other buffer keeps its offset in
    ``solution``, and :func:`search_capacity` looks for a layout of the freed ones within
    ``target`` around the fixed ones (the fixed buffers live nowhere in the window, so the
    search meets them only at the window's edges).  Each window gets half of the nodes left,
    the last all of them (a deterministic work limit; ``deadline`` is the wall-clock safety
    limit).

    Parameters
    ----------
    problem : Problem
        The buffers (fixed offsets stay fixed).
    solution : Solution
        A valid layout of ``problem`` to repair.
    target : int, optional
        Height to reach (default the live-set lower bound).
    node_budget : int
        Search nodes of all windows together.
    deadline : float
        ``time.monotonic()`` safety limit.
    cancel : threading.Event or callable, optional
        Checked during the search.
    fractions : tuple of float
        Window thresholds, tried in this order (a window equal to one tried is skipped).
    options : SearchOptions
        Exact-search switches.
    preorders : tuple of str
        Static preorders of the search (see :data:`PREORDERS`), in the order tried.

    Returns
    -------
    (solution, nodes, method)
        A layout of height at most ``target`` (``None`` when none was found), the nodes
        spent and ``"repair@<x>:<preorder>"`` for the window that succeeded (``"repair"``
        otherwise).

    Examples
    --------
    >>> from roam_core.model.dsa import Buffer, Problem, Solution
    >>> p = Problem((Buffer("a", 0, 2, 2), Buffer("b", 1, 3, 1), Buffer("c", 2, 4, 2)))
    >>> bad = Solution.from_offsets(p, (0, 2, 3))
    >>> sol, nodes, how = repair_peak(p, bad, node_budget=100, deadline=1e18)
    >>> sol.height, p.lower_bound()
    (3, 3)
    """
    target = problem.lower_bound() if target is None else target
    nodes = 0
    seen: set[bytes] = set()
    for k, frac in enumerate(fractions):
        if nodes >= node_budget or time.monotonic() >= deadline or is_cancelled(cancel):
            break
        win = _RepairWindow.build(problem, solution, target, frac)
        if win is None or win.key in seen:
            continue
        seen.add(win.key)
        left = node_budget - nodes
        share = left if k == len(fractions) - 1 else left // 2
        # one long run per preorder: a window's search succeeds deep or not at all
        # (mobilenet_v2 b1: found at node 432 of one TLA run, not in 1,000 nodes of runs of
        # 78-156; efficientnet_b0 b1: at node 913 of TAL, not in 2,000 of TLA)
        share = max(64, share)
        sol, _, meth, used = search_capacity(win.sub, target, deadline=deadline, cancel=cancel,
                                             options=options, node_budget=share,
                                             preorders=preorders,
                                             first_limit=share // len(preorders))
        nodes += used
        if sol is not None:
            return (win.merge(problem, sol), nodes,
                    f"repair@{frac:g}:{meth.partition(':')[2]}")
    return None, nodes, "repair"


@dataclass(frozen=True)
class _RepairWindow:
    """The sub-problem of a peak repair: the freed buffers of ``solution`` (live where the
    load is at least ``frac * target``, or reaching above ``target``), and the fixed ones
    that overlap them in time at their offsets (``keep``: their indices in the problem)."""

    sub: Problem
    keep: np.ndarray
    off: np.ndarray
    key: bytes

    @staticmethod
    def build(problem: Problem, solution: Solution, target: int,
              frac: float) -> _RepairWindow | None:
        """The window, or ``None`` when it frees nothing or more than the search takes."""
        lower, upper, size, _ = buffer_arrays(problem)
        off = np.fromiter(solution.offsets, np.int64, len(problem))
        top = off + size
        pinned = np.fromiter((b.offset is not None for b in problem.buffers), bool,
                             len(problem))
        live = size > 0
        load = _live_load(lower, upper, np.where(live, size, 0))
        hot = np.concatenate([[0], np.cumsum(load >= frac * target)])
        free = live & ~pinned & (((hot[upper] - hot[lower]) > 0) | (top > target))
        if not free.any() or int(free.sum()) > MAX_SEARCH_BUFFERS:
            return None
        # the fixed buffers that matter: those overlapping a freed one in time
        f_idx = np.nonzero(free)[0]
        span = np.zeros(len(load) + 1, np.int64)
        np.add.at(span, lower[f_idx], 1)
        np.add.at(span, upper[f_idx], -1)
        cover = np.concatenate([[0], np.cumsum(np.cumsum(span)[:len(load)] > 0)])
        near = live & ~free & ((cover[upper] - cover[lower]) > 0)
        keep = np.nonzero(free | near)[0]
        bufs = tuple(problem.buffers[i] if free[i] else
                     replace(problem.buffers[i], offset=int(off[i])) for i in keep.tolist())
        return _RepairWindow(Problem(bufs), keep, off, np.packbits(free).tobytes())

    def merge(self, problem: Problem, sol: Solution) -> Solution:
        """The whole layout with the window's buffers at their offsets in ``sol``."""
        offs = self.off.copy()
        offs[self.keep] = sol.offsets
        return Solution.from_offsets(problem, offs.tolist())


def repair_from_starts(problem: Problem, starts: Sequence[Solution], target: int, *,
                       node_budget: int, deadline: float, cancel: Any = None,
                       fraction: float = 0.6,
                       options: SearchOptions = SearchOptions(),
                       preorders: tuple[str, ...] = REPAIR_PREORDERS,
                       ) -> tuple[Solution | None, int, str, int]:
    """:func:`repair_peak` of several layouts in one window, their searches run round-robin.

    Which start repairs, and with which preorder, is not known in advance (efficientnet_b0
    b1: the lowest layout does not repair in 10,000 nodes, the next one does at node 913 of
    its second preorder).  Every ``(start, preorder)`` pair gets a run of ``L`` nodes in
    turn (the first preorder on every start, then the next), ``L = node_budget / (2 x
    pairs)`` at first and doubled each round (a run repeats
    its last one and goes on, with the failed states it memoised), until one finds a layout
    within ``target`` or ``node_budget`` is spent: no single search can use up the budget
    while another would succeed cheaply, and a search that succeeds at node ``k`` costs at
    most ``2k`` plus the other pairs' runs.  Deterministic: node counts, not the clock,
    decide (``deadline`` is the wall-clock safety limit).

    Returns
    -------
    (solution, nodes, method, start)
        The first layout found (``None`` when none), the nodes spent,
        ``"repair@<fraction>:<preorder>"`` (``"repair"`` when none) and the index in
        ``starts`` of the start that was repaired (-1 when none).  Starts already within
        ``target`` are not searched (they need no repair).

    Examples
    --------
    >>> from roam_core.model.dsa import Buffer, Problem, Solution
    >>> p = Problem((Buffer("a", 0, 2, 2), Buffer("b", 1, 3, 1), Buffer("c", 2, 4, 2)))
    >>> bad = Solution.from_offsets(p, (0, 2, 3))
    >>> sol, nodes, how, k = repair_from_starts(p, [bad], 3, node_budget=100, deadline=1e18,
    ...                                         fraction=0.5)
    >>> sol.height, how, k
    (3, 'repair@0.5:TLA', 0)
    """
    wins: list[tuple[int, _RepairWindow]] = []
    seen: set[bytes] = set()
    for k, start in enumerate(starts):
        if start.height <= target:  # nothing to repair: the caller has its layout already
            continue
        win = _RepairWindow.build(problem, start, target, fraction)
        if win is None:
            continue
        key = win.key + np.asarray(start.offsets, np.int64).tobytes()
        if key in seen:
            continue
        seen.add(key)
        wins.append((k, win))
    # preorder-major: the first preorder on every start, then the next
    pairs = [(k, win, pre, {}) for pre in preorders for k, win in wins]
    nodes = 0
    if not pairs:
        return None, nodes, "repair", -1
    limit = max(64, node_budget // (2 * len(pairs)))
    while pairs and nodes < node_budget:
        for pair in list(pairs):
            k, win, pre, cache = pair
            run = min(limit, node_budget - nodes)
            if run <= 0 or time.monotonic() >= deadline or is_cancelled(cancel):
                return None, nodes, "repair", -1
            sol, _, meth, used = search_capacity(
                win.sub, target, deadline=deadline, cancel=cancel, options=options,
                node_budget=run, preorders=(pre,), cache=cache, first_limit=run)
            nodes += used
            if sol is not None:
                return win.merge(problem, sol), nodes, f"repair@{fraction:g}:{pre}", k
            if not meth.endswith((":work", ":time")):  # searched to the end: no layout here
                pairs.remove(pair)
        limit *= 2
    return None, nodes, "repair", -1


def solve_dsa(problem: Problem, *, time_limit_s: float = 60.0, capacity: int | None = None,
              cancel: Any = None, options: SearchOptions = SearchOptions(),
              exact: bool = True, log: Callable[[str], None] | None = None,
              work_limit: int | None = None,
              known: Mapping[str, Solution] | None = None) -> DsaResult:
    """Find a low layout for ``problem`` (or one within ``capacity``).

    Parameters
    ----------
    problem : Problem
        The buffers.  ``problem.capacity`` is used when ``capacity`` is not given.
    time_limit_s : float
        Wall-clock safety limit for the whole call (and, when ``work_limit`` is not given,
        the scale of the default work limit).
    capacity : int, optional
        With a capacity: find any layout of height at most it.  Without: minimise the height.
    cancel : threading.Event or callable, optional
        Checked during the search; when set, the best layout so far is returned.
    options : SearchOptions
        Exact-search switches (keep the defaults).
    exact : bool
        False: heuristics only.
    log : callable, optional
        Receives one-line progress messages.
    work_limit : int, optional
        Search nodes allowed when minimising (default ``time_limit_s * NODES_PER_S``).  The
        layout depends only on the problem and this count, unless the wall-clock limit
        stops the call first (``stopped_by == "time"``).  With a capacity the search runs
        until it finds a layout or proves none exists, cut by ``work_limit`` only if given.
    known : Mapping of str to Solution, optional
        Greedy passes the caller already ran, by method name (``"greedy:size:best"``): the
        portfolio uses them instead of running them again (see
        :func:`~roam_core.layout.dsa_heuristics.portfolio`).

    Returns
    -------
    DsaResult

    Raises
    ------
    InfeasibleError
        A capacity was given and it is proven that no layout fits.
    PlanInvalidError
        The layout failed :func:`roam_core.oracle.validate.check_dsa_solution` (a solver
        bug; no invalid layout is ever returned).

    Examples
    --------
    >>> from roam_core.model.dsa import Buffer, Problem
    >>> p = Problem((Buffer("a", 0, 2, 2), Buffer("b", 1, 3, 1), Buffer("c", 2, 4, 2)))
    >>> r = solve_dsa(p, time_limit_s=5)
    >>> r.solution.height, r.lower_bound, r.status
    (3, 3, <SolveStatus.OPTIMAL: 'optimal'>)
    """
    t0 = time.monotonic()
    deadline = t0 + time_limit_s
    say = log or (lambda m: _logger.info("%s", m))
    cap = capacity if capacity is not None else problem.capacity
    lb = problem.lower_bound()
    if cap is not None and lb > cap:
        raise InfeasibleError(f"live-set lower bound {lb} exceeds capacity {cap}")
    n_free = sum(1 for b in problem.buffers if b.offset is None and b.size > 0)
    do_search = exact and n_free <= MAX_SEARCH_BUFFERS
    # every pass of the portfolio runs (the clock only as a safety limit); a fixed, smaller
    # set of passes on large problems, so that the answer does not depend on the load
    orders, fits = (tuple(ORDERS), ("best", "first")) if n_free <= MAX_SEARCH_BUFFERS else \
        (LARGE_ORDERS, ("best",))
    # the passes after one at the bound are skipped (none can be lower: the same result)
    best, method, tried = portfolio(problem, deadline=deadline, orders=orders, fits=fits,
                                    target=lb, known=known)
    say(f"portfolio: {method} height {best.height} (lb {lb})")
    nodes = 0
    stopped = "time" if len(tried) < len(orders) * len(fits) and best.height > lb else ""
    _, oname, fit = [*method.split(":"), "", ""][:3]
    if (not do_search and not stopped and best.height > (lb if cap is None else cap)
            and oname in ORDERS and fit in ("best", "first")):
        # no exact search here: re-place the best pass's order with the buffers that ended
        # on top moved to the front, a fixed number of times
        sol, runs, cut = promote_high(problem, named_order(problem, oname), fit, best,
                                      target=lb if cap is None else cap,
                                      passes=LARGE_PROMOTE_PASSES, deadline=deadline)
        tried.append((f"promote:{oname}:{fit}x{runs}", sol.height))
        if sol.height < best.height:
            best, method = sol, f"promote:{oname}:{fit}"
        stopped = "time" if cut else ""
        say(f"promote x{runs}: height {best.height} (lb {lb})")

    def done(sol: Solution | None, status: SolveStatus, meth: str, bound: int) -> DsaResult:
        if sol is not None:  # every layout leaving the solver passes the validator
            bad = check_dsa_solution(problem.with_capacity(cap), sol)
            if bad:
                raise PlanInvalidError(bad)
        return DsaResult(sol, bound, status, time.monotonic() - t0, meth, nodes, tuple(tried),
                         stopped)

    if cap is not None:
        if best.height <= cap:
            return done(best, _OPT if best.height == lb else _FEAS, method, lb)
        if not do_search:
            stopped = stopped or "work"
            return done(None, SolveStatus.TIMEOUT, method, lb)
        sol, proven, meth, nodes = search_capacity(problem, cap, deadline=deadline,
                                                   cancel=cancel, options=options,
                                                   node_budget=work_limit)
        if sol is not None:
            return done(sol, _OPT if sol.height == lb else _FEAS, meth, lb)
        if proven:
            raise InfeasibleError(f"no layout fits capacity {cap} (search exhausted)")
        stopped = "cancel" if is_cancelled(cancel) else meth.rpartition(":")[2]
        return done(None, SolveStatus.CANCELLED if is_cancelled(cancel) else SolveStatus.TIMEOUT,
                    meth, lb)

    # minimise: bisect between the proven bound and the best layout, each step a share of
    # the node budget (deterministic), the clock only as the outer limit
    budget = work_limit if work_limit is not None else int(time_limit_s * NODES_PER_S)
    lo, hi = lb, best.height
    soft_lo = lo
    cache: dict[str, Any] = {}
    first = True
    repaired = False
    while lo < hi and do_search:
        left = budget - nodes
        if left < 64 or stopped:
            stopped = stopped or "work"
            break
        if is_cancelled(cancel):
            stopped = "cancel"
            break
        if time.monotonic() >= deadline:
            stopped = "time"
            break
        if soft_lo >= hi:  # bisection exhausted by budgets: descend from the best instead
            target = hi - max(1, (hi - lo) // 16)
        else:
            target = soft_lo if first else (soft_lo + hi) // 2
        share = left // (6 if first else _STEP_SHARE) if left > 4096 else left
        first = False
        sol, proven, meth, k = search_capacity(
            problem, target, deadline=deadline, cancel=cancel, options=options, cache=cache,
            node_budget=share)
        nodes += k
        if sol is not None:
            say(f"{meth}: height {sol.height} <= {target}")
            best, method, hi = sol, meth, sol.height
        elif proven:
            say(f"search: no layout within {target}")
            lo = soft_lo = target + 1
        else:
            if meth.endswith(":time"):
                stopped = "cancel" if is_cancelled(cancel) else "time"
            soft_lo = target + 1
        if not repaired and lo < hi and not stopped:
            # when the first step (the whole search at the bound) did not reach it: the peak
            # repair of the best layout, where only the buffers live near the peak are
            # searched (not above MAX_SEARCH_BUFFERS buffers: with thousands of fixed ones
            # around the window a node costs ~25 ms, pangu_2.6B: 2,000 nodes in 51 CPU s)
            repaired = True
            sol, k, meth = repair_peak(problem, best, lo,
                                       node_budget=min((budget - nodes) // 2,
                                                       _REPAIR_MAX_NODES),
                                       deadline=deadline, cancel=cancel, options=options)
            nodes += k
            if sol is not None:
                say(f"{meth}: height {sol.height} <= {lo}")
                best, method, hi = sol, meth, sol.height
    if lo >= hi:
        stopped = ""
    # a bound proven by a bisection step rounds up to the grain of the heights
    lo = min(_round_up(lo, height_grain(problem)), best.height)
    status = _OPT if best.height <= lo else _FEAS
    if status != _OPT and is_cancelled(cancel):
        status = SolveStatus.CANCELLED
    return done(best, status, method, lo)



# --------------------------------------------------------------------------------------
# Proven lower bounds above the live-set bound (issue 13: minimise below capacity)

#: Widths (in sections) of the time windows of :func:`window_lower_bound`, around the
#: peak section first, then sliding over the whole horizon.
BOUND_WIDTHS = (8, 16, 32, 64)


def height_grain(problem: Problem) -> int:
    """The largest ``g`` such that some lowest layout has every height a multiple of ``g``.

    A canonical layout (every free buffer pushed down to the lowest offset its neighbours
    and its alignment allow) has offsets that are sums of sizes rounded up to alignments,
    plus fixed offsets: all multiples of the gcd of the sizes, alignments and fixed offsets.
    Every layout can be pushed down into a canonical one, so the minimum height is a
    multiple of ``g`` and a lower bound ``b`` can be rounded up to one.

    Examples
    --------
    >>> from roam_core.model.dsa import Buffer, Problem
    >>> height_grain(Problem((Buffer("a", 0, 2, 2048), Buffer("b", 1, 3, 1024))))
    1024
    """
    g = 0
    for b in problem.buffers:
        if b.size:
            g = np.gcd(g, b.size)
            g = np.gcd(g, b.alignment) if b.alignment > 1 else g
            g = np.gcd(g, b.offset) if b.offset else g
    return int(g) or 1


def _round_up(x: int, g: int) -> int:
    return -(-x // g) * g


def _window(problem: Problem, t0: int, t1: int) -> Problem:
    """The buffers live in ``[t0, t1)`` with their lifetimes cut to it (a relaxation: any
    layout of ``problem`` is one of the window's, so the window's minimum height is a lower
    bound on the problem's)."""
    bufs = tuple(replace(b, lower=max(b.lower, t0), upper=min(b.upper, t1))
                 for b in problem.buffers if b.size and b.lower < t1 and b.upper > t0)
    return Problem(bufs)


def window_lower_bound(problem: Problem, *, node_budget: int, deadline: float,
                       cancel: Any = None, start: int | None = None,
                       widths: tuple[int, ...] = BOUND_WIDTHS) -> tuple[int, int]:
    """A proven lower bound on the height of every layout of ``problem``, and the nodes spent.

    Time is cut into sections (between consecutive lifetime ends).  For a window of
    sections, the buffers live in it with their lifetimes cut to it form a relaxation
    (:func:`_window`): when the exact search (complete without fixed offsets) proves that
    no layout of the window fits height ``c``, none of the whole problem does, and the
    bound rises to ``c + 1`` rounded up to :func:`height_grain`.  Windows of each width in
    ``widths`` are tried around the most loaded section first, then sliding by half a width
    over the horizon, each search with at most an eighth of the nodes left; the bound is
    raised one step at a time while a window keeps proving.  Deterministic (node counts).
    Without free buffers, or with fixed offsets (the search is then not complete), it is
    the live-set bound rounded up to the grain.

    Parameters
    ----------
    problem : Problem
        The buffers (its capacity is ignored).
    node_budget : int
        Search nodes for all windows together.
    deadline : float
        ``time.monotonic()`` safety limit.
    cancel : threading.Event or callable, optional
        Stops the windows early (the bound so far is still valid).
    start : int, optional
        A bound already proven (default: the live-set bound).
    widths : tuple of int
        Window widths in sections.

    Returns
    -------
    (bound, nodes)

    Examples
    --------
    Small random problems almost never have a gap above the live-set bound (none in
    thousands of random ones of up to 12 buffers), so the example shows the rounding of a
    bound already proven (say, by a bisection step of :func:`solve_dsa`) to the grain:

    >>> from roam_core.model.dsa import Buffer, Problem
    >>> p = Problem((Buffer("a", 0, 2, 2), Buffer("b", 1, 3, 2), Buffer("c", 2, 4, 4)))
    >>> p.lower_bound(), window_lower_bound(p, node_budget=1000, deadline=1e18, start=7)
    (6, (8, 3))
    """
    g = height_grain(problem)
    bound = _round_up(max(start or 0, problem.lower_bound()), g)
    live = [b for b in problem.buffers if b.size]
    if not live or any(b.offset is not None for b in live):
        return bound, 0
    lower, upper, size, _ = buffer_arrays(Problem(tuple(live)))
    pts = np.unique(np.concatenate([lower, upper]))
    nsec = len(pts) - 1
    diff = np.zeros(nsec + 1, np.int64)
    np.add.at(diff, np.searchsorted(pts, lower), size)
    np.add.at(diff, np.searchsorted(pts, upper), -size)
    peak = int(np.argmax(np.cumsum(diff)[:nsec]))
    windows: list[tuple[int, int]] = []
    for w in widths:
        if w >= nsec:
            windows.append((0, nsec))
            break
        a = min(max(0, peak - w // 2), nsec - w)
        windows.append((a, a + w))
        windows += [(a, min(a + w, nsec)) for a in range(0, nsec - w // 2, max(1, w // 2))]
    nodes = 0
    seen: set[tuple[int, int]] = set()
    for a, b in windows:
        if (a, b) in seen:
            continue
        seen.add((a, b))
        sub = _window(problem, int(pts[a]), int(pts[b]))
        cache: dict[str, Any] = {}
        while True:
            left = node_budget - nodes
            if left < 64 or time.monotonic() >= deadline or is_cancelled(cancel):
                return bound, nodes
            sol, proven, _, k = search_capacity(sub, bound, deadline=deadline, cancel=cancel,
                                                cache=cache, node_budget=max(64, left // 8))
            nodes += k
            if sol is not None or not proven:
                break
            bound = _round_up(bound + 1, g)
    return bound, nodes
