"""The exact CP-SAT model of one window: a few drop decisions, everything else fixed.

:func:`~roam_core.recompute.windows.refine_windows` improves a drop set ``D`` window by
window; this module holds one window's model, built / solved / extracted here.  The model
(Checkmate's formulation, arXiv 1910.02653, restricted to the fixed base order and the
just-in-time placement) follows :meth:`~roam_core.recompute.evaluator.JitEvaluator.evaluate`
exactly:

* ``d_s`` drops a storage of the window (the others are constants);
* ``run_p`` re-runs op ``p``: a late reader reads a value of ``p`` whose storage is dropped,
  or a re-run reads such a value (a chain);
* the slot of a re-run (the base op it runs before) is the minimum of its late readers, the
  in-place writes after its source of the storages it reads as they are, and the slots of
  the re-runs reading its copies (``add_min_equality`` over conditional terms);
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

The model is solved in the calling process, with one worker, a fixed seed and a
deterministic time limit, so the result is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
from ortools.sat.python import cp_model

from roam_core.base.cpsat import make_solver, solve_with_stop
from roam_core.base.status import SolveStatus
from roam_core.model.graph import OpId, TensorId
from roam_core.model.recompute_ops import RecomputeOp
from roam_core.recompute.base_order_index import BaseOrderIndex
from roam_core.recompute.evaluator import JitEvaluator

__all__ = ["WindowModel", "WindowVariables", "build_window_model", "jit_accounting",
           "solve_window_model"]

#: A CP-SAT literal or a Python bool (a decision already known).
Lit: TypeAlias = "cp_model.BoolVarT | bool"
#: A slot: a constant base step or a CP-SAT integer variable.
Slot: TypeAlias = "int | cp_model.IntVar"
#: ``(start, end inclusive, bytes)`` on the doubled axis.
Item: TypeAlias = tuple[int, int, int]


# ------------------------------------------------------------------ concrete accounting
def _static(ix: BaseOrderIndex) -> np.ndarray:
    """Live bytes of the base order on the doubled axis (nothing dropped, no re-runs)."""
    n0 = len(ix.order)
    out = np.zeros(2 * n0 + 1, dtype=np.int64)
    out[1::2] = ix.live_at_op_bytes
    out[0::2] = ix.live_in_gap_bytes
    return out


def _concrete_items(ev: JitEvaluator, drop: set[TensorId], rops: Sequence[RecomputeOp],
                    slots: Sequence[int]) -> list[Item]:
    """``(start, end inclusive, bytes)`` on the doubled axis of what ``drop`` changes."""
    ix = ev.index
    tix, be, bee, z = ix.index_of, ix.end_step, ix.early_end_step, ix.size_bytes
    last_late, created = ix.last_late_step, ix.created_bytes
    items: list[Item] = []
    for s in drop:
        i = tix.get(s)
        if i is None:
            continue
        a, b = 2 * (int(bee[i]) + 1), 2 * int(be[i]) + 1
        if a <= b:
            items.append((a, b, -int(z[i])))
    sib_end: dict[int, int] = {}  # kept siblings read through the copy: its last reader
    for r in rops:
        for i, q_end, orig_end in ev.rerun_facts(r).sibling_ends:
            if ix.planned[i] in drop:
                continue
            sib_end[i] = q_end
            if orig_end < int(be[i]):
                items.append((2 * (orig_end + 1), 2 * int(be[i]) + 1, -int(z[i])))
    read_by: dict[int, int] = {}
    copy_end: dict[TensorId, int] = {}
    for r, f in zip(rops, slots, strict=True):
        facts = ev.rerun_facts(r)
        for cs in facts.copy_storages:
            copy_end[cs] = max(copy_end.get(cs, -1), f)
        for i in facts.kept_inputs:
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
            elif tix.get(sid) in sib_end:
                e = max(e, 2 * sib_end[tix[sid]] + 1)
            items.append((2 * f, e, size))
    return items


def _add_items(arr: np.ndarray, items: Iterable[Item]) -> np.ndarray:
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
    slots = ev.slots(rops) if rops else []
    return _add_items(_static(ev.index), _concrete_items(ev, set(drop), rops, slots))


# ------------------------------------------------------------------ the window's structure
@dataclass(frozen=True, slots=True)
class _Structure:
    """The re-runs of ``dropped | window`` and how the window's decisions reach them."""

    n0: int
    win: tuple[TensorId, ...]
    wset: frozenset[TensorId]
    #: the drops outside the window (constants)
    dfix: frozenset[TensorId]
    union: frozenset[TensorId]
    #: sources of every re-run that may happen, inputs first
    pall: tuple[OpId, ...]
    #: re-run -> (dropped storage, base step of the late reader it serves)
    trig: Mapping[OpId, list[tuple[TensorId, int]]]
    #: re-run -> (re-run reading its copy, the storage read)
    chain_in: Mapping[OpId, list[tuple[OpId, TensorId]]]
    #: kept planned storage (index) -> re-runs that may read it
    readers_of: Mapping[int, list[OpId]]
    #: storage -> re-runs that read it (as a copy when it is dropped)
    copy_readers: Mapping[TensorId, list[OpId]]
    #: re-runs the window's decisions may change (whether or where they run)
    aff: frozenset[OpId]

    def writer_terms(self, ix: BaseOrderIndex, p: OpId) -> list[tuple[TensorId, int]]:
        """In-place writes after ``p``'s source of the storages it may read as they are."""
        src = ix.position[p]
        return [(su, w) for _, su in ix.op_inputs[p] if su not in self.dfix
                for w in ix.writer_steps.get(su, ()) if w > src]


def _structure(ev: JitEvaluator, dropped: Sequence[TensorId], window: Sequence[TensorId]
               ) -> _Structure:
    ix = ev.index
    win = tuple(dict.fromkeys(window))
    wset = frozenset(win)
    dfix = frozenset(set(dropped) - wset)
    union = dfix | wset
    pall = tuple(r.source for r in ev.recompute_ops(tuple(sorted(union))))
    pset = set(pall)
    bpos, op_ins, vprod = ix.position, ix.op_inputs, ix.value_producer
    trig: dict[OpId, list[tuple[TensorId, int]]] = {p: [] for p in pall}
    for s in sorted(union):
        for _, _, v, r in ix.late_reads.get(s, ()):
            p = vprod.get(v)
            if p is None or p in ev.late or p not in pset:
                continue
            trig[p].append((s, bpos[r]))
    chain_in: dict[OpId, list[tuple[OpId, TensorId]]] = {p: [] for p in pall}
    readers_of: dict[int, list[OpId]] = {}
    copy_readers: dict[TensorId, list[OpId]] = {}
    for q in pall:
        for u, su in op_ins[q]:
            if su in union:
                p = vprod[u]
                if p in chain_in:
                    chain_in[p].append((q, su))
                copy_readers.setdefault(su, []).append(q)
            if su not in dfix:
                i = ix.index_of.get(su)
                if i is not None and not ix.is_output[i]:
                    readers_of.setdefault(i, []).append(q)
    aff: set[OpId] = set()
    for p in reversed(pall):  # consumers first (pall is inputs first)
        if (any(s in wset for s, _ in trig[p]) or any(su in wset for _, su in op_ins[p])
                or any(su in wset or q in aff for q, su in chain_in[p])):
            aff.add(p)
    return _Structure(len(ix.order), win, wset, dfix, union, pall, trig, chain_in,
                      readers_of, copy_readers, frozenset(aff))


def _slot_domains(ix: BaseOrderIndex, st: _Structure
                  ) -> tuple[dict[OpId, int], dict[OpId, set[int]]]:
    """The slots of the unaffected re-runs (constants) and every re-run's possible slots."""
    fixed_slot: dict[OpId, int] = {}
    dom: dict[OpId, set[int]] = {}
    for p in reversed(st.pall):
        if p in st.aff:
            d = {st.n0, *(v for _, v in st.trig[p]), *(w for _, w in st.writer_terms(ix, p))}
            for q, _ in st.chain_in[p]:
                d |= dom[q]
            dom[p] = d
        else:
            f = min([st.n0, *(v for _, v in st.trig[p]),
                     *(w for _, w in st.writer_terms(ix, p)),
                     *(fixed_slot[q] for q, _ in st.chain_in[p])])
            fixed_slot[p] = f
            dom[p] = {f}
    return fixed_slot, dom


def _fixed_part(ev: JitEvaluator, st: _Structure, fixed_slot: Mapping[OpId, int]
                ) -> tuple[np.ndarray, list[int], list[tuple[OpId, TensorId, int]]]:
    """Live bytes of what the window does not change (static, less the fixed drops, plus
    the unaffected re-runs' items), and what it may change: the kept storages whose
    retention and the copies whose intervals depend on its decisions."""
    ix = ev.index
    tix, be, bee, z = ix.index_of, ix.end_step, ix.early_end_step, ix.size_bytes
    fixed_items: list[Item] = []
    for s in st.dfix:
        i = tix.get(s)
        if i is not None:
            a, b = 2 * (int(bee[i]) + 1), 2 * int(be[i]) + 1
            if a <= b:
                fixed_items.append((a, b, -int(z[i])))
    sym_kept: list[int] = []
    for i, rs in st.readers_of.items():
        if ix.planned[i] in st.wset or any(q in st.aff for q in rs):
            sym_kept.append(i)
            continue
        f = max(fixed_slot[q] for q in rs)
        if f > int(be[i]):
            fixed_items.append((2 * (int(be[i]) + 1), 2 * f, int(z[i])))
    sym_copies: list[tuple[OpId, TensorId, int]] = []
    for p in st.pall:
        for sid, size in ix.created_bytes[p]:
            qs = st.copy_readers.get(sid, ()) if sid in st.union else ()
            if p in st.aff or sid in st.wset or any(q in st.aff for q in qs):
                sym_copies.append((p, sid, size))
                continue
            f = fixed_slot[p]
            e = 2 * f
            if sid in st.dfix:
                ll = int(ix.last_late_step[tix[sid]])
                e = max(e, 2 * ll + 1 if ll >= 0 else -1, *(2 * fixed_slot[q] for q in qs))
            fixed_items.append((2 * f, e, size))
    return _add_items(_static(ix), fixed_items), sym_kept, sym_copies


# ------------------------------------------------------------------ variables and literals
@dataclass(frozen=True, slots=True)
class WindowVariables:
    """The variables of one window model.

    Attributes
    ----------
    drop : dict of TensorId to cp_model.IntVar
        The window's decisions (``d_s``).
    run : dict of OpId to literal
        Whether each re-run happens (``True`` for the unaffected ones).
    slot : dict of OpId to int or cp_model.IntVar
        The base step each re-run runs before.
    """

    drop: dict[TensorId, cp_model.IntVar]
    run: dict[OpId, Lit] = field(default_factory=dict)
    slot: dict[OpId, Slot] = field(default_factory=dict)


class _Literals:
    """Reified AND / OR over CP-SAT literals and Python bools, and the window's derived
    literals (``d_s`` with the fixed drops as constants, ``slot_p >= k``), each made once."""

    def __init__(self, m: cp_model.CpModel, st: _Structure, v: WindowVariables,
                 dom: Mapping[OpId, set[int]]) -> None:
        self.m, self.st, self.v, self.dom = m, st, v, dom
        self._and: dict[tuple[int, ...], Lit] = {}
        self._ge: dict[tuple[OpId, int], Lit] = {}

    @staticmethod
    def neg(x: Lit) -> Lit:
        return (not x) if isinstance(x, bool) else x.negated()

    def all(self, xs: Iterable[Lit]) -> Lit:
        lits: list[cp_model.BoolVarT] = []
        for x in xs:
            if x is False:
                return False
            if x is not True:
                lits.append(x)
        if not lits:
            return True
        if len(lits) == 1:
            return lits[0]
        key = tuple(sorted({x.index for x in lits}))
        hit = self._and.get(key)
        if hit is not None:
            return hit
        z = self.m.new_bool_var("and")
        self.m.add_bool_and(lits).only_enforce_if(z)
        self.m.add_bool_or([x.negated() for x in lits]).only_enforce_if(z.negated())
        self._and[key] = z
        return z

    def any(self, xs: Iterable[Lit]) -> Lit:
        return self.neg(self.all(self.neg(x) for x in xs))

    def dl(self, s: TensorId) -> Lit:
        """``d_s``: the decision of a window storage, else whether it is a fixed drop."""
        d = self.v.drop
        return d[s] if s in d else (s in self.st.dfix)

    def ge(self, p: OpId, k: int) -> Lit:
        """``slot[p] >= k``"""
        f = self.v.slot[p]
        if isinstance(f, int):
            return f >= k
        key = (p, k)
        hit = self._ge.get(key)
        if hit is None:
            ds = self.dom[p]
            if k <= min(ds):
                hit = True
            elif k > max(ds):
                hit = False
            else:
                hit = self.m.new_bool_var(f"ge[{p},{k}]")
                self.m.add(f >= k).only_enforce_if(hit)
                self.m.add(f <= k - 1).only_enforce_if(hit.negated())
            self._ge[key] = hit
        return hit


def _conditional(n0: int, value: int, c: Lit) -> int | cp_model.LinearExprT | None:
    """``value`` when ``c``, else ``n0`` (the slot's neutral term); ``None`` when never."""
    if c is True:
        return value
    if c is False:
        return None
    return n0 + (value - n0) * c


def _slot_terms(m: cp_model.CpModel, L: _Literals, ix: BaseOrderIndex, p: OpId
                ) -> list[int | cp_model.LinearExprT]:
    """The terms whose minimum is the slot of affected re-run ``p``: its late readers, the
    in-place writes of what it reads, the slots of the re-runs reading its copies."""
    st, v, n0 = L.st, L.v, L.st.n0
    terms: list[int | cp_model.LinearExprT] = [n0]
    for s, step in st.trig[p]:
        t = _conditional(n0, step, L.dl(s))
        if t is not None:
            terms.append(t)
    for su, w in st.writer_terms(ix, p):
        t = _conditional(n0, w, L.neg(L.dl(su)) if su in st.wset else True)
        if t is not None:
            terms.append(t)
    for q, su in st.chain_in[p]:
        c = L.all([v.run[q], L.dl(su)])
        if c is False:
            continue
        sq = v.slot[q]
        if isinstance(sq, int):
            t = _conditional(n0, sq, c)
            assert t is not None
            terms.append(t)
            continue
        e = m.new_int_var(0, n0, f"e[{q}>{p}]")
        if c is True:
            m.add(e == sq)
        else:
            m.add(e == sq).only_enforce_if(c)
            m.add(e == n0).only_enforce_if(L.neg(c))
        terms.append(e)
    return terms


def _run_and_slots(m: cp_model.CpModel, L: _Literals, ix: BaseOrderIndex,
                   fixed_slot: Mapping[OpId, int]) -> None:
    """``run_p`` and ``slot_p`` of every re-run, consumers first (into ``L.v``)."""
    st, v = L.st, L.v
    for p in reversed(st.pall):
        if p not in st.aff:
            v.run[p] = True
            v.slot[p] = fixed_slot[p]
            continue
        v.run[p] = L.any([*(L.dl(s) for s, _ in st.trig[p]),
                          *(L.all([v.run[q], L.dl(su)]) for q, su in st.chain_in[p])])
        terms = _slot_terms(m, L, ix, p)
        consts = [t for t in terms if isinstance(t, int)]
        exprs = [t for t in terms if not isinstance(t, int)]
        if not exprs:
            v.slot[p] = min(consts)
            continue
        fp = m.new_int_var(min(min(L.dom[p]), st.n0), st.n0, f"slot[{p}]")
        m.add_min_equality(fp, [min(consts), *exprs])
        v.slot[p] = fp


# ------------------------------------------------------------------ items and segments
@dataclass
class _Items:
    """The window's symbolic items: bytes, liveness at a doubled coordinate (a literal),
    the coordinates each may be live at, and the break points of the segments."""

    sizes: list[int] = field(default_factory=list)
    live: list[Callable[[int], Lit]] = field(default_factory=list)
    extent: list[tuple[int, int]] = field(default_factory=list)
    bps: set[int] = field(default_factory=set)

    def add(self, size: int, live: Callable[[int], Lit], extent: tuple[int, int]) -> None:
        self.sizes.append(size)
        self.live.append(live)
        self.extent.append(extent)

    def add_domain(self, dom: Iterable[int]) -> None:
        for f in dom:
            self.bps.add(2 * f)
            self.bps.add(2 * f + 1)


def _window_drop_items(L: _Literals, ix: BaseOrderIndex, items: _Items) -> None:
    """A dropped window storage frees its bytes after its last forward reader."""
    for s in L.st.win:
        i = ix.index_of.get(s)
        if i is None:
            continue
        a, b = 2 * (int(ix.early_end_step[i]) + 1), 2 * int(ix.end_step[i]) + 1
        if a <= b:
            items.bps.update((a, b + 1))
            def live(c: int, a: int = a, b: int = b, s: TensorId = s) -> Lit:
                return L.dl(s) if a <= c <= b else False

            items.add(-int(ix.size_bytes[i]), live, (a, b))


def _kept_items(L: _Literals, ix: BaseOrderIndex, sym_kept: Sequence[int],
                items: _Items) -> None:
    """A kept storage a re-run reads lives until the last such re-run."""
    st, v = L.st, L.v
    for i in sym_kept:
        s = ix.planned[i]
        start = 2 * (int(ix.end_step[i]) + 1)
        items.bps.add(start)
        rs = st.readers_of[i]
        for q in rs:
            items.add_domain(L.dom[q])

        def kept_live(c: int, start: int = start, rs: list[OpId] = rs,
                      s: TensorId = s) -> Lit:
            if c < start:
                return False
            return L.all([L.neg(L.dl(s)),
                          L.any([L.all([v.run[q], L.ge(q, -(-c // 2))]) for q in rs])])

        items.add(int(ix.size_bytes[i]), kept_live,
                  (start, max(2 * f for q in rs for f in L.dom[q])))


def _copy_items(L: _Literals, ix: BaseOrderIndex,
                sym_copies: Sequence[tuple[OpId, TensorId, int]], items: _Items) -> None:
    """A copy lives from its re-run to its last reader (late readers and re-runs)."""
    st, v = L.st, L.v
    for p, sid, size in sym_copies:
        items.add_domain(L.dom[p])
        qs = st.copy_readers.get(sid, ()) if sid in st.union else ()
        for q in qs:
            items.add_domain(L.dom[q])
        ll = int(ix.last_late_step[ix.index_of[sid]])
        if ll >= 0:
            items.bps.add(2 * ll + 2)

        def copy_live(c: int, p: OpId = p, sid: TensorId = sid, qs: Sequence[OpId] = qs,
                      ll: int = ll) -> Lit:
            ends = [L.ge(p, c // 2) if c % 2 == 0 else False]
            ds = L.dl(sid)
            if ll >= 0 and c <= 2 * ll + 1:
                ends.append(ds)
            ends.extend(L.all([v.run[q], ds, L.ge(q, -(-c // 2))]) for q in qs)
            return L.all([v.run[p], L.neg(L.ge(p, c // 2 + 1)), L.any(ends)])

        items.add(size, copy_live,
                  (2 * min(L.dom[p]), max(2 * max(L.dom[p]), 2 * ll + 1,
                                          *(2 * f for q in qs for f in L.dom[q]))))


def _segment_cap(fixed: np.ndarray, items: _Items, a: int, b: int, cap: int,
                 current: np.ndarray | None) -> int | None:
    """The largest fixed live bytes the limit must hold over segment ``[a, b]`` with the
    window's items; ``None`` when the limit cannot bind there (no literals needed)."""
    seg = fixed[a:b + 1]
    base_max = int(seg[(a + 1) % 2::2].max()) if len(seg[(a + 1) % 2::2]) else None
    gaps = seg[a % 2::2]
    if current is not None and len(gaps):  # gap coordinates already over the bound
        gaps = gaps[current[a:b + 1][a % 2::2] <= cap]
    gap_max = int(gaps.max()) if len(gaps) else None
    known = [x for x in (base_max, gap_max) if x is not None]
    if not known:
        return None
    top_fixed = max(known)
    most = sum(size for size, (lo, hi) in zip(items.sizes, items.extent, strict=True)
               if size > 0 and lo <= b and hi >= a)
    return None if top_fixed + most <= cap else top_fixed


def _memory_segments(m: cp_model.CpModel, fixed: np.ndarray, items: _Items,
                     cap: int | None, current: np.ndarray | None
                     ) -> list[tuple[int, int, cp_model.LinearExprT]]:
    """The segments between break points, each with the bytes of the window's items live
    there, and the limit on each where it can bind."""
    top = len(fixed)
    pts = sorted(b for b in items.bps if 0 <= b < top)
    segments: list[tuple[int, int, cp_model.LinearExprT]] = []
    for k, a in enumerate(pts):
        b = (pts[k + 1] - 1) if k + 1 < len(pts) else a  # past the last: nothing moves
        top_fixed = None
        if cap is not None:
            top_fixed = _segment_cap(fixed, items, a, b, cap, current)
            if top_fixed is None:
                continue
        terms: list[int | cp_model.LinearExprT] = []
        for size, live in zip(items.sizes, items.live, strict=True):
            lv = live(a)
            if lv is True:
                terms.append(size)
            elif lv is not False:
                terms.append(size * lv)
        expr = sum(terms) if terms else 0
        segments.append((a, b, expr))
        if cap is not None and top_fixed is not None and terms:
            m.add(expr + top_fixed <= cap)
    return segments


# ------------------------------------------------------------------ build / solve / extract
@dataclass(frozen=True, slots=True)
class WindowModel:
    """The CP-SAT model of one window (see the module docstring).

    Attributes
    ----------
    model : cp_model.CpModel
    variables : WindowVariables
        The decisions, re-runs and slots.
    fixed : np.ndarray
        Live bytes of everything the window does not change, on the doubled axis.
    segments : list of (int, int, linear expression)
        ``[first, last]`` doubled coordinates and the bytes of the window's items live there
        (with a limit, only the segments where the limit can bind).
    cost : int or linear expression
        The objective (the re-run costs of the ops the window may re-run or not).
    fixed_drops : tuple of TensorId
        The drop set outside the window.
    """

    model: cp_model.CpModel
    variables: WindowVariables
    fixed: np.ndarray
    segments: list[tuple[int, int, cp_model.LinearExprT]]
    cost: int | cp_model.LinearExprT
    fixed_drops: tuple[TensorId, ...]


def build_window_model(ev: JitEvaluator, dropped: Sequence[TensorId],
                       window: Sequence[TensorId], limit_bytes: int | None, *,
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
        The objective is the evaluator's re-run costs (as CP-SAT integers,
        :meth:`~roam_core.recompute.objective.RerunCosts.integer`).
    current : np.ndarray, optional
        :func:`jit_accounting` of ``dropped``: gap coordinates over the limit there (the
        gap accounting is an upper bound) get no constraint; the evaluator checks them.

    Raises
    ------
    GraphError
        ``dropped | window`` is not a valid drop set.
    """
    ix = ev.index
    st = _structure(ev, dropped, window)
    fixed_slot, dom = _slot_domains(ix, st)
    fixed, sym_kept, sym_copies = _fixed_part(ev, st, fixed_slot)
    m = cp_model.CpModel()
    v = WindowVariables({s: m.new_bool_var(f"d[{s}]") for s in st.win})
    L = _Literals(m, st, v, dom)
    _run_and_slots(m, L, ix, fixed_slot)
    items = _Items()
    _window_drop_items(L, ix, items)
    _kept_items(L, ix, sym_kept, items)
    _copy_items(L, ix, sym_copies, items)
    cap = None if limit_bytes is None else limit_bytes - ev.resident
    segments = _memory_segments(m, fixed, items, cap, current)
    icost = ev.costs.integer
    cost = sum(icost(ev.cost[p]) * v.run[p] for p in st.pall
               if p in st.aff and not isinstance(v.run[p], bool))
    cost = cost + sum(icost(ev.cost[p]) for p in st.pall if v.run[p] is True)
    if not isinstance(cost, int):
        m.minimize(cost)
    cur = set(dropped)
    for s, d in v.drop.items():
        m.add_hint(d, int(s in cur))
    return WindowModel(m, v, fixed, segments, cost, tuple(sorted(st.dfix)))


def solve_window_model(wm: WindowModel, *, time_limit_s: float
                       ) -> tuple[TensorId, ...] | None:
    """Solve one window (one worker, fixed seed, ``time_limit_s`` deterministic seconds).

    Returns
    -------
    tuple of TensorId or None
        The drop set it chose (the fixed drops, then the window's chosen ones), or ``None``
        without a solution.
    """
    # CPU time, not the wall clock, is the safety net: a loaded machine gets the same drops
    solver = make_solver(time_limit_s=time_limit_s, cpu_guard=True)
    outcome = solve_with_stop(solver, wm.model)
    if outcome.status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
        return None
    return _extract(solver, wm)


def _extract(solver: cp_model.CpSolver, wm: WindowModel) -> tuple[TensorId, ...]:
    chosen = [s for s, d in wm.variables.drop.items() if solver.boolean_value(d)]
    return (*wm.fixed_drops, *chosen)
