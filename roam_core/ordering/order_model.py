"""The CP-SAT model of an :class:`~roam_core.ordering.order_problem.OrderProblem`.

Formulation (time-indexed, one op per step, ROAM's "ss" mode)
------------------------------------------------------------
For op ``i`` and local step ``t`` a Boolean ``done[i, t]`` says that ``i`` ran at or before
``t``.  It is fixed to 0 before ``i``'s window (``|local ancestors|``) and to 1 from its end
(``n - 1 - |local descendants|``) on, and is monotone in ``t``.

* one op per step: ``sum_i done[i, t] = t + 1``;
* precedence ``a -> b``: ``done[b, t] => done[a, t - 1]``;
* liveness (lower envelope; the objective pushes it down so it is exact at the optimum):
  ``live[s, t] >= done[p, t] - done[u, t - 1]`` for every user ``u`` inside,
  ``live[s, t] >= done[p, t]`` when ``live_after``, and ``live[s, t] >= x[p, t]`` for a
  storage nobody reads;
* ``peak >= const + sum_s size_s * live[s, t]`` for every step; minimise ``peak``.

Sizes are divided by their GCD.  The search is warm-started (``add_hint``) from the base
order restricted to the range.  Build, solve and extract are separate functions:
:func:`build_order_model` builds the model into an :class:`OrderModel` (the model and the
variables read back), :func:`roam_core.ordering.order_ilp.solve_order_problem` solves it and
:func:`extract_order` reads the local orders back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from roam_core.base.cancel import CancelFlag
from roam_core.base.cpsat_steps import StepLadder
from roam_core.ordering.order_problem import (
    OrderProblem,
    RangeProblem,
    StorageTerm,
    range_profile,
)

if TYPE_CHECKING:  # OR-Tools is imported when a model is built
    from ortools.sat.python import cp_model

__all__ = ["ModelCancelled", "OrderModel", "build_order_model", "extract_order"]


def _closure_windows(preds: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """Local ``lo`` (= #ancestors) and ``hi`` (= n - 1 - #descendants) of every op."""
    n = len(preds)
    anc = [0] * n
    for i in range(n):  # local indices follow a valid order, so preds come first
        m = 0
        for p in preds[i]:
            m |= anc[p] | (1 << p)
        anc[i] = m
    desc = [0] * n
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    for i in reversed(range(n)):
        m = 0
        for s in succs[i]:
            m |= desc[s] | (1 << s)
        desc[i] = m
    return [a.bit_count() for a in anc], [n - 1 - d.bit_count() for d in desc]



@dataclass(frozen=True, slots=True)
class OrderModel:
    """A built CP-SAT model plus the variables needed to read a solution back.

    Parameters
    ----------
    model : cp_model.CpModel
        The model.
    peak : IntVar
        The objective (in units of ``scale`` bytes).
    done : list of list of dict
        Per range, per op: step -> the Boolean "ran at or before this step" (inside the
        op's window only).
    lo, hi : list of list of int
        Per range, per op: its window of steps ``[lo, hi)``.
    scale : int
        Bytes per model unit (the gcd of every size).
    active : list of int
        Indices of the ranges that are modelled (more than one op).
    fixed_peak_bytes : int
        Peak of the ranges that are not modelled.
    """

    model: cp_model.CpModel
    peak: cp_model.IntVar
    done: list[list[dict[int, cp_model.IntVar]]]
    lo: list[list[int]]
    hi: list[list[int]]
    scale: int
    active: list[int]
    fixed_peak_bytes: int


class ModelCancelled(Exception):
    """Raised inside :func:`build_order_model` when its ``cancel`` says stop."""


def build_order_model(problem: OrderProblem,
                      cancel: CancelFlag | None = None) -> OrderModel:
    """The CP-SAT model of ``problem`` (see the module docstring), hinted with the base order.

    Steps, per modelled range: step variables, one op per step and predecessors first
    (:class:`~roam_core.base.cpsat_steps.StepLadder`), the memory of every step
    (:func:`_step_memory`), then ``peak >=`` each step's memory and the base-order hint
    (:func:`_peak_and_hint`).  ``cancel`` is polled while the liveness terms are built.
    """
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    scale, active, fixed_peak, ub = _scale_and_bounds(problem)
    peak = m.new_int_var(fixed_peak // scale, ub, "peak")
    all_done: list[list[dict[int, cp_model.IntVar]]] = []
    all_lo: list[list[int]] = []
    all_hi: list[list[int]] = []
    for k, r in enumerate(problem.ranges):
        lo, hi = _closure_windows(r.preds)
        all_lo.append(lo)
        all_hi.append(hi)
        if k not in active:
            all_done.append([{} for _ in r.ops])
            continue
        steps = StepLadder(m, lo, hi, f"d{k}_")
        steps.add_schedule(r.preds)
        done = steps.done
        all_done.append(done)
        const_t, mem = _step_memory(m, k, r, scale, steps, cancel)
        _peak_and_hint(m, peak, const_t, mem, done)
    m.minimize(peak)
    return OrderModel(m, peak, all_done, all_lo, all_hi, scale, active, fixed_peak)


def _scale_and_bounds(problem: OrderProblem) -> tuple[int, list[int], int, int]:
    """Step 0: the byte unit (gcd of every size), the modelled ranges, the peak of the
    others and an upper bound on the peak (in units)."""
    sizes = [t.size_bytes for r in problem.ranges for t in r.terms]
    sizes += [r.const_bytes for r in problem.ranges]
    scale = 0
    for s in sizes:
        scale = math.gcd(scale, s)
    scale = max(scale, 1)
    active = [k for k, r in enumerate(problem.ranges)
              if len(r.ops) > 1 and len(r.ops) <= problem.config.max_range_ops]
    fixed_peak = 0
    for k, r in enumerate(problem.ranges):
        if k not in active:
            fixed_peak = max(fixed_peak, max(range_profile(r, range(len(r.ops)))))
    ub = max([fixed_peak] + [r.const_bytes + sum(t.size_bytes for t in r.terms)
                             for r in problem.ranges]) // scale
    return scale, active, fixed_peak, ub


def _step_memory(m: cp_model.CpModel, k: int, r: RangeProblem, scale: int, steps: StepLadder,
                 cancel: CancelFlag | None,
                 ) -> tuple[list[int], list[list[tuple[int, cp_model.IntVar]]]]:
    """Step 3: the memory of every step: constant bytes plus ``size * live`` for each
    storage whose liveness at that step depends on the order (one literal per term and
    step, forced true by each way the storage can be live)."""
    n = len(r.ops)
    mem: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(n)]
    const_t = [r.const_bytes // scale] * n
    for j, term in enumerate(r.terms):
        if cancel is not None and cancel():
            raise ModelCancelled
        w = term.size_bytes // scale
        for t in range(n):
            clauses = _live_clauses(term, t, steps)
            if clauses is True:
                const_t[t] += w
                continue
            if not clauses:
                continue
            live = m.new_bool_var(f"l{k}_{j}_{t}")
            for lits in clauses:
                m.add_bool_or([x.negated() for x in lits] + [live])
            mem[t].append((w, live))
    return const_t, mem


def _live_clauses(term: StorageTerm, t: int, steps: StepLadder,
                  ) -> list[list[cp_model.BoolVarT]] | bool:
    """When ``term`` is live at step ``t``: ``True`` (always), or conjunctions of literals
    (live if any one holds; empty: never)."""
    # conditions: each is a list of (lit_or_bool, wanted value) -> live if all hold
    conds: list[list[tuple[cp_model.IntVar | bool, bool]]] = []
    created = True if term.producer is None else steps.lit(term.producer, t)
    if created is False:
        return []
    if term.live_after:
        conds.append([(created, True)])
    elif term.users:
        for u in term.users:
            conds.append([(created, True), (steps.lit(u, t - 1), False)])
    else:
        p = term.producer
        assert p is not None
        conds.append([(created, True), (steps.lit(p, t - 1), False)])
    clauses: list[list[cp_model.BoolVarT]] = []
    for cond in conds:
        lits: list[cp_model.BoolVarT] = []
        dead = False
        for value, want in cond:
            if value is True or value is False:
                if value != want:
                    dead = True
                    break
                continue
            lits.append(value if want else value.negated())
        if dead:
            continue
        if not lits:
            return True
        clauses.append(lits)
    return clauses


def _peak_and_hint(m: cp_model.CpModel, peak: cp_model.IntVar, const_t: Sequence[int],
                   mem: Sequence[Sequence[tuple[int, cp_model.IntVar]]],
                   done: list[dict[int, cp_model.IntVar]]) -> None:
    """Step 4: ``peak`` bounds every step's memory; hint the base order (the identity)."""
    for t in range(len(const_t)):
        m.add(peak >= const_t[t] + sum(w * v for w, v in mem[t]))
    for i in range(len(done)):
        for t, v in done[i].items():
            m.add_hint(v, t >= i)


def extract_order(problem: OrderProblem, om: OrderModel,
                  solver: cp_model.CpSolver) -> list[list[int]]:
    """Local orders of every range from a solved model (identity for unmodelled ranges)."""
    out = []
    for k, r in enumerate(problem.ranges):
        n = len(r.ops)
        if k not in om.active:
            out.append(list(range(n)))
            continue
        lo, hi, done = om.lo[k], om.hi[k], om.done[k]
        step = []
        for i in range(n):
            p = hi[i]
            for t in range(lo[i], hi[i]):
                if solver.boolean_value(done[i][t]):
                    p = t
                    break
            step.append((p, i))
        out.append([i for _, i in sorted(step)])
    return out

