"""Restriction bounds: CP-SAT lower bounds on the peak of every order, from any op subset.

The restricted minimum of a group ``G`` (the restriction argument of
:mod:`roam_core.oracle.bounds.masks`) bounds the peak of every valid order, and so does any
lower bound CP-SAT proves on it (its ``best_objective_bound``, valid at any time limit).
:func:`restriction_bound` solves one group; :func:`window_bound` solves windows of an order
around its peak steps.

Model (CP-SAT, time-indexed over the ``k = |G|`` local steps)
------------------------------------------------------------
``done[j, t]``: op ``j`` of ``G`` is among the first ``t + 1``; fixed outside the window
``[#G-ancestors, k - 1 - #G-descendants]``, monotone, ``sum_j done[j, t] = t + 1``, and
``done[b, t] => done[a, t - 1]`` for each (transitively reduced) local precedence ``a -> b``.
Storages with equal ``(started, pending)`` are merged; a storage is *constant* when both
conditions hold at every step (live across the group) and dropped when ``started`` is empty.
For the others, ``live >= S and P`` with ``S = OR done[j, t]`` over the minimal ops of
``started`` and ``P = OR not done[u, t - 1]`` over the maximal ops of ``pending`` (lower
envelopes; the objective pushes them down, so they are exact at an optimum), and
``peak >= const + sum size * live``.  Minimise ``peak``.  The hint is the given order
restricted to ``G``.

Every bound here is held against exact optima (brute force and monolithic CP-SAT) on random
small graphs in ``tests/roam_core/oracle/test_proven_bounds.py``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from roam_core.base.cancel import CancelToken, as_cancel_flag, is_cancelled
from roam_core.base.cpsat_steps import StepLadder
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId
from roam_core.model.reach import Reachability, iter_bits, reachability
from roam_core.oracle.bounds.masks import StorageMasks, storage_masks
from roam_core.oracle.simulate import simulate

if TYPE_CHECKING:  # OR-Tools is imported when a model is built
    from ortools.sat.python.cp_model import BoolVarT, IntVar

    _Lit = BoolVarT | bool  # a model literal, or a constant folded away

    from roam_core.base.cpsat import SolveOutcome

__all__ = ["RestrictionBound", "peak_window_groups", "restriction_bound", "window_bound"]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RestrictionBound:
    """The outcome of one :func:`restriction_bound` solve.

    Parameters
    ----------
    bound_bytes : int
        Proven lower bound on the peak of every valid order (resident bytes included).
    objective_bytes : int or None
        Best restricted peak CP-SAT found (resident included): an upper bound on the
        restricted minimum, *not* a peak of the graph.
    status : str
        ``"optimal"`` (``bound_bytes`` is the restricted minimum), ``"feasible"``,
        ``"unknown"`` or ``"skipped"`` (group too large).
    num_ops : int
        Ops in the group.
    num_terms : int
        Variable storage classes modelled.
    wall_time_s : float
        Seconds spent (build + solve).
    label : str
        What the group was (e.g. ``"window 812+-60"``).
    """

    bound_bytes: int
    objective_bytes: int | None
    status: str
    num_ops: int
    num_terms: int
    wall_time_s: float
    label: str = ""


def restriction_bound(
    graph: Graph,
    group: Iterable[OpId],
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    reach: Reachability | None = None,
    masks: StorageMasks | None = None,
    hint_order: Sequence[OpId] | None = None,
    time_limit_s: float = 2.0,
    max_ops: int = 400,
    random_seed: int = 0,
    label: str = "",
    cancel: CancelToken = None,
) -> RestrictionBound:
    """A proven lower bound on every order's peak from the restriction to ``group``.

    Parameters
    ----------
    graph : Graph
        The graph (data and control edges are the precedences).
    group : iterable of OpId
        Any set of ops.
    alignment_bytes : int
        Storage rounding (as in :func:`~roam_core.oracle.simulate.simulate`).
    reach, masks : optional
        Precomputed :func:`~roam_core.model.reach.reachability` and
        :func:`~roam_core.oracle.bounds.masks.storage_masks`.
    hint_order : sequence of OpId, optional
        A valid order of the graph; its restriction to ``group`` warm-starts the search.
    time_limit_s : float
        CP-SAT *deterministic* time limit (the bound is valid whenever it stops).
    max_ops : int
        Larger groups are skipped (the bound is then the resident bytes).
    random_seed : int
        CP-SAT seed (one worker: deterministic).
    label : str
        Copied into the result.
    cancel : CancelToken
        Says stop early (the bound proven so far is kept).

    Returns
    -------
    RestrictionBound

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> g = diamond()
    >>> restriction_bound(g, g.op_ids, alignment_bytes=1).bound_bytes  # exact with all ops
    350
    """
    from roam_core.base.cpsat import make_solver, solve_with_stop

    t0 = time.perf_counter()
    r = reach if reach is not None else reachability(graph)
    sm = masks if masks is not None else storage_masks(graph, alignment_bytes, reach=r)
    ops = sorted(dict.fromkeys(group), key=r.index.__getitem__)
    k = len(ops)
    if k == 0 or k > max_ops:
        return RestrictionBound(sm.resident_bytes, None, "skipped" if k else "optimal", k, 0,
                                time.perf_counter() - t0, label)
    # local topological order: follow the hint when given (so the hint is the identity)
    if hint_order is not None:
        hp = {op: i for i, op in enumerate(hint_order)}
        ops.sort(key=hp.__getitem__)
    # build
    grp = _local_group(r, ops)
    const, classes = _storage_classes(sm, grp.mask)
    scale = max(math.gcd(0, const, *classes.values()), 1)
    rm = _RestrictionModel(grp)
    rm.add_order()
    const_t, mem = rm.add_storage_terms(classes, const, scale)
    rm.minimise_peak(const_t, mem, (const + sum(classes.values())) // scale)
    if hint_order is not None:
        rm.add_hint()
    # solve
    solver = make_solver(time_limit_s=time_limit_s, random_seed=random_seed, cpu_guard=True)
    out = solve_with_stop(solver, rm.model, cancel=as_cancel_flag(cancel))
    # extract
    return _extract(out, sm.resident_bytes, max(const_t), scale, k, len(classes),
                    time.perf_counter() - t0, label)


@dataclass(frozen=True, slots=True)
class _LocalGroup:
    """A group in local terms: op ``j`` is the ``j``-th of its ops (a topological order of
    the group), precedences transitive through ops outside it."""

    gidx: tuple[int, ...]  # program index of each op
    pos: dict[int, int]  # program index -> local op
    mask: int  # the group's ops as a global mask
    anc: tuple[int, ...]  # local mask of each op's ancestors in the group
    desc: tuple[int, ...]  # local mask of each op's descendants in the group
    lo: tuple[int, ...]  # the first step each op can run at (its ancestors run before)
    hi: tuple[int, ...]  # the last step each op can run at (its descendants run after)
    preds: tuple[tuple[int, ...], ...]  # transitive reduction of the local precedences

    @property
    def k(self) -> int:
        """Ops in the group."""
        return len(self.gidx)


def _local_group(r: Reachability, ops: Sequence[OpId]) -> _LocalGroup:
    k = len(ops)
    gidx = [r.index[o] for o in ops]
    pos = {g: j for j, g in enumerate(gidx)}
    gm = 0
    for g in gidx:
        gm |= 1 << g
    anc_l = [0] * k
    desc_l = [0] * k
    for j, g in enumerate(gidx):
        for i in iter_bits(r.ancestors[g] & gm):
            anc_l[j] |= 1 << pos[i]
        for i in iter_bits(r.descendants[g] & gm):
            desc_l[j] |= 1 << pos[i]
    preds: list[tuple[int, ...]] = []
    for j in range(k):
        cover = anc_l[j]
        for i in iter_bits(anc_l[j]):
            cover &= ~anc_l[i]
        preds.append(tuple(iter_bits(cover)))
    return _LocalGroup(tuple(gidx), pos, gm, tuple(anc_l), tuple(desc_l),
                       tuple(a.bit_count() for a in anc_l),
                       tuple(k - 1 - d.bit_count() for d in desc_l), tuple(preds))


def _storage_classes(sm: StorageMasks, gm: int) -> tuple[int, dict[tuple[int, int], int]]:
    """``(constant bytes, {(started, pending) within the group: bytes})``: the storages live
    at every step of the group, and the others merged by their masks on the group (``-1``:
    a graph output, always pending); storages the group never starts are dropped."""
    const = 0
    classes: dict[tuple[int, int], int] = {}
    for size, st, pd in zip(sm.sizes, sm.started, sm.pending, strict=True):
        st &= gm
        if not st:
            continue
        pdm = -1 if pd == -1 else pd & gm
        if pdm == 0:
            continue
        if st == gm and (pdm == -1 or pdm == gm):
            const += size
            continue
        key = (st, pdm)
        classes[key] = classes.get(key, 0) + size
    return const, classes


class _RestrictionModel:
    """The CP-SAT model of one group's restriction (module docstring), built in steps:
    :meth:`add_order`, :meth:`add_storage_terms`, :meth:`minimise_peak`, :meth:`add_hint`."""

    def __init__(self, grp: _LocalGroup) -> None:
        from ortools.sat.python import cp_model

        self.grp = grp
        self.model = cp_model.CpModel()
        self.done: list[dict[int, IntVar]] = [{} for _ in range(grp.k)]
        self._started: dict[tuple[int, int], IntVar] = {}  # OR literals, by (mask, step)
        self._pending: dict[tuple[int, int], IntVar] = {}

    def add_order(self) -> None:
        """The ``done`` variables: monotone, ``t + 1`` ops done after step ``t``, and each
        local precedence kept (:class:`~roam_core.base.cpsat_steps.StepLadder`)."""
        self.steps = StepLadder(self.model, self.grp.lo, self.grp.hi, "d")
        self.steps.add_schedule(self.grp.preds)
        self.done = self.steps.done

    def lit(self, j: int, t: int) -> _Lit:
        """``done[j, t]`` (a constant outside op ``j``'s window)."""
        return self.steps.lit(j, t)

    def add_storage_terms(self, classes: dict[tuple[int, int], int], const: int, scale: int,
                          ) -> tuple[list[int], list[list[tuple[int, IntVar]]]]:
        """Per step: the constant bytes (in units of ``scale``) and the ``(weight, live)``
        terms of the storage classes that may or may not be live there."""
        k = self.grp.k
        const_t = [const // scale] * k
        mem: list[list[tuple[int, IntVar]]] = [[] for _ in range(k)]
        for (st, pdm), size in classes.items():
            w = size // scale
            mins = self._minimal_ops(st)
            maxs = None if pdm == -1 else self._maximal_ops(pdm)
            for t in range(k):
                s_lit = self._or_lit([self.lit(j, t) for j in mins], self._started, (st, t))
                if s_lit is False:
                    continue
                if maxs is None:
                    p_lit: _Lit = True
                else:
                    p_lit = self._or_lit([_neg(self.lit(u, t - 1)) for u in maxs],
                                         self._pending, (pdm, t))
                if p_lit is False:
                    continue
                if s_lit is True and p_lit is True:
                    const_t[t] += w
                    continue
                live = self.model.new_bool_var("l")
                clause: list[_Lit] = [live]
                for x in (s_lit, p_lit):
                    if x is not True:
                        clause.append(_neg(x))
                self.model.add_bool_or(clause)
                mem[t].append((w, live))
        return const_t, mem

    def minimise_peak(self, const_t: Sequence[int], mem: Sequence[Sequence[tuple[int, IntVar]]],
                      ub: int) -> None:
        """``peak >= const + sum size * live`` at every step; minimise ``peak``."""
        m = self.model
        peak = m.new_int_var(max(const_t), max(ub, max(const_t)), "peak")
        for t in range(self.grp.k):
            m.add(peak >= const_t[t] + sum(w * v for w, v in mem[t]))
        m.minimize(peak)

    def add_hint(self) -> None:
        """The local order itself (the hint's restriction, see :func:`restriction_bound`)."""
        for j in range(self.grp.k):
            for t, v in self.done[j].items():
                self.model.add_hint(v, t >= j)

    def _minimal_ops(self, mask: int) -> list[int]:
        """The local ops of global ``mask`` with no ancestor in it."""
        ops = [self.grp.pos[i] for i in iter_bits(mask)]
        inside = set(ops)
        anc = self.grp.anc
        return [j for j in ops if not (anc[j] and any(i in inside for i in iter_bits(anc[j])))]

    def _maximal_ops(self, mask: int) -> list[int]:
        """The local ops of global ``mask`` with no descendant in it."""
        ops = [self.grp.pos[i] for i in iter_bits(mask)]
        inside = set(ops)
        desc = self.grp.desc
        return [u for u in ops if not (desc[u] and any(i in inside for i in iter_bits(desc[u])))]

    def _or_lit(self, lits: list[_Lit], cache: dict[tuple[int, int], IntVar],
                key: tuple[int, int]) -> _Lit:
        """A literal implied by each of ``lits`` (True / False constants folded)."""
        if any(x is True for x in lits):
            return True
        lits = [x for x in lits if x is not False]
        if not lits:
            return False
        if len(lits) == 1:
            return lits[0]
        if key in cache:
            return cache[key]
        aux = self.model.new_bool_var(f"or{len(cache)}_{key[1]}")
        for x in lits:
            self.model.add_implication(x, aux)
        cache[key] = aux
        return aux


def _neg(x: _Lit) -> _Lit:
    if x is True:
        return False
    if x is False:
        return True
    return x.negated()


def _extract(out: SolveOutcome, resident: int, const_peak: int, scale: int, k: int,
             terms: int, wall_time_s: float, label: str) -> RestrictionBound:
    """The bound (in bytes, resident included) from CP-SAT's outcome: the proven objective
    bound, or the objective itself at an optimum; the constant steps without a solution."""
    if out.objective is None:
        return RestrictionBound(resident + const_peak * scale, None, out.status, k, terms,
                                wall_time_s, label)
    bound = math.ceil(out.best_bound - 1e-6) * scale if out.best_bound is not None else 0
    obj = round(out.objective) * scale
    status = "optimal" if out.status == "optimal" else out.status
    if status == "optimal":
        bound = obj
    _logger.debug("restriction bound %s: %d ops, %d classes, %s, bound %d",
                  label, k, terms, status, bound + resident)
    return RestrictionBound(bound + resident, obj + resident, status, k, terms, wall_time_s,
                            label)


def peak_window_groups(
    order: Sequence[OpId],
    live_bytes: Sequence[int],
    *,
    half_width: int = 60,
    max_windows: int = 3,
) -> list[tuple[str, tuple[OpId, ...]]]:
    """Windows of ``order`` centred on its highest steps (distinct windows, highest first).

    Each is ``(label, ops)`` with the ops at steps ``[c - half_width, c + half_width]``.

    Examples
    --------
    >>> peak_window_groups("abcde", [1, 5, 2, 4, 0], half_width=1, max_windows=2)
    [('window 1+-1', ('a', 'b', 'c')), ('window 3+-1', ('c', 'd', 'e'))]
    """
    n = len(order)
    ranked = sorted(range(n), key=lambda i: (-live_bytes[i], i))
    out: list[tuple[str, tuple[OpId, ...]]] = []
    covered: list[tuple[int, int]] = []
    for c in ranked:
        if len(out) >= max_windows:
            break
        if any(a <= c < b for a, b in covered):
            continue
        a, b = max(0, c - half_width), min(n, c + half_width + 1)
        covered.append((a, b))
        out.append((f"window {c}+-{half_width}", tuple(order[a:b])))
    return out


def window_bound(
    graph: Graph,
    order: Sequence[OpId],
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    half_widths: Sequence[int] = (30, 60),
    max_windows: int = 2,
    time_limit_s: float = 2.0,
    reach: Reachability | None = None,
    masks: StorageMasks | None = None,
    deadline: float | None = None,
    cancel: CancelToken = None,
) -> tuple[int, list[RestrictionBound]]:
    """The best :func:`restriction_bound` over windows of ``order`` around its peak steps.

    Parameters
    ----------
    graph : Graph
        The graph.
    order : sequence of OpId
        A valid order (typically the plan); the windows are cut from it and it is the hint.
        The bound holds for every order, whichever order the windows come from.
    alignment_bytes : int
        Storage rounding.
    half_widths : sequence of int
        Window half-widths tried (each window has ``2 * w + 1`` steps).
    max_windows : int
        Distinct peak windows per width.
    time_limit_s : float
        Deterministic CP-SAT limit per window.
    reach, masks : optional
        Precomputed reachability / :func:`~roam_core.oracle.bounds.masks.storage_masks`.
    deadline : float, optional
        ``time.monotonic()`` after which no new window is started.
    cancel : CancelToken
        Says stop.

    Returns
    -------
    (int, list of RestrictionBound)
        The best bound (resident bytes included) and every window's record.
    """
    r = reach if reach is not None else reachability(graph)
    sm = masks if masks is not None else storage_masks(graph, alignment_bytes, reach=r)
    prof = simulate(graph, order, alignment_bytes=alignment_bytes)
    best = sm.resident_bytes
    records: list[RestrictionBound] = []
    for w in half_widths:
        for label, ops in peak_window_groups(order, prof.live_bytes, half_width=w,
                                             max_windows=max_windows):
            if is_cancelled(cancel) or (deadline is not None and time.monotonic() > deadline):
                return best, records
            rb = restriction_bound(graph, ops, alignment_bytes, reach=r, masks=sm,
                                   hint_order=order, time_limit_s=time_limit_s, label=label,
                                   cancel=cancel)
            records.append(rb)
            best = max(best, rb.bound_bytes)
            if best >= prof.peak_bytes:
                return best, records
    return best, records
