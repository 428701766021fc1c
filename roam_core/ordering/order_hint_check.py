"""Answers without a model: when the base order of a sub-task is already optimal.

:func:`hint_is_optimal` proves (within a deterministic work limit) that no order of a
sub-task beats the base (hint) order, as the CP-SAT model would count it, by a search over
the down-sets of the range at the peak (:func:`range_beats`); :func:`needs_solver` says when
:func:`~roam_core.ordering.order_ilp.solve_order_problem` answers without building a model.
"""

from __future__ import annotations

from roam_core.ordering.order_problem import (
    OrderProblem,
    RangeProblem,
    identity_orders,
    problem_peak,
    range_profile,
)

__all__ = ["HINT_CHECK_WORK", "hint_is_optimal", "needs_solver", "range_beats"]


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
    >>> from roam_core.ordering.order_problem import build_order_problem
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
    # A step's bytes split into what is live once the ops in ``done`` ran (the term was made
    # before the range or by ``done``, and is kept after the range or read by an op not in
    # ``done``; a term made before, kept nowhere and read by no op is live at step 0 only),
    # plus every term the step's op makes.  The first part is carried from a down-set to the
    # next one (only the terms the added op makes or reads change), the ops a down-set may
    # run next likewise; ``work`` still counts every candidate's terms, and the candidates
    # come in the same order as in a scan of every op, so the limit decides as it always did.
    terms = [(t.size_bytes, 0 if t.producer is None else 1 << t.producer,
              sum(1 << u for u in t.users), t.live_after) for t in rng.terms]
    made_by = [0] * n
    touch: list[list[int]] = [[] for _ in range(n)]  # the terms each op makes or reads
    for k, t in enumerate(rng.terms):
        if t.producer is not None:
            made_by[t.producer] += t.size_bytes
            touch[t.producer].append(k)
        for u in set(t.users):
            touch[u].append(k)
    step0 = [k for k, t in enumerate(rng.terms) if t.producer is None and not t.users]
    full = (1 << n) - 1

    def counted(k: int, done: int) -> bool:
        _, prod, users, after = terms[k]
        if prod and not done & prod:
            return False  # not created yet (or made by the step's op: counted in made_by)
        return bool(after or users & ~done or (not users and not prod and done == 0))

    succs: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(rng.preds):
        for q in ps:
            succs[q].append(i)
    # per down-set of the frontier: the ops it may run next (predecessors done) and its live
    # bytes
    state = {0: (sum(1 << v for v in range(n) if not pred_mask[v]),
                 rng.const_bytes + sum(terms[k][0] for k in range(len(terms))
                                       if counted(k, 0)))}
    frontier = {0}
    work = 0
    per_step = len(terms) + 1
    for _ in range(n):
        nxt: set[int] = set()
        state_next: dict[int, tuple[int, int]] = {}
        for done in frontier:
            can, live = state[done]
            rest = can
            while rest:
                low = rest & -rest
                rest ^= low
                v = low.bit_length() - 1
                d2 = done | low
                if d2 in nxt:
                    continue
                work += per_step
                if work > max_work:
                    return None
                if live + made_by[v] < below:
                    nxt.add(d2)
                    r2 = can ^ low
                    for w in succs[v]:
                        if not pred_mask[w] & ~d2:
                            r2 |= 1 << w
                    live2 = live
                    for k in (touch[v] if done else touch[v] + step0):
                        live2 += terms[k][0] * (counted(k, d2) - counted(k, done))
                    state_next[d2] = (r2, live2)
        if not nxt:
            return False
        frontier, state = nxt, state_next
    return full in frontier


def hint_is_optimal(problem: OrderProblem, max_work: int = HINT_CHECK_WORK) -> bool:
    """True when no order of the sub-task has a lower peak than the base (hint) order, as
    CP-SAT would model it: some range at the hint's peak is not modelled (too long) or has no
    order below it (:func:`range_beats`).  Then the solve would return the hint unchanged,
    so :func:`solve_order_problem` skips the model."""
    cfg = problem.config
    hint = problem_peak(problem, identity_orders(problem))
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
        return problem_peak(problem, identity_orders(problem)) > problem.floor_bytes
    return True

