"""CP-SAT ordering of one sub-task: the exact minimum-peak order of its ops, surroundings fixed.

The sub-problem
---------------
A sub-task owns some ops of a valid *base* order.  Its ops occupy one or more maximal runs of
consecutive positions (*ranges*; a ROAM ring has a forward and a backward range).  The solver
may permute the ops inside each range, respecting the precedences among them, and nothing
else moves.  Any such permutation keeps the whole order valid: a path between two ops of a
range can only pass through ops placed between them, which are in the range too.

Memory at a step of a range is ``const + sum(size * live)`` over the storages the range
touches (*terms*); ``const`` is every other storage live across the whole range (boundary
tensors that are only passed through, and those touched elsewhere).  A term is

* created inside (CIFI/CIFO) or outside (COFI, ``producer is None``);
* live until its last user inside, or to the end of the range when it is read after the range
  or is a graph output (``live_after``: created inside and freed outside).

The objective, the peak over every step of every range, therefore equals the simulated peak
of the merged order at those steps (:func:`range_profile` is the same sum in plain Python and
the tests check both against :func:`roam_core.oracle.simulate.simulate`).

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
order restricted to the range.  Build, solve and extract are separate functions;
:func:`solve_order_problem` runs them on plain picklable data, so it can run in a worker
process.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roam_core.base.status import SolveStatus
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, TensorId, round_size
from roam_core.oracle.simulate import Lifetime, lifetimes
from roam_core.ordering.config import OrderSolverConfig

__all__ = [
    "OrderModel",
    "OrderProblem",
    "OrderResult",
    "RangeProblem",
    "StorageTerm",
    "build_order_model",
    "build_order_problem",
    "extract_order",
    "hint_is_optimal",
    "merge_all_orders",
    "merge_orders",
    "needs_solver",
    "range_beats",
    "range_profile",
    "solve_order",
    "solve_order_problem",
]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StorageTerm:
    """A storage whose liveness inside a range depends on the range's order.

    Parameters
    ----------
    size_bytes : int
        Rounded bytes.
    producer : int or None
        Local index of the producing op; ``None`` when it was created before the range.
    users : tuple of int
        Local indices of the ops inside the range that read or write it.
    live_after : bool
        Still live after the range (read later, or a graph output).
    """

    size_bytes: int
    producer: int | None
    users: tuple[int, ...]
    live_after: bool


@dataclass(frozen=True, slots=True)
class RangeProblem:
    """One run of consecutive positions that the solver may permute.

    Parameters
    ----------
    start : int
        Position of the range's first step in the base order.
    ops : tuple of OpId
        The ops of the range in base (hint) order; local index ``i`` is ``ops[i]``.
    preds : tuple of tuple of int
        Local direct predecessors of each op.
    terms : tuple of StorageTerm
        The storages modelled.
    const_bytes : int
        Bytes live across the whole range that are not terms (resident bytes excluded).
    """

    start: int
    ops: tuple[OpId, ...]
    preds: tuple[tuple[int, ...], ...]
    terms: tuple[StorageTerm, ...]
    const_bytes: int


@dataclass(frozen=True, slots=True)
class OrderProblem:
    """Everything one sub-task solve needs, as plain picklable data.

    Parameters
    ----------
    task_id : str
        The sub-task.
    ranges : tuple of RangeProblem
        Its ranges.
    floor_bytes : int
        Stop once the peak (non-resident bytes) is at or below this (0: prove optimality).
    config : OrderSolverConfig
        Solver settings.
    """

    task_id: str
    ranges: tuple[RangeProblem, ...]
    floor_bytes: int = 0
    config: OrderSolverConfig = field(default_factory=OrderSolverConfig)

    @property
    def num_ops(self) -> int:
        """Ops in the sub-task."""
        return sum(len(r.ops) for r in self.ranges)


@dataclass(frozen=True, slots=True)
class OrderResult:
    """The outcome of one sub-task solve.

    Parameters
    ----------
    task_id : str
        The sub-task.
    orders : tuple of tuple of OpId
        The new order of each range (same ops as ``RangeProblem.ops``).
    peak_bytes : int
        Peak (non-resident bytes) of the returned orders over the sub-task's steps.
    hint_peak_bytes : int
        The same for the base order.
    status : SolveStatus
        ``OPTIMAL``, ``FEASIBLE``, ``HINT`` (the solver found nothing better than the
        warm start), ``TRIVIAL`` (nothing to permute), ``BOUND`` (already at the floor),
        ``CANCELLED``, ``UNKNOWN``.
    best_bound_bytes : int or None
        Proven lower bound on the sub-task's peak (non-resident bytes), if any.
    wall_time_s : float
        Seconds spent building and solving.
    num_ops : int
        Ops in the sub-task.
    """

    task_id: str
    orders: tuple[tuple[OpId, ...], ...]
    peak_bytes: int
    hint_peak_bytes: int
    status: SolveStatus
    best_bound_bytes: int | None
    wall_time_s: float
    num_ops: int


# ----------------------------------------------------------------------- problem
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


def range_profile(rng: RangeProblem, local_order: Sequence[int]) -> list[int]:
    """Live bytes (``const`` included) at each step of a range run in ``local_order``.

    ``local_order[k]`` is the local index of the op at step ``k``.
    """
    n = len(rng.ops)
    pos = [0] * n
    for k, i in enumerate(local_order):
        pos[i] = k
    diff = [rng.const_bytes] + [0] * n
    for term in rng.terms:
        s = 0 if term.producer is None else pos[term.producer]
        if term.live_after:
            e = n
        elif term.users:
            e = max(pos[u] for u in term.users) + 1
        else:
            e = s + 1
        e = max(e, s + 1)
        diff[s] += term.size_bytes
        diff[e] -= term.size_bytes
    out, acc = [], 0
    for k in range(n):
        acc += diff[k]
        out.append(acc)
    return out


def build_order_problem(
    graph: Graph,
    order: Sequence[OpId],
    op_ids: Sequence[OpId],
    *,
    task_id: str = "task",
    config: OrderSolverConfig | None = None,
    floor_bytes: int = 0,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    base_lifetimes: Mapping[TensorId, Lifetime] | None = None,
    base_live_bytes: Sequence[int] | None = None,
    base_positions: Mapping[OpId, int] | None = None,
) -> OrderProblem:
    """The plain-data problem of re-ordering ``op_ids`` inside a valid ``order``.

    Parameters
    ----------
    graph : Graph
        The graph (its control edges count as precedences).
    order : sequence of OpId
        A valid order of every op: the base order and the hint.
    op_ids : sequence of OpId
        The sub-task's ops; each maximal run of consecutive positions becomes a range.
    task_id, config, floor_bytes
        Copied into the problem.
    alignment_bytes : int
        Storage rounding.
    base_lifetimes, base_live_bytes : optional
        ``lifetimes(graph, order)`` and ``simulate(graph, order).live_bytes`` if already known.
    base_positions : mapping of OpId to int, optional
        ``{op: i for i, op in enumerate(order)}`` if already known (a caller building one
        problem per sub-task passes it once, so the work per sub-task is its own size, not
        the graph's).

    Returns
    -------
    OrderProblem
    """
    pos = base_positions if base_positions is not None else {
        op: i for i, op in enumerate(order)}
    lts = base_lifetimes if base_lifetimes is not None else lifetimes(graph, order)
    if base_live_bytes is None:
        from roam_core.oracle.simulate import simulate

        base_live_bytes = simulate(graph, order, alignment_bytes=alignment_bytes,
                                   lifetimes_override=lts).live_bytes
    outputs = set(graph.outputs)
    positions = sorted({pos[o] for o in op_ids})
    runs: list[tuple[int, int]] = []
    for p in positions:
        if runs and runs[-1][1] == p:
            runs[-1] = (runs[-1][0], p + 1)
        else:
            runs.append((p, p + 1))
    ranges = []
    for a, b in runs:
        ops = tuple(order[a:b])
        local = {op: i for i, op in enumerate(ops)}
        preds = tuple(tuple(sorted({local[p] for p in graph.predecessors(op) if p in local}))
                      for op in ops)
        touched = graph.storages_touched(ops)
        terms = []
        for s in touched:
            t = graph.tensors[s]
            size = round_size(t.size_bytes, alignment_bytes)
            if t.producer is None or size == 0:
                continue
            producer = local.get(t.producer)
            live_after = lts[s].end > b or s in outputs
            if producer is None and live_after:
                continue  # live across the whole range: part of const
            users = tuple(sorted({local[c] for c in t.consumers if c in local}))
            terms.append(StorageTerm(size, producer, users, live_after))
        rng = RangeProblem(a, ops, preds, tuple(terms), 0)
        modelled = range_profile(rng, range(len(ops)))[0]
        const = int(base_live_bytes[a]) - modelled
        assert const >= 0, "base profile and range terms disagree"
        ranges.append(RangeProblem(a, ops, preds, tuple(terms), const))
    return OrderProblem(task_id, tuple(ranges), int(floor_bytes),
                        config if config is not None else OrderSolverConfig())


# ------------------------------------------------------------------------- model
@dataclass
class OrderModel:
    """A built CP-SAT model plus the variables needed to read a solution back."""

    model: object  # cp_model.CpModel
    peak: object  # IntVar (scaled units)
    done: list[list[dict[int, object]]]  # per range, per op: step -> BoolVar
    lo: list[list[int]]
    hi: list[list[int]]
    scale: int
    active: list[int]  # indices of the ranges that are modelled (more than one op)
    fixed_peak_bytes: int  # peak of the ranges that are not modelled


class _Cancelled(Exception):
    """Raised inside :func:`build_order_model` when its ``cancel`` says stop."""


def build_order_model(problem: OrderProblem,
                      cancel: Callable[[], bool] | None = None) -> OrderModel:
    """The CP-SAT model of ``problem`` (see the module docstring), hinted with the base order.

    Steps, per modelled range: step variables (:func:`_step_vars`), one op per step and
    predecessors first (:func:`_schedule_constraints`), the memory of every step
    (:func:`_step_memory`), then ``peak >=`` each step's memory and the base-order hint
    (:func:`_peak_and_hint`).  ``cancel`` is polled while the liveness terms are built.
    """
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    scale, active, fixed_peak, ub = _scale_and_bounds(problem)
    peak = m.new_int_var(fixed_peak // scale, ub, "peak")
    all_done: list[list[dict[int, object]]] = []
    all_lo: list[list[int]] = []
    all_hi: list[list[int]] = []
    for k, r in enumerate(problem.ranges):
        lo, hi = _closure_windows(r.preds)
        all_lo.append(lo)
        all_hi.append(hi)
        if k not in active:
            all_done.append([{} for _ in r.ops])
            continue
        done = _step_vars(m, k, lo, hi)
        all_done.append(done)
        lit = _Literals(done, lo, hi)
        _schedule_constraints(m, r, lit)
        const_t, mem = _step_memory(m, k, r, scale, lit, cancel)
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


def _step_vars(m: Any, k: int, lo: Sequence[int], hi: Sequence[int]
               ) -> list[dict[int, object]]:
    """Step 1: ``done[i][t]`` (op ``i`` ran at or before step ``t``) inside its window,
    monotone in ``t``."""
    done: list[dict[int, object]] = [{} for _ in lo]
    for i in range(len(lo)):
        prev = None
        for t in range(lo[i], hi[i]):
            v = m.new_bool_var(f"d{k}_{i}_{t}")
            done[i][t] = v
            if prev is not None:
                m.add_implication(prev, v)
            prev = v
    return done


class _Literals:
    """``done[i, t]`` as a literal, or a Python bool outside op ``i``'s window."""

    __slots__ = ("done", "hi", "lo")

    def __init__(self, done: list[dict[int, object]], lo: Sequence[int],
                 hi: Sequence[int]) -> None:
        self.done, self.lo, self.hi = done, lo, hi

    def __call__(self, i: int, t: int) -> object:
        if t < self.lo[i]:
            return False
        if t >= self.hi[i]:
            return True
        return self.done[i][t]


def _schedule_constraints(m: Any, r: RangeProblem, lit: _Literals) -> None:
    """Step 2: exactly ``t + 1`` ops done by step ``t``; an op runs after its predecessors."""
    n = len(r.ops)
    done, lo, hi = lit.done, lit.lo, lit.hi
    for t in range(n):
        terms_t = [done[i][t] for i in range(n) if lo[i] <= t < hi[i]]
        fixed = sum(1 for i in range(n) if t >= hi[i])
        m.add(sum(terms_t) == t + 1 - fixed)
    for b in range(n):
        for a in r.preds[b]:
            for t in range(lo[b], hi[b]):
                la = lit(a, t - 1)
                if la is True:
                    continue
                if la is False:
                    m.add(done[b][t] == 0)
                else:
                    m.add_implication(done[b][t], la)


def _step_memory(m: Any, k: int, r: RangeProblem, scale: int, lit: _Literals,
                 cancel: Callable[[], bool] | None,
                 ) -> tuple[list[int], list[list[tuple[int, object]]]]:
    """Step 3: the memory of every step: constant bytes plus ``size * live`` for each
    storage whose liveness at that step depends on the order (one literal per term and
    step, forced true by each way the storage can be live)."""
    n = len(r.ops)
    mem: list[list[tuple[int, object]]] = [[] for _ in range(n)]
    const_t = [r.const_bytes // scale] * n
    for j, term in enumerate(r.terms):
        if cancel is not None and cancel():
            raise _Cancelled
        w = term.size_bytes // scale
        for t in range(n):
            clauses = _live_clauses(term, t, lit)
            if clauses is True:
                const_t[t] += w
                continue
            if not clauses:
                continue
            live = m.new_bool_var(f"l{k}_{j}_{t}")
            for lits in clauses:
                m.add_bool_or([x.Not() for x in lits] + [live])  # type: ignore[attr-defined]
            mem[t].append((w, live))
    return const_t, mem


def _live_clauses(term: StorageTerm, t: int, lit: _Literals) -> list[list[Any]] | bool:
    """When ``term`` is live at step ``t``: ``True`` (always), or conjunctions of literals
    (live if any one holds; empty: never)."""
    # conditions: each is a list of (lit_or_bool, wanted value) -> live if all hold
    conds: list[list[tuple[object, bool]]] = []
    created = True if term.producer is None else lit(term.producer, t)
    if created is False:
        return []
    if term.live_after:
        conds.append([(created, True)])
    elif term.users:
        for u in term.users:
            conds.append([(created, True), (lit(u, t - 1), False)])
    else:
        p = term.producer
        assert p is not None
        conds.append([(created, True), (lit(p, t - 1), False)])
    clauses = []
    for cond in conds:
        lits = []
        dead = False
        for value, want in cond:
            if value is True or value is False:
                if value != want:
                    dead = True
                    break
                continue
            lits.append(value if want else value.Not())  # type: ignore[attr-defined]
        if dead:
            continue
        if not lits:
            return True
        clauses.append(lits)
    return clauses


def _peak_and_hint(m: Any, peak: Any, const_t: Sequence[int],
                   mem: Sequence[Sequence[tuple[int, object]]],
                   done: list[dict[int, object]]) -> None:
    """Step 4: ``peak`` bounds every step's memory; hint the base order (the identity)."""
    for t in range(len(const_t)):
        m.add(peak >= const_t[t] + sum(w * v for w, v in mem[t]))
    for i in range(len(done)):
        for t, v in done[i].items():
            m.add_hint(v, t >= i)


def extract_order(problem: OrderProblem, om: OrderModel, solver: object) -> list[list[int]]:
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
                if solver.boolean_value(done[i][t]):  # type: ignore[attr-defined]
                    p = t
                    break
            step.append((p, i))
        out.append([i for _, i in sorted(step)])
    return out


# ------------------------------------------------------------------------- solve
def _peak(problem: OrderProblem, local_orders: Sequence[Sequence[int]]) -> int:
    return max((max(range_profile(r, o)) for r, o in zip(problem.ranges, local_orders,
                                                         strict=True) if r.ops), default=0)


def _valid_local(rng: RangeProblem, local_order: Sequence[int]) -> bool:
    pos = {i: k for k, i in enumerate(local_order)}
    if sorted(pos) != list(range(len(rng.ops))):
        return False
    return all(pos[p] < pos[i] for i, ps in enumerate(rng.preds) for p in ps)


#: Work (storage terms evaluated, summed over the step costs computed) the exact check of
#: :func:`hint_is_optimal` may spend per range before it gives up and leaves the sub-task to
#: CP-SAT: a deterministic limit, about a second of Python at most.
HINT_CHECK_WORK = 1_000_000


def range_beats(rng: RangeProblem, below: int, max_work: int = HINT_CHECK_WORK
                ) -> bool | None:
    """Whether some valid order of ``rng`` keeps every step's live bytes (as
    :func:`range_profile` counts them) strictly below ``below``.

    A search over the range's down-sets (the set of ops done so far; every order is a path
    of them) that keeps only the steps under ``below``: exact, and cheap when few down-sets
    stay under it (a hint at its optimum prunes almost everything).  ``None`` when that
    took more than ``max_work`` term evaluations (undecided).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> g = diamond()
    >>> r = build_order_problem(g, g.op_ids, ["b", "c"], alignment_bytes=1).ranges[0]
    >>> peak = max(range_profile(r, [0, 1]))
    >>> range_beats(r, peak), range_beats(r, peak + 1)
    (False, True)
    """
    n = len(rng.ops)
    if n == 0:
        return rng.const_bytes < below
    pred_mask = [0] * n
    for i, ps in enumerate(rng.preds):
        for q in ps:
            pred_mask[i] |= 1 << q
    # per term: (size, producer bit or 0, users mask, live_after, no-users kind)
    terms = [(t.size_bytes, 0 if t.producer is None else 1 << t.producer,
              sum(1 << u for u in t.users), t.live_after) for t in rng.terms]
    full = (1 << n) - 1

    def step_bytes(done: int, v: int) -> int:
        bit = 1 << v
        now = done | bit
        total = rng.const_bytes
        for size, prod, users, after in terms:
            if prod and not now & prod:
                continue  # not created yet
            if after:
                total += size
            elif users:
                if users & ~done or prod == bit:
                    total += size
            elif prod:
                if prod == bit:
                    total += size
            elif done == 0:  # made before the range, never read in it: live at step 0
                total += size
        return total

    frontier = {0}
    work = 0
    per_step = len(terms) + 1
    for _ in range(n):
        nxt: set[int] = set()
        for done in frontier:
            for v in range(n):
                if done >> v & 1 or pred_mask[v] & ~done:
                    continue
                d2 = done | (1 << v)
                if d2 in nxt:
                    continue
                work += per_step
                if work > max_work:
                    return None
                if step_bytes(done, v) < below:
                    nxt.add(d2)
        if not nxt:
            return False
        frontier = nxt
    return full in frontier


def hint_is_optimal(problem: OrderProblem, max_work: int = HINT_CHECK_WORK) -> bool:
    """True when no order of the sub-task has a lower peak than the base (hint) order, as
    CP-SAT would model it: some range at the hint's peak is not modelled (too long) or has no
    order below it (:func:`range_beats`).  Then the solve would return the hint unchanged,
    so :func:`solve_order_problem` skips the model."""
    cfg = problem.config
    hint = _peak(problem, [list(range(len(r.ops))) for r in problem.ranges])
    for r in problem.ranges:
        if not r.ops or max(range_profile(r, range(len(r.ops)))) != hint:
            continue
        if len(r.ops) <= 1 or len(r.ops) > cfg.max_range_ops:
            return True
        if range_beats(r, hint, max_work) is False:
            return True
    return False


def needs_solver(problem: OrderProblem) -> bool:
    """False when :func:`solve_order_problem` answers without building a model (nothing to
    permute, or the base order is already at the floor)."""
    if not any(len(r.ops) > 1 for r in problem.ranges):
        return False
    if problem.config.stop_at_lower_bound:
        identity = [list(range(len(r.ops))) for r in problem.ranges]
        return _peak(problem, identity) > problem.floor_bytes
    return True


def solve_order_problem(
    problem: OrderProblem, cancel: Callable[[], bool] | None = None
) -> OrderResult:
    """Solve one sub-task (top-level and picklable, for worker processes).

    The result is never worse than the base order: if the solver returns nothing better,
    the hint is kept (status ``HINT``).
    """
    from roam_core.base.cpsat import make_solver, solve_with_stop

    t0 = time.perf_counter()
    identity = [list(range(len(r.ops))) for r in problem.ranges]
    hint_peak = _peak(problem, identity)
    cfg = problem.config

    def result(orders: list[list[int]], status: SolveStatus, bound: int | None) -> OrderResult:
        return OrderResult(
            task_id=problem.task_id,
            orders=tuple(tuple(r.ops[i] for i in o) for r, o in zip(problem.ranges, orders,
                                                                    strict=True)),
            peak_bytes=_peak(problem, orders),
            hint_peak_bytes=hint_peak,
            status=status,
            best_bound_bytes=bound,
            wall_time_s=time.perf_counter() - t0,
            num_ops=problem.num_ops,
        )

    if not any(len(r.ops) > 1 for r in problem.ranges):
        return result(identity, SolveStatus.TRIVIAL, hint_peak)
    if cfg.stop_at_lower_bound and hint_peak <= problem.floor_bytes:
        return result(identity, SolveStatus.BOUND, None)
    if cancel is not None and cancel():
        return result(identity, SolveStatus.CANCELLED, None)
    if hint_is_optimal(problem):  # proved without a model: CP-SAT would keep the hint
        return result(identity, SolveStatus.OPTIMAL, hint_peak)
    try:
        om = build_order_model(problem, cancel)
    except _Cancelled:  # cancelled while the model was built
        return result(identity, SolveStatus.CANCELLED, None)
    solver = make_solver(
        time_limit_s=cfg.time_limit_s, num_workers=cfg.num_search_workers,
        random_seed=cfg.random_seed, deterministic=cfg.deterministic,
        wall_slack=cfg.wall_slack, relative_gap=cfg.relative_gap, log_search=cfg.log_search)
    target = problem.floor_bytes // om.scale if cfg.stop_at_lower_bound else None
    outcome = solve_with_stop(solver, om.model, target=target, cancel=cancel)  # type: ignore[arg-type]
    bound = None
    if outcome.best_bound is not None and not outcome.reached_target:
        bound = math.ceil(outcome.best_bound - 1e-6) * om.scale
    if outcome.objective is None:
        status = SolveStatus.CANCELLED if outcome.cancelled else outcome.status
        return result(identity, status, None)
    orders = extract_order(problem, om, solver)
    for r, o in zip(problem.ranges, orders, strict=True):
        assert _valid_local(r, o), f"solver returned an invalid order for {problem.task_id}"
    found = _peak(problem, orders)
    assert found <= round(outcome.objective) * om.scale, (
        f"{problem.task_id}: simulated peak {found} above the model objective")
    if outcome.reached_target:
        status = SolveStatus.BOUND
    elif outcome.cancelled:
        status = SolveStatus.CANCELLED
    elif outcome.status == SolveStatus.OPTIMAL:
        status = SolveStatus.OPTIMAL
    else:
        status = SolveStatus.FEASIBLE if found < hint_peak else SolveStatus.HINT
    if found < hint_peak:
        return result(orders, status, bound)
    return result(identity, status, bound)


def solve_order(
    graph: Graph,
    order: Sequence[OpId],
    op_ids: Sequence[OpId] | None = None,
    *,
    config: OrderSolverConfig | None = None,
    floor_bytes: int = 0,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    cancel: Callable[[], bool] | None = None,
) -> tuple[tuple[OpId, ...], OrderResult]:
    """Re-order ``op_ids`` (default: every op) inside ``order`` for the least peak.

    Parameters
    ----------
    graph : Graph
        The graph.
    order : sequence of OpId
        A valid order (base and hint).
    op_ids : sequence of OpId, optional
        The ops to re-order; default all (then the result is the exact minimum-peak order
        when the solve is optimal).
    config : OrderSolverConfig, optional
        Solver settings.
    floor_bytes : int
        Stop early once the peak (non-resident) is at or below this.
    alignment_bytes : int
        Storage rounding.
    cancel : callable, optional
        Returns True to stop.

    Returns
    -------
    (order, OrderResult)
        The full new order and the solve record (``peak_bytes`` excludes resident bytes).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> from roam_core.oracle.simulate import simulate
    >>> g = diamond()
    >>> new, res = solve_order(g, g.op_ids, alignment_bytes=1)
    >>> res.status, res.peak_bytes, simulate(g, new, alignment_bytes=1).peak_bytes
    (<SolveStatus.OPTIMAL: 'optimal'>, 350, 350)
    """
    ops = list(order) if op_ids is None else list(op_ids)
    problem = build_order_problem(graph, order, ops, config=config, floor_bytes=floor_bytes,
                                  alignment_bytes=alignment_bytes)
    res = solve_order_problem(problem, cancel)
    return merge_orders(order, problem, res), res


def merge_all_orders(order: Sequence[OpId],
                     solved: Iterable[tuple[OrderProblem, OrderResult]]) -> tuple[OpId, ...]:
    """:func:`merge_orders` of every ``(problem, result)`` in turn, on one list: the same
    order, ``O(N + merged ops)`` instead of a copy of the order per sub-task.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> g = diamond()
    >>> p = build_order_problem(g, g.op_ids, ["b", "c"])
    >>> merge_all_orders(g.op_ids, [(p, solve_order_problem(p))])
    ('a', 'b', 'c', 'd')
    """
    out = list(order)
    for problem, res in solved:
        for r, new in zip(problem.ranges, res.orders, strict=True):
            assert sorted(new) == sorted(r.ops)
            out[r.start:r.start + len(r.ops)] = new
    return tuple(out)


def merge_orders(order: Sequence[OpId], problem: OrderProblem,
                 res: OrderResult) -> tuple[OpId, ...]:
    """``order`` with each range of ``problem`` replaced by the result's order."""
    out = list(order)
    for r, new in zip(problem.ranges, res.orders, strict=True):
        assert sorted(new) == sorted(r.ops)
        out[r.start:r.start + len(r.ops)] = new
    return tuple(out)
