"""Fast greedy placements for DSA problems: one driver, several buffer orders and fit rules.

Every heuristic here is the same driver (:func:`place_in_order`): take the buffers in some
order and put each at a gap between the already placed buffers whose lifetimes overlap it.
``fit="best"`` takes the smallest gap that holds the buffer (TFLite's and XLA's
greedy-by-size best fit when the order is by decreasing size); ``fit="first"`` takes the
lowest one.  A buffer that fits no gap goes on top.  The placed set is kept sorted by offset
and scanned with numpy (no sort per buffer), and placed buffers that no later buffer of the
pass overlaps are dropped from it, so one pass costs ``O(n * k)`` elementwise work for the
``k`` placed buffers still in play, which stays usable for tens of thousands of buffers.

Examples
--------
>>> from roam_core.model.dsa import Buffer, Problem
>>> p = Problem((Buffer("a", 0, 2, 4), Buffer("b", 1, 3, 4), Buffer("c", 2, 4, 4)))
>>> greedy_by_size(p).height
8
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import logging
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from roam_core.base.cpu_clock import cpu_now
from roam_core.model.dsa import Problem, Solution

__all__ = [
    "ORDERS",
    "buffer_arrays",
    "greedy_by_size",
    "last_overlap",
    "named_order",
    "place_against",
    "place_in_order",
    "portfolio",
    "promote_high",
    "section_totals",
]

_logger = logging.getLogger(__name__)


def buffer_arrays(problem: Problem) -> tuple[np.ndarray, ...]:
    """``(lower, upper, size, alignment)`` as int64 arrays in buffer order."""
    bs = problem.buffers
    return (
        np.fromiter((b.lower for b in bs), np.int64, len(bs)),
        np.fromiter((b.upper for b in bs), np.int64, len(bs)),
        np.fromiter((b.size for b in bs), np.int64, len(bs)),
        np.fromiter((b.alignment for b in bs), np.int64, len(bs)),
    )


def section_totals(lower: np.ndarray, upper: np.ndarray, size: np.ndarray) -> np.ndarray:
    """For each buffer, the largest total live size at any step of its lifetime."""
    if len(lower) == 0:
        return np.zeros(0, np.int64)
    pts = np.unique(np.concatenate([lower, upper]))
    lo = np.searchsorted(pts, lower)
    hi = np.searchsorted(pts, upper)
    diff = np.zeros(len(pts) + 1, np.int64)
    np.add.at(diff, lo, size)
    np.add.at(diff, hi, -size)
    load = np.cumsum(diff)[:-1]
    return _range_max(load, lo, hi)


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``max(values[lo[i]:hi[i]])`` for every ``i`` (ranges non-empty), by a sparse table."""
    table = [values]
    k = 1
    while 2 * k <= len(values):
        prev = table[-1]
        table.append(np.maximum(prev[:-k], prev[k:]))
        k *= 2
    span = np.maximum(hi - lo, 1)
    level = np.floor(np.log2(span)).astype(np.int64)
    out = np.empty(len(lo), np.int64)
    for lv in np.unique(level):
        sel = np.nonzero(level == lv)[0]
        t = table[lv]
        w = 1 << int(lv)
        out[sel] = np.maximum(t[lo[sel]], t[hi[sel] - w])
    return out


def _range_chmax(n: int, lo: np.ndarray, hi: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """``out[t] = max(vals[i] for every i with lo[i] <= t < hi[i])`` (-1 where none) over
    ``t < n``: each range marks the two power-of-two blocks that cover it (the reverse of a
    sparse table), then every level is pushed down into the one below."""
    span = np.maximum(hi - lo, 1)
    level = np.floor(np.log2(span)).astype(np.int64)
    top = int(level.max()) + 1 if len(level) else 1
    up = [np.full(n, -1, np.int64) for _ in range(top)]
    for lv in np.unique(level):
        sel = level == lv
        np.maximum.at(up[lv], lo[sel], vals[sel])
        np.maximum.at(up[lv], hi[sel] - (1 << int(lv)), vals[sel])
    for lv in range(top - 1, 0, -1):
        h = 1 << (lv - 1)
        np.maximum(up[lv - 1], up[lv], out=up[lv - 1])
        np.maximum(up[lv - 1][h:], up[lv][:n - h], out=up[lv - 1][h:])
    return up[0]


def last_overlap(q_lower: np.ndarray, q_upper: np.ndarray, q_rank: np.ndarray,
                 lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """For each interval ``[lower, upper)``, the highest ``q_rank`` among the query intervals
    ``[q_lower, q_upper)`` that overlap it (-1 when none does).  All intervals non-empty.

    Examples
    --------
    >>> last_overlap(np.array([0, 5]), np.array([2, 9]), np.array([0, 1]),
    ...              np.array([1, 3, 8]), np.array([4, 5, 10])).tolist()
    [0, -1, 1]
    """
    if len(lower) == 0:
        return np.zeros(0, np.int64)
    if len(q_lower) == 0:
        return np.full(len(lower), -1, np.int64)
    # on the compressed time axis (cell t = [pts[t], pts[t + 1])) two intervals overlap
    # exactly when their cell ranges share a cell
    pts = np.unique(np.concatenate([q_lower, q_upper, lower, upper]))
    cells = max(1, len(pts) - 1)
    last = _range_chmax(cells, np.searchsorted(pts, q_lower), np.searchsorted(pts, q_upper),
                        np.asarray(q_rank, np.int64))
    return _range_max(last, np.searchsorted(pts, lower), np.searchsorted(pts, upper))


def place_in_order(problem: Problem, order: Sequence[int], fit: str = "best",
                   deadline: float | None = None, *, partial: bool = False
                   ) -> Solution | None:
    """Place buffers one by one in ``order`` (indices into ``problem.buffers``).

    Parameters
    ----------
    problem : Problem
        Buffers with fixed offsets are placed first, where they are fixed.
    order : sequence of int
        Every free buffer index exactly once (fixed ones are skipped if present).
    fit : {"best", "first"}
        Smallest gap that holds the buffer, or the lowest one.
    deadline : float, optional
        ``cpu_now()`` value after which the pass gives up and returns ``None``.
    partial : bool
        At the deadline, return the layout so far completed instead of ``None``: the
        buffers not yet placed go above it, in lanes (:func:`lane_offsets`, ``O(n log n)``).
        Valid, if higher.

    Returns
    -------
    Solution or None
    """
    lower, upper, size, align = buffer_arrays(problem)
    n = len(lower)
    offsets = np.zeros(n, np.int64)
    fixed: list[int] = []
    for i, b in enumerate(problem.buffers):
        if b.offset is not None:
            fixed.append(i)
            offsets[i] = b.offset
    fx = np.asarray(fixed, dtype=np.int64)
    fx = fx[size[fx] > 0] if len(fx) else fx
    fixed_set = set(fixed)
    free = [i for i in order if i not in fixed_set]
    done = _place_core(lower, upper, size, align, offsets, free, lower[fx], upper[fx],
                       offsets[fx], offsets[fx] + size[fx], fit, deadline)
    if done < len(free):
        if not partial:
            return None
        _place_rest(lower, upper, size, align, offsets, [*fixed, *free[:done]], free[done:])
    return Solution.from_offsets(problem, offsets.tolist())


def _place_rest(lower: np.ndarray, upper: np.ndarray, size: np.ndarray, align: np.ndarray,
                offsets: np.ndarray, placed: Sequence[int], rest: Sequence[int]) -> None:
    """The buffers ``rest`` above every ``placed`` one, in lanes (:func:`lane_offsets`):
    ``O(n log n)``, valid whatever the lifetimes, within a small factor of the bound for
    buffers of similar sizes."""
    rest_arr = np.asarray(rest, np.int64)
    if not len(rest_arr):
        return
    step = math.lcm(*{int(a) for a in align[rest_arr]})
    if step > 1 << 20:  # alignments without a small common multiple: one band each
        stack_rest(offsets, size, align, placed, rest)
        return
    p = np.asarray(placed, np.int64)
    top = int((offsets[p] + size[p]).max()) if len(p) else 0
    base = -(-top // step) * step
    offsets[rest_arr] = base + lane_offsets(lower[rest_arr], upper[rest_arr],
                                            size[rest_arr], step)


def lane_offsets(lower: np.ndarray, upper: np.ndarray, size: np.ndarray,
                 step: int = 1) -> np.ndarray:
    """Offsets in lanes: buffers are grouped by size class (the power of two above their
    size), and each class gets lanes of that height; in order of start, a buffer takes a
    lane whose last buffer has ended, else a new one.  No two buffers of a lane overlap in
    time and lanes never share bytes, so the layout is valid; each lane is at most twice as
    high as what it holds.

    Examples
    --------
    >>> import numpy as np
    >>> lane_offsets(np.array([0, 1, 2]), np.array([2, 3, 4]), np.array([4, 4, 3])).tolist()
    [0, 4, 0]
    >>> lane_offsets(np.array([0, 0]), np.array([1, 1]), np.array([5, 2])).tolist()
    [2, 0]
    """
    out = np.zeros(len(lower), np.int64)
    cls = np.array([(int(x) - 1).bit_length() if x > 0 else -1 for x in size.tolist()],
                   np.int64)
    base = 0
    for c in np.unique(cls).tolist():
        if c < 0:
            continue  # zero-size buffers stay at 0
        members = np.flatnonzero(cls == c)
        members = members[np.argsort(lower[members], kind="stable")]
        height = -(-(1 << c) // step) * step
        ends: list[tuple[int, int]] = []  # heap of (end step, lane)
        lanes = 0
        lane_of = np.empty(len(members), np.int64)
        for k, (lo, hi) in enumerate(zip(lower[members].tolist(), upper[members].tolist())):
            if ends and ends[0][0] <= lo:
                lane = heapq.heapreplace(ends, (hi, ends[0][1]))[1]
            else:
                lane = lanes
                lanes += 1
                heapq.heappush(ends, (hi, lane))
            lane_of[k] = lane
        out[members] = base + lane_of * height
        base += lanes * height
    return out


def stack_rest(offsets: np.ndarray, size: np.ndarray, align: np.ndarray,
               placed: Sequence[int], rest: Sequence[int]) -> None:
    """Give the buffers ``rest`` offsets above every ``placed`` one, each in its own band
    (aligned): a valid layout in linear time, whatever the lifetimes, used when a greedy
    pass is cut by the clock.

    Examples
    --------
    >>> import numpy as np
    >>> off = np.array([0, 0, 0]); size = np.array([4, 3, 2]); align = np.array([1, 1, 4])
    >>> stack_rest(off, size, align, [0], [1, 2]); off.tolist()
    [0, 4, 8]
    """
    p = np.asarray(placed, np.int64)
    top = int((offsets[p] + size[p]).max()) if len(p) else 0
    for i in rest:
        a = int(align[i])
        off = -(-top // a) * a
        offsets[i] = off
        top = off + int(size[i])



def place_against(f_lower: np.ndarray, f_upper: np.ndarray, f_offset: np.ndarray,
                  f_size: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                  size: np.ndarray, order: Sequence[int], fit: str = "best") -> np.ndarray:
    """:func:`place_in_order` on arrays: free buffers (alignment 1) placed in ``order``
    against fixed boxes, with no :class:`~roam_core.model.dsa.Problem` built.

    Gives the offsets that ``place_in_order`` gives for the problem of the fixed buffers
    (in that order, offsets fixed) followed by the free ones, with ``order`` shifted past the
    fixed ones: ``O(len(order) * len(f_lower))`` elementwise, no per-buffer Python objects.

    Parameters
    ----------
    f_lower, f_upper, f_offset, f_size : numpy.ndarray
        The fixed boxes (zero-size ones are ignored).
    lower, upper, size : numpy.ndarray
        The free buffers.
    order : sequence of int
        Indices into the free buffers, each once.
    fit : {"best", "first"}

    Returns
    -------
    numpy.ndarray
        Offsets of the free buffers (int64, index-aligned with ``lower``).

    Examples
    --------
    >>> import numpy as np
    >>> place_against(np.array([0]), np.array([2]), np.array([0]), np.array([4]),
    ...               np.array([1, 2]), np.array([3, 4]), np.array([4, 2]), [0, 1]).tolist()
    [4, 0]
    """
    f_lower, f_upper = np.asarray(f_lower, np.int64), np.asarray(f_upper, np.int64)
    f_offset, f_size = np.asarray(f_offset, np.int64), np.asarray(f_size, np.int64)
    nz = f_size > 0
    lower, upper = np.asarray(lower, np.int64), np.asarray(upper, np.int64)
    size = np.asarray(size, np.int64)
    offsets = np.zeros(len(lower), np.int64)
    _place_core(lower, upper, size, np.ones(len(lower), np.int64), offsets, order,
                f_lower[nz], f_upper[nz], f_offset[nz], f_offset[nz] + f_size[nz], fit, None)
    return offsets


def _place_core(lower: np.ndarray, upper: np.ndarray, size: np.ndarray, align: np.ndarray,
                offsets: np.ndarray, order: Sequence[int], f_lo: np.ndarray, f_hi: np.ndarray,
                f_off: np.ndarray, f_top: np.ndarray, fit: str, deadline: float | None,
                ) -> int:
    """The placement loop: ``order`` (free indices) placed against the boxes ``f_*`` (all of
    non-zero size); writes ``offsets``; returns how many of ``order`` were placed (fewer
    than all when the deadline passed: those have their offsets, the rest have none).

    The placed boxes are kept sorted by offset (one ``(5, n)`` array: lower, upper, offset,
    top, last use), so the boxes overlapping a buffer in time come out of one mask already in
    offset order: no sort per buffer.  Each new box is inserted at its place by a shift.  The
    gaps are those of the sorted scan (a gap below each box, above the highest top of the
    boxes below it), so the offsets are those of the plain scan; among boxes of equal offsets
    only the first can leave a gap, so their order does not matter.

    The buffers to come are known, so each box also holds its *last use*: the last step of
    the pass whose buffer overlaps it in time (:func:`last_overlap`).  Every
    :data:`_COMPACT_EVERY` steps the boxes past their last use are dropped (no later buffer
    can see them), which keeps the mask and the shifts to the boxes still in play: on
    training steps most buffers live a few steps, so the scanned set stays near the live
    set's instead of growing to all ``n`` (GPT-2 360 layers, one pass: 2.3 -> 1.4 s).

    A head of the order whose buffers share a step is stacked at once
    (:func:`_overlapping_head`); a large one is then seen through :class:`_Stack`, as runs
    of boxes merged with the other overlapping boxes (GPT-2 360 layers: 1.15 -> 1.0 s).
    """
    n_fix = len(f_lo)
    cap = n_fix + len(order)
    box = np.empty((5, cap + 1), np.int64)  # rows: lower, upper, offset, top, last use
    srt = np.argsort(f_off, kind="stable")
    box[0, :n_fix], box[1, :n_fix] = f_lo[srt], f_hi[srt]
    box[2, :n_fix], box[3, :n_fix] = f_off[srt], f_top[srt]
    b_lo, b_hi, b_off, b_top = box[0], box[1], box[2], box[3]
    free = np.fromiter(order, np.int64, len(order))
    last = _last_uses(lower, upper, size, free, f_lo[srt], f_hi[srt])
    box[4, :n_fix] = last[:n_fix]
    free_last = last[n_fix:]
    best = fit != "first"
    k = n_fix
    start = 0 if n_fix else _overlapping_head(lower, upper, size, align, free)
    stack: _Stack | None = None
    if start:  # stacked as the loop would stack them: no gap, each on the top
        head = free[:start]
        at = np.flatnonzero(size[head] > 0)
        kept = head[at]
        tops = np.cumsum(size[kept])
        offsets[head] = 0
        offsets[kept] = tops - size[kept]
        if len(kept) >= _STACK_FROM:  # looked up as runs, beside the other boxes
            stack = _Stack(lower[kept], upper[kept], tops - size[kept], tops)
        else:
            k = len(kept)
            box[0, :k], box[1, :k] = lower[kept], upper[kept]
            box[2, :k], box[3, :k], box[4, :k] = tops - size[kept], tops, free_last[at]
    # Python ints: a numpy array compares against them faster than against numpy scalars
    cols = zip(free.tolist(), lower[free].tolist(), upper[free].tolist(), size[free].tolist(),
               align[free].tolist(), free_last.tolist())
    for step, (i, lo_i, hi_i, s, a, last_i) in itertools.islice(enumerate(cols), start, None):
        if step % _COMPACT_EVERY == 0:
            if deadline is not None and cpu_now() > deadline:
                return step
            if k:
                keep = box[4, :k] >= step
                n_kept = int(np.count_nonzero(keep))
                if n_kept < k:
                    box[:, :n_kept] = box[:, :k][:, keep]
                    k = n_kept
        if s == 0:
            offsets[i] = 0
            continue
        idx = ((b_lo[:k] < hi_i) & (b_hi[:k] > lo_i)).nonzero()[0]
        offs, tops = b_off[idx], b_top[idx]
        if stack is not None:
            offs, tops = stack.merged(lo_i, hi_i, offs, tops)
        m = len(offs)
        if m == 0:
            off = 0
        elif m >= _CANDIDATES_FROM:
            off = _lowest_gap_wide(offs, tops, s, a, best)
        elif a == 1:
            off = _lowest_gap_unit(offs, tops, s, best)
        else:
            off = _lowest_gap(offs, tops, s, a, best)
        offsets[i] = off
        pos = int(b_off[:k].searchsorted(off, "right"))
        if pos < k:
            box[:, pos + 1:k + 1] = box[:, pos:k]
        box[0, pos] = lo_i
        box[1, pos] = hi_i
        box[2, pos] = off
        box[3, pos] = off + s
        box[4, pos] = last_i
        k += 1
    return len(order)


def _overlapping_head(lower: np.ndarray, upper: np.ndarray, size: np.ndarray,
                      align: np.ndarray, free: np.ndarray) -> int:
    """How many buffers at the head of ``free`` (zero-size ones aside) share a step, all of
    alignment 1.

    With no fixed box, :func:`_place_core` stacks them: each overlaps every box placed
    before it, and those tile the arena from 0 without a gap, so every one goes on the top
    (an exclusive running sum of the sizes), for either fit.  On training steps the
    largest-section-first order starts with the buffers live at the peak: GPT-2 360 layers,
    7,930 of 38,915, whose scans (each of all the boxes before it) took 0.24 of the pass's
    1.4 s."""
    if not len(free):
        return 0
    nz = size[free] > 0
    lo = np.where(nz, lower[free], np.iinfo(np.int64).min)
    hi = np.where(nz, upper[free], np.iinfo(np.int64).max)
    ok = (np.maximum.accumulate(lo) < np.minimum.accumulate(hi)) & ((align[free] == 1) | ~nz)
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else len(free)


#: Seconds per buffer that :func:`lane_offsets` takes, with room to spare (the time a cut
#: first pass leaves for its rest).
_LANE_S = 6e-6
#: A stacked head of at least this many boxes is looked up by :class:`_Stack`.
_STACK_FROM = 1024
#: :class:`_Stack` keeps the runs of its lookups up to this many runs in all (16 bytes
#: each), then starts again.
_STACK_CACHED = 1 << 20


class _Stack:
    """The stacked head's boxes (they tile ``[0, top)`` in offset order and never move),
    seen from a later buffer as *runs*: maximal sequences of consecutive boxes that all
    overlap it in time.  A run is one range without a gap (its boxes tile it), so the
    scan's gaps are the same whether it sees the boxes or their runs.

    Which boxes overlap ``[lo, hi)`` depends only on how many boxes start before ``hi`` and
    how many end by ``lo`` (every box meets both tests or not), so the runs are computed
    once per such pair and remembered.  On training steps the head is the activations held
    at the peak, by size, then longest first (by layer within a size): a buffer of the
    backward overlaps those of the layers below it, a few runs.  GPT-2 360 layers: ~3,730
    of the ~4,170 boxes a buffer overlaps are the head's, in a median of 2 runs (mean 135);
    10,449 distinct pairs for 30,985 buffers.
    """

    __slots__ = ("_edge", "_ends", "_hi", "_kept", "_lo", "_off", "_runs", "_starts", "_top")

    def __init__(self, lo: np.ndarray, hi: np.ndarray, off: np.ndarray, top: np.ndarray) -> None:
        self._lo, self._hi, self._off, self._top = lo, hi, off, top
        self._starts = np.sort(lo).tolist()  # bisected: one lookup is a few steps
        self._ends = np.sort(hi).tolist()
        self._edge = np.zeros(len(lo) + 2, np.bool_)  # the overlap mask, a free box each side
        self._runs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._kept = 0  # runs held by ``_runs`` (plus one per entry)

    def runs(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Offsets and tops of the runs of head boxes overlapping ``[lo, hi)``, ascending."""
        key = (bisect.bisect_left(self._starts, hi), bisect.bisect_right(self._ends, lo))
        got = self._runs.get(key)
        if got is None:
            edge = self._edge
            np.logical_and(self._lo < hi, self._hi > lo, out=edge[1:-1])
            ends = np.flatnonzero(edge[1:] != edge[:-1])  # a run's first box, past its last
            got = (self._off[ends[0::2]], self._top[ends[1::2] - 1])
            self._kept += len(got[0]) + 1
            if self._kept > _STACK_CACHED:
                self._runs.clear()
                self._kept = len(got[0]) + 1
            self._runs[key] = got
        return got

    def merged(self, lo: int, hi: int, offs: np.ndarray, tops: np.ndarray,
               ) -> tuple[np.ndarray, np.ndarray]:
        """The runs overlapping ``[lo, hi)`` merged in offset order with the other boxes
        ``offs`` / ``tops`` (sorted by offset)."""
        r_off, r_top = self.runs(lo, hi)
        if not len(offs):
            return r_off, r_top
        if not len(r_off):
            return offs, tops
        if len(r_off) <= _FEW_RUNS:  # spliced in, a slice between each two
            at = np.searchsorted(offs, r_off).tolist()
            cut = [0, *at]
            o_parts: list[np.ndarray] = []
            t_parts: list[np.ndarray] = []
            for j in range(len(at)):
                o_parts += (offs[cut[j]:cut[j + 1]], r_off[j:j + 1])
                t_parts += (tops[cut[j]:cut[j + 1]], r_top[j:j + 1])
            o_parts.append(offs[cut[-1]:])
            t_parts.append(tops[cut[-1]:])
            return np.concatenate(o_parts), np.concatenate(t_parts)
        all_off = np.concatenate([r_off, offs])
        o = np.argsort(all_off, kind="stable")  # two sorted runs: a merge
        return all_off[o], np.concatenate([r_top, tops])[o]


#: :meth:`_Stack.merged` splices up to this many runs in (else it sorts).
_FEW_RUNS = 4


#: :func:`_place_core` looks for the gap with :func:`_lowest_gap_wide` from this many
#: overlapping boxes on (fewer numpy calls below it).
_CANDIDATES_FROM = 512
_BIG = np.iinfo(np.int64).max


def _lowest_gap(offs: np.ndarray, tops: np.ndarray, s: int, a: int, best: bool) -> int:
    """The offset of a box of size ``s`` (alignment ``a``) against boxes sorted by offset:
    the gaps are those of the sorted scan (below each box, above the highest top of the
    boxes below it); the smallest one that fits (``best``) or the lowest one, else the top."""
    runmax = np.maximum.accumulate(tops)  # runmax[j - 1]: the highest top below box j
    return _pick_gap(offs, runmax, s, a, best)


def _lowest_gap_unit(offs: np.ndarray, tops: np.ndarray, s: int, best: bool) -> int:
    """:func:`_lowest_gap` for alignment 1, same answer in fewer numpy calls (a pass over a
    few hundred boxes a buffer costs mostly their overhead): the gap below the first box
    (from 0) is looked at in Python, the others (below box ``j``, from the highest top below
    it) in one vector, and the lowest of the smallest fitting gaps wins as in the scan."""
    room0 = int(offs[0])
    if len(offs) == 1:
        return 0 if room0 >= s else int(tops[0])
    if room0 >= s and not best:
        return 0
    runmax = np.maximum.accumulate(tops)
    spare = offs[1:] - runmax[:-1]  # the room left by the gap below box j + 1
    spare -= s
    if best:  # as unsigned, a gap too small (spare < 0) is above every one that fits
        j = int(spare.view(np.uint64).argmin())
    else:
        j = int((spare >= 0).argmax())
    r = int(spare[j])
    if room0 >= s and (r < 0 or room0 - s <= r):
        return 0  # the first gap ties or beats the others: the scan keeps the lowest
    return int(runmax[j]) if r >= 0 else int(runmax[-1])


def _lowest_gap_wide(offs: np.ndarray, tops: np.ndarray, s: int, a: int, best: bool) -> int:
    """:func:`_lowest_gap` for many boxes, same answer.

    The gap below box ``j`` starts at the highest top below it, at least the top of box
    ``j - 1``: only the ``j`` where that one leaves room can fit (and ``j = 0``, whose gap
    starts at 0).  The highest tops are taken over the runs between those candidates (a
    vectorised reduction, where a running maximum over all boxes is a sequential scan:
    GPT-2 360 layers, ~4,100 boxes a step, the pass 2.7 -> 2.0 s), and the last run's gives
    the top of them all."""
    cand = np.flatnonzero(offs[1:] - tops[:-1] >= s) + 1
    cuts = np.empty(len(cand) + 1, np.int64)
    cuts[0] = 0
    cuts[1:] = cand
    below = np.maximum.accumulate(np.maximum.reduceat(tops, cuts))
    return _pick_gap(offs[cuts], below, s, a, best)


def _pick_gap(offs: np.ndarray, below: np.ndarray, s: int, a: int, best: bool) -> int:
    """The chosen gap's start among candidate boxes ``offs`` (ascending), ``below[j - 1]``
    the highest top below candidate ``j`` (none below the first) and ``below[-1]`` the top of
    all: the smallest gap that holds ``s`` (``best``) or the lowest, else the rounded top."""
    starts = np.empty(len(offs), np.int64)  # the candidates' gaps start here
    starts[0] = 0
    starts[1:] = below[:-1]
    if a > 1:
        starts = -(-starts // a) * a
    room = offs - starts
    fits = room >= s
    j = int(np.where(fits, room, _BIG).argmin()) if best else int(fits.argmax())
    if fits[j]:
        return int(starts[j])
    off = int(below[-1])
    return -(-off // a) * a if a > 1 else off


#: :func:`_place_core` drops the boxes past their last use every this many steps.
_COMPACT_EVERY = 256


def _last_uses(lower: np.ndarray, upper: np.ndarray, size: np.ndarray, free: np.ndarray,
               f_lo: np.ndarray, f_hi: np.ndarray) -> np.ndarray:
    """The last step of the pass (a position in ``free``) whose buffer overlaps each fixed
    box, then each free buffer (-1: none); every box is kept (``len(free)``) when a lifetime
    is empty, where the overlap test of the loop is not the intervals' overlap."""
    lo, hi = lower[free], upper[free]
    if (hi <= lo).any() or (f_hi <= f_lo).any():
        return np.full(len(f_lo) + len(free), len(free), np.int64)
    ask = np.flatnonzero(size[free] > 0)  # a zero-size buffer looks at no box
    q = last_overlap(lo[ask], hi[ask], ask, np.concatenate([f_lo, lo]),
                     np.concatenate([f_hi, hi]))
    # a free buffer is placed at its own step and seen from then on
    q[len(f_lo):] = np.maximum(q[len(f_lo):], np.arange(len(free)))
    return q


def _order_keys(problem: Problem) -> dict[str, np.ndarray]:
    lower, upper, size, _ = buffer_arrays(problem)
    length = upper - lower
    return {
        "size": size, "length": length, "area": size * length, "lower": lower,
        "total": section_totals(lower, upper, size),
    }


def _lexsort_desc(*keys: np.ndarray) -> list[int]:
    # np.lexsort sorts by the last key first; negate for descending
    return np.lexsort(tuple(-k for k in reversed(keys))).tolist()


#: Named buffer orders: ``name -> function(keys) -> order``.
ORDERS: dict[str, Callable[[dict[str, np.ndarray]], list[int]]] = {
    # equal sizes by start time: first fit then colours equal-size intervals optimally
    "size": lambda k: np.lexsort((k["lower"], -k["size"])).tolist(),
    "size_length": lambda k: _lexsort_desc(k["size"], k["length"]),
    "total_size": lambda k: np.lexsort((k["lower"], -k["size"], -k["total"])).tolist(),
    "length": lambda k: _lexsort_desc(k["length"], k["size"]),
    "area": lambda k: _lexsort_desc(k["area"], k["size"]),
    "total": lambda k: _lexsort_desc(k["total"], k["size"], k["length"]),
    "total_length": lambda k: _lexsort_desc(k["total"], k["length"], k["area"]),
    "start": lambda k: np.lexsort((-k["size"], k["lower"])).tolist(),
}


def named_order(problem: Problem, name: str) -> list[int]:
    """The buffer order ``name`` of :data:`ORDERS` for ``problem`` (indices into its buffers).

    Examples
    --------
    >>> from roam_core.model.dsa import Buffer, Problem
    >>> named_order(Problem((Buffer("a", 0, 1, 3), Buffer("b", 0, 1, 5))), "size")
    [1, 0]
    """
    return list(ORDERS[name](_order_keys(problem)))


def greedy_by_size(problem: Problem) -> Solution:
    """TFLite/XLA greedy by size: decreasing size (ties by start), best-fit gap.

    Examples
    --------
    >>> from roam_core.model.dsa import Buffer, Problem
    >>> greedy_by_size(Problem((Buffer("a", 0, 1, 3), Buffer("b", 0, 1, 5)))).offsets
    (5, 0)
    """
    keys = _order_keys(problem)
    sol = place_in_order(problem, ORDERS["size"](keys), "best")
    assert sol is not None
    return sol


def portfolio(problem: Problem, *, deadline: float | None = None,
              orders: Sequence[str] = tuple(ORDERS), fits: Sequence[str] = ("best", "first"),
              target: int | None = None, known: Mapping[str, Solution] | None = None,
              ) -> tuple[Solution, str, list[tuple[str, int]]]:
    """Run every (order, fit) pair and keep the lowest layout.

    Parameters
    ----------
    problem : Problem
        The buffers.
    deadline : float, optional
        ``cpu_now()`` safety limit for every pass after the first.
    orders, fits : sequence of str
        The pairs to run (order-major).
    target : int, optional
        A height no layout can go below (the live-set bound): once a pass reaches it the
        rest are skipped, since none could be lower (ties keep the first), so the result is
        that of the full portfolio.
    known : Mapping of str to Solution, optional
        Layouts already computed for some pairs, by method name (``"greedy:size:best"``):
        used instead of running the pass again (they must be that pass's layout).

    Returns
    -------
    (Solution, str, list)
        The best solution, its method name (``"greedy:<order>:<fit>"``) and every
        ``(method, height)`` tried.  The first pair (size, best) always gives a layout: cut
        by the clock, the buffers it has not placed yet go above the others (its name then
        ends ``"+rest"``).
    """
    keys = _order_keys(problem)
    known = known or {}
    best: Solution | None = None
    best_name = ""
    tried: list[tuple[str, int]] = []
    for oname in orders:
        order: list[int] | None = None
        for fit in fits:
            if best is not None and target is not None and best.height <= target:
                return best, best_name, tried
            name = f"greedy:{oname}:{fit}"
            sol = known.get(name)
            if sol is None and best is not None and deadline is not None \
                    and cpu_now() > deadline:
                return best, best_name, tried  # no time for another pass
            if sol is None:
                if order is None:
                    order = ORDERS[oname](keys)
                # the first pass is cut by the clock too, leaving time to place its rest
                # above it in lanes (about 5 us a buffer): a valid layout in time
                first = best is None and deadline is not None
                cut = deadline
                if first and deadline is not None:
                    cut = cpu_now() + 0.8 * max(
                        0.0, deadline - cpu_now() - _LANE_S * len(problem))
                sol = place_in_order(problem, order, fit, cut, partial=first)
                if first and sol is not None and cut is not None and cpu_now() > cut:
                    name += "+rest"
            if sol is None:
                return best, best_name, tried  # type: ignore[return-value]  # set: pair 1 ends
            tried.append((name, sol.height))
            _logger.debug("%s height %d", name, sol.height)
            if best is None or sol.height < best.height:
                best, best_name = sol, name
    assert best is not None
    return best, best_name, tried


def promote_high(problem: Problem, order: Sequence[int], fit: str, start: Solution, *,
                 target: int, passes: int, deadline: float | None = None,
                 ) -> tuple[Solution, int, bool]:
    """Iterated greedy: move the buffers that end above ``target`` to the front and re-place.

    A greedy pass is usually wrong at a few buffers only: those it placed late, when the
    gaps left at their steps were all too small, end on top of the layout.  Each pass
    here takes the order of the last one, moves every buffer whose top is above
    ``target`` in the last layout to the front (keeping their relative order, and the
    order of the rest), and places them all again with the same ``fit`` ("squeaky wheel"
    optimisation).  The lowest layout is kept, so the result is never higher than
    ``start``.  The work is a fixed count of passes (deterministic); ``deadline`` is a
    CPU-time safety limit (this thread's, :mod:`roam_core.base.cpu_clock`).

    (pangu_2.6B, 18,692 buffers: the total/size order ends with three 20 MB buffers at
    1.0076 x the live-set bound; one pass with them in front places everything at the
    bound.)

    Parameters
    ----------
    problem : Problem
        The buffers (fixed offsets stay where they are).
    order : sequence of int
        The order of the pass that produced ``start`` (every free buffer once).
    fit : {"best", "first"}
        The fit rule of that pass.
    start : Solution
        The layout of ``order`` (not re-placed).
    target : int
        Height to reach (usually the live-set lower bound); passes stop once it is reached.
    passes : int
        Most passes.
    deadline : float, optional
        ``cpu_now()`` safety limit.

    Returns
    -------
    (Solution, int, bool)
        The lowest layout, the passes run, and whether the deadline cut them short.

    Examples
    --------
    >>> from roam_core.model.dsa import Buffer, Problem
    >>> p = Problem((Buffer("a", 0, 3, 3), Buffer("b", 2, 4, 3), Buffer("c", 3, 5, 1),
    ...              Buffer("d", 4, 5, 3)))
    >>> bad = place_in_order(p, [0, 1, 3, 2], "best")
    >>> bad.height, p.lower_bound()
    (7, 6)
    >>> sol, runs, cut = promote_high(p, [0, 1, 3, 2], "best", bad, target=6, passes=4)
    >>> sol.height, runs, cut
    (6, 1, False)
    """
    size = np.fromiter((b.size for b in problem.buffers), np.int64, len(problem))
    best = cur = start
    order = list(order)
    runs = 0
    while runs < passes and best.height > target:
        tops = np.fromiter(cur.offsets, np.int64, len(problem)) + size
        high = tops > target
        if not high.any():
            break
        moved = [i for i in order if high[i]] + [i for i in order if not high[i]]
        if moved == order:
            break  # a fixed point: the buffers above are in front already, same layout again
        order = moved
        sol = place_in_order(problem, order, fit, deadline)
        if sol is None:
            return best, runs, True
        runs += 1
        cur = sol
        if sol.height < best.height:
            best = sol
    return best, runs, False
