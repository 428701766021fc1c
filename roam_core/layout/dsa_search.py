"""The exact DSA search: canonical placements at a fixed capacity, after MiniMalloc.

After the idea of MiniMalloc (Moffitt, ASPLOS'23), :class:`_Search` is a depth-first search
that only builds *canonical* layouts, where every buffer sits at the lowest offset its
already placed time-neighbours allow (any valid layout can be pushed down into such a form,
so nothing is lost).  Buffers are placed in non-decreasing offset order.  Pruning:

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
lifetime, area...).  :func:`search_capacity` runs several preorders round-robin under
doubling node limits, so a layout found is the same however fast the machine is.

The search is complete for problems without fixed offsets: when it finishes without a layout,
none exists.  With fixed offsets it only steps over them.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
from dataclasses import dataclass

import numpy as np

from roam_core.base.cancel import CancelToken, is_cancelled
from roam_core.base.cpu_clock import cpu_now
from roam_core.layout.dsa_heuristics import buffer_arrays, section_totals
from roam_core.model.dsa import Problem, Solution

__all__ = ["MAX_SEARCH_BUFFERS", "MAX_SEARCH_CELLS", "PREORDERS", "SearchCache",
           "SearchOptions", "search_capacity", "search_cells"]

#: Above this many free buffers the exact search is skipped (its set-up is quadratic).
MAX_SEARCH_BUFFERS = 6000
#: Above this many cells (:func:`search_cells`) the exact search is skipped: a node scans
#: the sections of the buffers it moves and the section tables hold buffers x sections
#: entries, so a node costs about 0.1-0.15 us per cell (efficientnet_b0 b1: 2,154 buffers x
#: 1,619 sections, 0.5 ms a node; a 40-layer Llama-style step: 5,123 x 3,925, 2 ms a node,
#: 19 s and 466 MiB for a 10,000-node search that found nothing).
MAX_SEARCH_CELLS = 4_000_000


def search_cells(problem: Problem) -> int:
    """The size of the search's section tables: buffers (free and fixed: a node steps over
    the fixed ones too) x sections (distinct lifetime ends), the measure a node's cost
    grows with.

    >>> from roam_core.model.dsa import Buffer
    >>> search_cells(Problem((Buffer("a", 0, 2, 1), Buffer("b", 1, 3, 1),
    ...                       Buffer("c", 0, 2, 1, offset=0))))
    6
    """
    bufs = problem.buffers
    return sum(1 for b in bufs if b.size > 0) * len({b.upper for b in bufs})

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
        self._csr: tuple[np.ndarray, np.ndarray] | None = None

    def section_members(self) -> tuple[np.ndarray, np.ndarray]:
        """``(members, indptr)``: the buffers live in each section (CSR, free numbering, a
        sentinel ``n`` last in every section), built once for every preorder's search."""
        if self._csr is None:
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
        fixed = [(i, b.offset) for i, b in enumerate(bs) if b.offset is not None and b.size > 0]
        self.fixed = [(int(lower[i]), int(upper[i]), int(o), int(o) + int(size[i]))
                      for i, o in fixed]
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
    def run(self, node_limit: int, deadline: float, cancel: CancelToken) -> bool | None:
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
        """Place the unplaced buffers of ``part`` (sections ``[a, b)``) within the capacity,
        each at or above ``min_off`` (rank above ``min_rank`` at ``min_off``).

        Steps: count the node (:meth:`_count_node`); look the state up in the memo
        (:meth:`_memo_key`); try every unplaced buffer at its lowest offset, lowest first,
        skipping those the pruning rules exclude (inline: a method call per candidate made
        the search a third slower); :meth:`_place_and_descend` places one and recurses;
        remember the state as failed when none leads to a layout.
        """
        self._count_node()
        un = part[~self.placed[part]]
        if len(un) == 0:
            self.best[part] = self.off[part]
            return True
        mo = self.minoff[un]
        opts = self.opts
        key = self._memo_key(un, mo, a, b, min_off, min_rank) if opts.memoize else None
        if key is not None and key in self.failed:
            return False
        if opts.dynamic_ordering:
            o = np.argsort(mo, kind="stable")
            un, mo = un[o], mo[o]
        min_height = int(_MIN(mo + self.size[un]))
        size, rank, capacity = self.size, self.rank, self.capacity
        # every placement at ``off`` must satisfy off + (largest unplaced load) <= capacity
        # (implied by the full check when both floors are on; a cheap filter first)
        quick = opts.monotonic_floor and opts.section_inference and b > a
        off_max = capacity - int(_MAX(self.total[a:b])) if quick else 0
        for i, off in zip(un.tolist(), mo.tolist()):
            if quick and off > off_max:
                if opts.dynamic_ordering:
                    break  # tried by lowest offset: every later one is higher
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
            if off + int(size[i]) > capacity:
                continue
            if self._place_and_descend(part, a, b, i, off, quick):
                return True
        if key is not None:
            if len(self.failed) > _MEMO_LIMIT:
                self.failed.clear()
            self.failed.add(key)
        return False

    def _count_node(self) -> None:
        """Count a search node; stop at the node limit, the deadline or a cancel."""
        self.nodes += 1
        if self.nodes > self.node_limit:
            raise _NodeLimit
        if (self.nodes & 63) == 0 and (cpu_now() > self.deadline
                                        or is_cancelled(self.cancel)):
            raise _Stop

    def _memo_key(self, un: np.ndarray, mo: np.ndarray, a: int, b: int, min_off: int,
                  min_rank: int) -> bytes:
        """A 128-bit digest of the state of sections ``[a, b)`` (stored compactly)."""
        state = np.concatenate((np.array((a, b, min_off, min_rank, len(un)), np.int64), un,
                                mo, self.floor[a:b]))
        return hashlib.blake2b(state.tobytes(), digest_size=16).digest()

    def _place_and_descend(self, part: np.ndarray, a: int, b: int, i: int, off: int,
                           quick: bool) -> bool:
        """Place buffer ``i`` at ``off``, check the sections it changed, search on (split
        where no unplaced buffer crosses a section boundary any more), undo the placement;
        True when a layout was found."""
        sl, sh = int(self.slo[i]), int(self.shi[i])
        s = int(self.size[i])
        top = off + s
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
                ca = max(a, min(sl, int(_MIN(self.slo[raised]))))
                cb = min(b, max(sh, int(_MAX(self.shi[raised]))))
            else:
                ca, cb = sl, sh
        else:
            ca, cb = a, b
        if self._check(ca, cb, off):
            r = int(self.rank[i])
            if self.opts.dynamic_decomposition and sh - sl > 1:
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
            else:
                found = self._solve(part, a, b, off, r)
        # undo
        self.total[sl:sh] += s
        self.floor[sl:sh] = old_floor
        self.minoff[ov] = old_min
        self.minoff[i] = min_i
        self.off[i] = -1
        self.placed[i] = False
        return found

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


class SearchCache:
    """The search set-up of one problem (one search per preorder, sharing the overlap sets),
    kept between :func:`search_capacity` calls at different capacities with the failed
    states still valid.  A caller owns one per problem and passes it as ``cache``."""

    __slots__ = ("key", "searches")

    def __init__(self) -> None:
        self.key: tuple[int, SearchOptions, tuple[str, ...]] | None = None
        self.searches: list[_Search] = []


def search_capacity(problem: Problem, capacity: int, *, deadline: float,
                    cancel: CancelToken = None, options: SearchOptions = SearchOptions(),
                    preorders: tuple[str, ...] = PREORDERS,
                    cache: SearchCache | None = None,
                    node_budget: int | None = None, first_limit: int | None = None,
                    ) -> tuple[Solution | None, bool, str, int]:
    """Look for a layout of height at most ``capacity``.

    The preorders run round-robin, each restart with twice the node limit of the last; a
    layout found is therefore the same however fast the machine is.

    ``cache`` (a :class:`SearchCache` owned by the caller) keeps the search set-up, and the
    failed states still valid, between calls on the same problem at different capacities.
    ``node_budget`` caps the nodes of all restarts together (a deterministic work limit);
    ``deadline`` (``cpu_now()``, this thread's CPU seconds) is the safety limit.  ``first_limit``
    sets the node limit of the first restart (default: 32 per buffer, at most an eighth of
    ``node_budget``).

    Returns
    -------
    (solution, proven_infeasible, method, nodes)
        ``solution`` is ``None`` when none was found; ``proven_infeasible`` is True when the
        search finished without one (no layout exists, barring fixed offsets).  ``method``
        ends in ``":work"`` or ``":time"`` when the node budget or the clock stopped it.
    """
    searches = _searches(problem, capacity, options, preorders, cache)
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
                return _solution(problem, srch), False, f"search:{name}", nodes
            limit *= _GROWTH
    except _Stop:
        return None, False, "search:time", nodes + current.nodes


def _searches(problem: Problem, capacity: int, options: SearchOptions,
              preorders: tuple[str, ...], cache: SearchCache | None) -> list[_Search]:
    """One search per preorder at ``capacity``: those of ``cache`` when it holds this
    problem's, else new ones (kept in ``cache``)."""
    key = (id(problem), options, preorders)
    if cache is not None and cache.key == key:
        for srch in cache.searches:
            if capacity > srch.capacity:
                srch.failed.clear()  # failures below a capacity say nothing above it
            srch.capacity = capacity
        return cache.searches
    lower, upper, _, _ = buffer_arrays(problem)
    free = _free_buffers(problem)
    shared = _Overlaps(lower[free], upper[free])
    searches = [_Search(problem, capacity, p, options, shared) for p in preorders]
    if cache is not None:
        cache.key, cache.searches = key, searches
    return searches


def _solution(problem: Problem, srch: _Search) -> Solution:
    """The layout ``srch`` found: its offsets, fixed buffers at theirs."""
    offs = [b.offset if b.offset is not None else 0 for b in problem.buffers]
    for k, v in srch.offsets().items():
        offs[k] = v
    return Solution.from_offsets(problem, offs)
