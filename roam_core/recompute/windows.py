"""Exact refinement of a drop set by windows: CP-SAT over a few candidates, the rest fixed.

The greedy trajectory, its pruning, the swaps and the portfolio
(:mod:`~roam_core.recompute.greedy`, :mod:`~roam_core.recompute.improve`) give a drop set
``D`` whose just-in-time peak fits a limit.  :func:`refine_windows` improves it by windows:
it takes a sub-problem of at most ``window_size`` candidate storages ``W`` (one of ``D``'s
costliest drops, the other drops and the cheapest undropped storages live at the steps where
keeping it again would overflow), fixes every other decision, and solves exactly with CP-SAT
which storages of ``W`` to drop, minimising the added cost (FLOPs + ``bytes_weight`` x bytes
moved) subject to the limit at every step the window affects.  A window's solution is kept
only when :class:`~roam_core.recompute.greedy.JitEvaluator` confirms that it fits and costs
less; windows are tried until none improves or ``max_windows`` models were solved.

The model (Checkmate's formulation, arXiv 1910.02653, restricted to the fixed base order and
the just-in-time placement) follows :meth:`JitEvaluator.evaluate` exactly:

* ``d_s`` drops a storage of the window (the others are constants);
* ``run_p`` re-runs op ``p``: a late reader reads a value of ``p`` whose storage is dropped,
  or a re-run reads such a value (a chain);
* the slot of a re-run (the base op it runs before) is the minimum of its late readers, the
  in-place writes after its source of the storages it reads as they are, and the slots of
  the re-runs reading its copies (``AddMinEquality`` over conditional terms);
* the live intervals are *retention intervals* over the doubled step axis (gap ``f`` before
  base op ``f`` is ``2f``, base op ``t`` is ``2t + 1``): a dropped storage frees its bytes
  after its last forward reader, a kept storage read by a re-run lives until the last such
  re-run, a copy lives from its re-run to its last reader;
* every interval whose ends can move is cut into segments at every value its ends can take,
  and each segment's constraint is the largest fixed live bytes over the segment plus the
  window's items live there.

At base ops the accounting equals the simulator's (tested); the re-run steps of one gap
are counted together (everything live at any of them), an upper bound, so a solution of the
model always fits.  :func:`jit_accounting` is that accounting for a concrete drop set.

The models are built and solved in the calling process, with one worker, a fixed seed and
a deterministic time limit, so the result is reproducible.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from roam_core.base.cpsat import make_solver
from roam_core.base.errors import GraphError
from roam_core.model.graph import OpId, TensorId
from roam_core.recompute.greedy import Evaluation, JitEvaluator

__all__ = ["WindowModel", "WindowReport", "build_window_model", "jit_accounting",
           "refine_windows"]

#: storages in one window (the CP-SAT model's drop decisions)
DEFAULT_WINDOW_SIZE = 12

Lit = Any  # a CP-SAT literal or a Python bool


@dataclass(frozen=True, slots=True)
class WindowReport:
    """What :func:`refine_windows` did.

    Parameters
    ----------
    windows : int
        Models solved.
    improved : int
        Windows whose solution was kept (confirmed by the evaluator).
    start_cost, end_cost : float
        The objective (FLOPs + ``bytes_weight`` x bytes moved) before and after.
    start_flops, end_flops : int
        Extra FLOPs before and after.
    cpu_s : float
        CPU seconds spent (``time.process_time``).
    """

    windows: int
    improved: int
    start_cost: float
    end_cost: float
    start_flops: int
    end_flops: int
    cpu_s: float

    def note(self, step_flops: int) -> str:
        """One line for the plan notes."""
        sf = max(step_flops, 1)
        return (f"exact windows: {self.windows} CP-SAT windows, {self.improved} improved the "
                f"drop set: extra FLOPs +{100 * self.start_flops / sf:.2f}% -> "
                f"+{100 * self.end_flops / sf:.2f}%, cost {self.start_cost:.4g} -> "
                f"{self.end_cost:.4g} ({self.cpu_s:.1f} CPU s)")


# ------------------------------------------------------------------ concrete accounting
def _static(ev: JitEvaluator) -> np.ndarray:
    """Live bytes of the base order on the doubled axis (nothing dropped, no re-runs)."""
    n0 = len(ev.base)
    out = np.zeros(2 * n0 + 1, dtype=np.int64)
    out[1::2] = ev._live_op
    out[0::2] = ev._live_gap
    return out


def _slots_of(ev: JitEvaluator, rops: Sequence[Any]) -> list[int]:
    return ev._slots(rops) if rops else []


def _concrete_items(ev: JitEvaluator, drop: set[TensorId], rops: Sequence[Any],
                    slots: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(start, end inclusive, bytes)`` on the doubled axis of what ``drop`` changes."""
    tix, be, bee, z = ev._tix, ev._be, ev._be_early, ev._z
    last_late, created = ev._last_late, ev._created
    items: list[tuple[int, int, int]] = []
    for s in drop:
        i = tix.get(s)
        if i is None:
            continue
        a, b = 2 * (int(bee[i]) + 1), 2 * int(be[i]) + 1
        if a <= b:
            items.append((a, b, -int(z[i])))
    read_by: dict[int, int] = {}
    copy_end: dict[TensorId, int] = {}
    for r, f in zip(rops, slots, strict=True):
        _, _, copy_of, kept = ev._rop_info(r)
        for cs in copy_of:
            copy_end[cs] = max(copy_end.get(cs, -1), f)
        for i in kept:
            read_by[i] = max(read_by.get(i, -1), f)
    for i, f in read_by.items():
        if f > int(be[i]):
            items.append((2 * (int(be[i]) + 1), 2 * f, int(z[i])))
    for r, f in zip(rops, slots, strict=True):
        for sid, size in created[r.source]:
            e = 2 * f
            if sid in drop:
                ll = int(last_late[tix[sid]])
                e = max(e, 2 * ll + 1 if ll >= 0 else -1, 2 * copy_end.get(sid, f))
            items.append((2 * f, e, size))
    return items


def _add_items(arr: np.ndarray, items: Iterable[tuple[int, int, int]]) -> np.ndarray:
    d = np.zeros(len(arr) + 1, dtype=np.int64)
    for a, b, z in items:
        d[a] += z
        d[b + 1] -= z
    return arr + np.cumsum(d[:-1])


def jit_accounting(ev: JitEvaluator, dropped: Iterable[TensorId]) -> np.ndarray:
    """Live bytes (resident excluded) of the just-in-time expansion of ``dropped``, on the
    doubled axis: entry ``2t + 1`` is base op ``t`` (equal to the evaluation's live bytes at
    that op), entry ``2f`` is everything live at any re-run step placed before base op ``f``
    (at least the live bytes at each of them)."""
    drop = tuple(dict.fromkeys(dropped))
    rops = ev.recompute_ops(drop) if drop else ()
    return _add_items(_static(ev), _concrete_items(ev, set(drop), rops, _slots_of(ev, rops)))


# ------------------------------------------------------------------------ the model
class _Bool:
    """Reified AND / OR over CP-SAT literals and Python bools."""

    def __init__(self, m: cp_model.CpModel) -> None:
        self.m = m
        self._and: dict[tuple[int, ...], Lit] = {}

    @staticmethod
    def neg(x: Lit) -> Lit:
        return (not x) if isinstance(x, bool) else x.Not()

    def all(self, xs: Iterable[Lit]) -> Lit:
        lits = []
        for x in xs:
            if x is False:
                return False
            if x is not True:
                lits.append(x)
        if not lits:
            return True
        if len(lits) == 1:
            return lits[0]
        key = tuple(sorted({x.Index() for x in lits}))
        hit = self._and.get(key)
        if hit is not None:
            return hit
        z = self.m.NewBoolVar("and")
        self.m.AddBoolAnd(lits).OnlyEnforceIf(z)
        self.m.AddBoolOr([x.Not() for x in lits]).OnlyEnforceIf(z.Not())
        self._and[key] = z
        return z

    def any(self, xs: Iterable[Lit]) -> Lit:
        return self.neg(self.all(self.neg(x) for x in xs))


@dataclass
class WindowModel:
    """The CP-SAT model of one window (see the module docstring).

    Attributes
    ----------
    model : cp_model.CpModel
    drop : dict of TensorId to literal
        The window's decisions.
    fixed : np.ndarray
        Live bytes of everything the window does not change, on the doubled axis.
    segments : list of (int, int, linear expression)
        ``[first, last]`` doubled coordinates and the bytes of the window's items live there
        (with a limit, only the segments where the limit can bind).
    cost : linear expression
        The objective (the re-run costs of the ops the window may re-run or not).
    fixed_drops : tuple of TensorId
        The drop set outside the window.
    """

    model: cp_model.CpModel
    drop: dict[TensorId, Any]
    fixed: np.ndarray
    segments: list[tuple[int, int, Any]]
    cost: Any
    fixed_drops: tuple[TensorId, ...]


def build_window_model(ev: JitEvaluator, dropped: Sequence[TensorId],
                       window: Sequence[TensorId], limit_bytes: int | None,
                       bytes_weight: float = 1.0, *,
                       current: np.ndarray | None = None) -> WindowModel:
    """The exact model of the drops of ``window`` with the rest of ``dropped`` fixed.

    Parameters
    ----------
    ev : JitEvaluator
        The evaluator of the graph and base order.
    dropped : sequence of TensorId
        The current drop set (its members outside ``window`` stay dropped).
    window : sequence of TensorId
        The storages whose drop the model decides; ``dropped | window`` must be a valid
        drop set (:meth:`JitEvaluator.recompute_ops`).
    limit_bytes : int or None
        Peak limit (resident included); ``None``: no memory constraint (accounting only).
    bytes_weight : float
        Cost of one byte moved, in FLOPs.
    current : np.ndarray, optional
        :func:`jit_accounting` of ``dropped``: gap coordinates over the limit there (the
        gap accounting is an upper bound) get no constraint; the evaluator checks them.

    Raises
    ------
    GraphError
        ``dropped | window`` is not a valid drop set.
    """
    n0 = len(ev.base)
    win = tuple(dict.fromkeys(window))
    wset = set(win)
    dfix = set(dropped) - wset
    union = dfix | wset
    rops_u = ev.recompute_ops(tuple(sorted(union)))
    pall = [r.source for r in rops_u]
    pset = set(pall)
    bpos, op_ins, vprod, late = ev._bpos, ev._op_ins, ev._vprod, ev.late
    tix, be, bee, z = ev._tix, ev._be, ev._be_early, ev._z
    last_late, created, out_ = ev._last_late, ev._created, ev._out
    bwriters = ev._base_writers
    trig: dict[OpId, list[tuple[TensorId, int]]] = {p: [] for p in pall}
    for s in sorted(union):
        for _, _, v, r in ev._late_reads.get(s, ()):
            p = vprod.get(v)
            if p is None or p in late or p not in pset:
                continue
            trig[p].append((s, bpos[r]))
    chain_in: dict[OpId, list[tuple[OpId, TensorId]]] = {p: [] for p in pall}
    readers_of: dict[int, list[OpId]] = {}  # kept storage -> re-runs that may read it
    copy_readers: dict[TensorId, list[OpId]] = {}
    for q in pall:
        for u, su in op_ins[q]:
            if su in union:
                p = vprod[u]
                if p in chain_in:
                    chain_in[p].append((q, su))
                copy_readers.setdefault(su, []).append(q)
            if su not in dfix:
                i = tix.get(su)
                if i is not None and not out_[i]:
                    readers_of.setdefault(i, []).append(q)
    aff: set[OpId] = set()
    for p in reversed(pall):  # consumers first (pall is inputs first)
        if (any(s in wset for s, _ in trig[p]) or any(su in wset for _, su in op_ins[p])
                or any(su in wset or q in aff for q, su in chain_in[p])):
            aff.add(p)

    # slots of the unaffected re-runs (constants) and the domains of the affected ones
    def writer_terms(p: OpId) -> list[tuple[TensorId, int]]:
        src = bpos[p]
        return [(su, w) for _, su in op_ins[p] if su not in dfix
                for w in bwriters.get(su, ()) if w > src]

    fixed_slot: dict[OpId, int] = {}
    dom: dict[OpId, set[int]] = {}
    for p in reversed(pall):
        if p in aff:
            d = {n0, *(v for _, v in trig[p]), *(w for _, w in writer_terms(p))}
            for q, _ in chain_in[p]:
                d |= dom[q]
            dom[p] = d
        else:
            f = min([n0, *(v for _, v in trig[p]), *(w for _, w in writer_terms(p)),
                     *(fixed_slot[q] for q, _ in chain_in[p])])
            fixed_slot[p] = f
            dom[p] = {f}

    # the fixed part: static, minus the fixed drops, plus the unaffected items
    fixed_items: list[tuple[int, int, int]] = []
    for s in dfix:
        i = tix.get(s)
        if i is not None:
            a, b = 2 * (int(bee[i]) + 1), 2 * int(be[i]) + 1
            if a <= b:
                fixed_items.append((a, b, -int(z[i])))
    sym_kept: list[int] = []
    for i, rs in readers_of.items():
        s = ev.planned[i]
        if s in wset or any(q in aff for q in rs):
            sym_kept.append(i)
            continue
        f = max(fixed_slot[q] for q in rs)
        if f > int(be[i]):
            fixed_items.append((2 * (int(be[i]) + 1), 2 * f, int(z[i])))
    sym_copies: list[tuple[OpId, TensorId, int]] = []
    for p in pall:
        for sid, size in created[p]:
            qs = copy_readers.get(sid, ()) if sid in union else ()
            if p in aff or sid in wset or any(q in aff for q in qs):
                sym_copies.append((p, sid, size))
                continue
            f = fixed_slot[p]
            e = 2 * f
            if sid in dfix:
                ll = int(last_late[tix[sid]])
                e = max(e, 2 * ll + 1 if ll >= 0 else -1,
                        *(2 * fixed_slot[q] for q in qs))
            fixed_items.append((2 * f, e, size))
    fixed = _add_items(_static(ev), fixed_items)

    # variables
    m = cp_model.CpModel()
    B = _Bool(m)
    dv = {s: m.NewBoolVar(f"d[{s}]") for s in win}

    def dl(s: TensorId) -> Lit:
        return dv[s] if s in dv else (s in dfix)

    run: dict[OpId, Lit] = {}
    slot: dict[OpId, Any] = {}
    for p in reversed(pall):
        if p not in aff:
            run[p] = True
            slot[p] = fixed_slot[p]
            continue
        run[p] = B.any([*(dl(s) for s, _ in trig[p]),
                        *(B.all([run[q], dl(su)]) for q, su in chain_in[p])])
        terms: list[Any] = [n0]
        for s, v in trig[p]:
            c = dl(s)
            if c is True:
                terms.append(v)
            elif c is not False:
                terms.append(n0 + (v - n0) * c)
        for su, w in writer_terms(p):
            c = B.neg(dl(su)) if su in wset else True
            if c is True:
                terms.append(w)
            elif c is not False:
                terms.append(n0 + (w - n0) * c)
        for q, su in chain_in[p]:
            c = B.all([run[q], dl(su)])
            if c is False:
                continue
            if isinstance(slot[q], int):
                if c is True:
                    terms.append(slot[q])
                else:
                    terms.append(n0 + (slot[q] - n0) * c)
            else:
                e = m.NewIntVar(0, n0, f"e[{q}>{p}]")
                if c is True:
                    m.Add(e == slot[q])
                else:
                    m.Add(e == slot[q]).OnlyEnforceIf(c)
                    m.Add(e == n0).OnlyEnforceIf(B.neg(c))
                terms.append(e)
        consts = [t for t in terms if isinstance(t, int)]
        exprs = [t for t in terms if not isinstance(t, int)]
        if not exprs:
            slot[p] = min(consts)
            continue
        lo = min(min(dom[p]), n0)
        fp = m.NewIntVar(lo, n0, f"slot[{p}]")
        m.AddMinEquality(fp, [min(consts), *exprs])
        slot[p] = fp
    ge_cache: dict[tuple[OpId, int], Lit] = {}

    def ge(p: OpId, k: int) -> Lit:
        """slot[p] >= k"""
        f = slot[p]
        if isinstance(f, int):
            return f >= k
        key = (p, k)
        hit = ge_cache.get(key)
        if hit is None:
            ds = dom[p]
            if k <= min(ds):
                hit = True
            elif k > max(ds):
                hit = False
            else:
                hit = m.NewBoolVar(f"ge[{p},{k}]")
                m.Add(f >= k).OnlyEnforceIf(hit)
                m.Add(f <= k - 1).OnlyEnforceIf(hit.Not())
            ge_cache[key] = hit
        return hit

    # symbolic items: (sizes, break points, liveness at a coordinate)
    bps: set[int] = set()
    items: list[tuple[int, Any]] = []  # (bytes, live(c) -> literal)
    extent: list[tuple[int, int]] = []  # the coordinates each item may be live at

    def dom_bps(p: OpId) -> None:
        for f in dom[p]:
            bps.add(2 * f)
            bps.add(2 * f + 1)

    for s in win:
        i = tix.get(s)
        if i is None:
            continue
        a, b = 2 * (int(bee[i]) + 1), 2 * int(be[i]) + 1
        if a <= b:
            bps.update((a, b + 1))
            items.append((-int(z[i]), (lambda c, a=a, b=b, s=s: dl(s) if a <= c <= b
                                        else False)))
            extent.append((a, b))
    for i in sym_kept:
        s = ev.planned[i]
        start = 2 * (int(be[i]) + 1)
        bps.add(start)
        rs = readers_of[i]
        for q in rs:
            dom_bps(q)

        def kept_live(c: int, start: int = start, rs: list[OpId] = rs,
                      s: TensorId = s) -> Lit:
            if c < start:
                return False
            return B.all([B.neg(dl(s)),
                          B.any([B.all([run[q], ge(q, -(-c // 2))]) for q in rs])])

        items.append((int(z[i]), kept_live))
        extent.append((start, max(2 * f for q in rs for f in dom[q])))
    for p, sid, size in sym_copies:
        dom_bps(p)
        qs = copy_readers.get(sid, ()) if sid in union else ()
        for q in qs:
            dom_bps(q)
        i = tix[sid]
        ll = int(last_late[i])
        if ll >= 0:
            bps.add(2 * ll + 2)

        def copy_live(c: int, p: OpId = p, sid: TensorId = sid, qs: Sequence[OpId] = qs,
                      ll: int = ll) -> Lit:
            ends = [ge(p, c // 2) if c % 2 == 0 else False]
            ds = dl(sid)
            if ll >= 0 and c <= 2 * ll + 1:
                ends.append(ds)
            ends.extend(B.all([run[q], ds, ge(q, -(-c // 2))]) for q in qs)
            return B.all([run[p], B.neg(ge(p, c // 2 + 1)), B.any(ends)])

        items.append((size, copy_live))
        extent.append((2 * min(dom[p]), max(2 * max(dom[p]), 2 * ll + 1,
                                            *(2 * f for q in qs for f in dom[q]))))
    top = len(fixed)
    pts = sorted(b for b in bps if 0 <= b < top)
    cap = None if limit_bytes is None else limit_bytes - ev.resident
    segments: list[tuple[int, int, Any]] = []
    for k, a in enumerate(pts):
        b = (pts[k + 1] - 1) if k + 1 < len(pts) else top - 1
        if k + 1 == len(pts):
            b = a  # past the last break point nothing of the window is live
        top_fixed = None
        if cap is not None:
            seg = fixed[a:b + 1]
            base_max = int(seg[(a + 1) % 2::2].max()) if len(seg[(a + 1) % 2::2]) else None
            gaps = seg[a % 2::2]
            if current is not None and len(gaps):  # gap coordinates already over the bound
                gaps = gaps[current[a:b + 1][a % 2::2] <= cap]
            gap_max = int(gaps.max()) if len(gaps) else None
            known = [x for x in (base_max, gap_max) if x is not None]
            if not known:
                continue
            top_fixed = max(known)
            most = sum(size for (size, _), (lo, hi) in zip(items, extent, strict=True)
                       if size > 0 and lo <= b and hi >= a)
            if top_fixed + most <= cap:
                continue  # cannot bind: no literals for this segment
        terms = []
        for size, live in items:
            lv = live(a)
            if lv is True:
                terms.append(size)
            elif lv is not False:
                terms.append(size * lv)
        expr = sum(terms) if terms else 0
        segments.append((a, b, expr))
        if top_fixed is not None and terms:
            m.Add(expr + top_fixed <= cap)
    w = bytes_weight
    cost = sum(int(ev.flops[p] + w * ev.moved[p]) * run[p] for p in pall
               if p in aff and not isinstance(run[p], bool))
    const = sum(int(ev.flops[p] + w * ev.moved[p]) for p in pall if run[p] is True)
    cost = cost + const
    if not isinstance(cost, int):
        m.Minimize(cost)
    cur = set(dropped)
    for s, v in dv.items():
        m.AddHint(v, int(s in cur))
    return WindowModel(m, dv, fixed, segments, cost, tuple(sorted(dfix)))


# ------------------------------------------------------------------------ windows
def _own_cost(ev: JitEvaluator, s: TensorId, w: float) -> float:
    p = ev.graph.tensors[s].producer
    return 0.0 if p is None else ev.flops[p] + w * ev.moved[p]


def _feasible(ev: JitEvaluator, drops: Iterable[TensorId]) -> bool:
    try:
        ev.recompute_ops(tuple(sorted(set(drops))))
    except GraphError:
        return False
    return True


def _windows(ev: JitEvaluator, cur: Evaluation, cap: int, w: float, size: int,
             pool: Sequence[TensorId], own: dict[TensorId, float]
             ) -> Iterable[tuple[TensorId, list[TensorId]]]:
    """Windows around the costliest drops.

    For a dropped storage ``x``, the steps where keeping it again would overflow (its bytes
    over the slack left at the steps between its last forward reader and its last reader)
    are to be covered: the window is ``x``, the costliest other drops that free bytes there
    (they may be swapped too) and undropped storages picked greedily by the overflow they
    cover per unit of re-run cost, until the overflow is covered or the window is full.
    """
    tix, be, bee, z = ev._tix, ev._be, ev._be_early, ev._z
    assert cur.positions is not None
    epos = cur.positions.epos  # type: ignore[attr-defined]
    base_live = np.asarray(cur.live)[epos]
    dset = set(cur.dropped)
    costly = sorted((s for s in cur.dropped if own.get(s, 0.0) > 0 and s in tix),
                    key=lambda s: (-own[s], s))
    fresh_all = [s for s in pool if s not in dset and s in tix]
    tprod, ins, late = ev._tprod, ev._op_ins, ev.late
    held = {t for t in ev.planned if t not in ev.outputs and tprod[t] is not None
            and ev.blockers[tprod[t]] is None and not any(r in late for r in ev.readers[t])}
    first_late = ev._first_late

    def region(s: TensorId) -> tuple[int, int]:
        """Steps where dropping ``s`` frees its bytes: after its last forward reader, before
        its first late reader (its copy is made just before that)."""
        j = tix[s]
        fl = int(first_late[j])
        return int(bee[j]) + 1, (fl - 1 if fl >= 0 else int(be[j]))

    fr = [region(s) for s in fresh_all]
    fa = np.asarray([r[0] for r in fr], dtype=np.int64)
    fb = np.asarray([r[1] for r in fr], dtype=np.int64)
    fz = np.asarray([int(z[tix[s]]) for s in fresh_all], dtype=np.int64)
    fc = np.asarray([own[s] + 1.0 for s in fresh_all], dtype=np.float64)
    for x in costly:
        i = tix[x]
        a, b = region(x)
        if a > b:
            continue
        deficit = np.zeros(len(base_live), dtype=np.int64)
        deficit[a:b + 1] = np.maximum(base_live[a:b + 1] + int(z[i]) - cap, 0)
        if not deficit.any():
            continue  # keeping x again fits: pruning's job
        cum = np.concatenate(([0], np.cumsum(deficit > 0)))
        others = []
        for y in costly:
            if y == x or len(others) >= max(1, size // 4):
                continue
            ya, yb = region(y)
            if ya <= yb and cum[yb + 1] - cum[ya] > 0:
                others.append(y)
        win = [x, *others]

        def add(s: TensorId, win: list[TensorId] = win) -> bool:
            """Add ``s`` and the storages its re-run would hold (forward intermediates no
            late op reads: dropped too, they are rebuilt by a chain instead of held)."""
            if not _feasible(ev, [*dset, *win, s]):
                return False
            win.append(s)
            p = tprod[s]
            for _, su in ins[p] if p is not None else ():
                if (len(win) < size + 2 and su in held and su not in dset and su not in win
                        and _feasible(ev, [*dset, *win, su])):
                    win.append(su)
            return True
        if len(fresh_all):
            cover = cum[np.minimum(fb, len(base_live) - 1) + 1] - cum[np.minimum(
                fa, len(base_live))]
            cover = np.where(fa <= fb, cover, 0)
            score = fz * cover / fc
            idx = [k for k in np.argsort(-score, kind="stable")[:8 * size] if cover[k] > 0]
            later: list[int] = []
            for k in idx:  # first those that cover what is left, then the best others
                if len(win) >= size:
                    break
                sa, sb = int(fa[k]), int(fb[k])
                if not deficit[sa:sb + 1].any():
                    later.append(k)
                    continue
                if add(fresh_all[k]):
                    deficit[sa:sb + 1] = np.maximum(deficit[sa:sb + 1] - int(fz[k]), 0)
            for k in later:
                if len(win) >= size:
                    break
                add(fresh_all[k])
        yield x, win


def refine_windows(ev: JitEvaluator, start: Evaluation, limit_bytes: int,
                   bytes_weight: float = 1.0, *, window_size: int = DEFAULT_WINDOW_SIZE,
                   max_windows: int = 16, time_limit_s: float = 1.0
                   ) -> tuple[Evaluation, WindowReport]:
    """Improve a drop set that fits ``limit_bytes`` by exact windows (module docstring).

    Parameters
    ----------
    ev : JitEvaluator
        The evaluator of the graph and base order.
    start : Evaluation
        A drop set whose just-in-time peak fits (returned unchanged otherwise).
    limit_bytes : int
        The just-in-time peak to stay at or under (resident included).
    bytes_weight : float
        Cost of one byte moved, in FLOPs.
    window_size : int
        Storages per window.
    max_windows : int
        Models solved at most (the deterministic work limit, with ``time_limit_s``).
    time_limit_s : float
        CP-SAT deterministic seconds per window.

    Returns
    -------
    (Evaluation, WindowReport)
        A drop set that fits and costs at most ``start``'s, and what was done.
    """
    t0 = time.process_time()
    w = bytes_weight
    cur = start
    solved = improved = 0
    if start.peak_bytes > limit_bytes or not start.dropped or max_windows <= 0:
        return cur, WindowReport(0, 0, start.cost(w), start.cost(w), start.extra_flops,
                                 start.extra_flops, time.process_time() - t0)
    own = {s: _own_cost(ev, s, w) for s in ev.droppable if ev.size[s]}
    for s in start.dropped:
        own.setdefault(s, _own_cost(ev, s, w))
    pool = [s for s in ev.droppable if ev.size[s]]
    cap = limit_bytes - ev.resident
    tried: set[tuple[frozenset[TensorId], frozenset[TensorId]]] = set()
    progress = True
    while progress and solved < max_windows:
        progress = False
        acc = jit_accounting(ev, cur.dropped)
        for _x, win in _windows(ev, cur, cap, w, window_size, pool, own):
            if solved >= max_windows:
                break
            key = (frozenset(win), frozenset(cur.dropped))
            if key in tried:
                continue
            tried.add(key)
            try:
                wm = build_window_model(ev, cur.dropped, win, limit_bytes, w, current=acc)
            except GraphError:
                continue
            solved += 1
            solver = make_solver(time_limit_s=time_limit_s)
            st = solver.Solve(wm.model)
            if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                continue
            chosen = [s for s, v in wm.drop.items() if solver.BooleanValue(v)]
            new = [*wm.fixed_drops, *chosen]
            if frozenset(new) == frozenset(cur.dropped):
                continue
            e = ev.evaluate(sorted(new))
            if e.peak_bytes <= limit_bytes and e.cost(w) < cur.cost(w) * (1 - 1e-9):
                cur = e
                improved += 1
                progress = True
                break  # windows are chosen again around the new drop set
    return cur, WindowReport(solved, improved, start.cost(w), cur.cost(w), start.extra_flops,
                             cur.extra_flops, time.process_time() - t0)
