"""Restriction bounds: CP-SAT lower bounds on the peak of every order, from any op subset.

The restriction argument
------------------------
Take any set ``G`` of ops (a *group*: a window of some order around its peak, a key-point
unit, a parameter's update, or all ops) and any valid order ``pi`` of the whole graph.
Restricted to ``G``, ``pi`` is a linear extension ``sigma`` of ``G`` under the *transitive*
precedences (paths through ops outside ``G`` count).  For a planned storage ``s`` with
producer ``p`` and users ``U`` (its consumers, ``p`` itself, the end of the step for a graph
output), let

* ``started(s)`` = the ops of ``G`` that are ``p`` or descendants of ``p``;
* ``pending(s)`` = the ops of ``G`` that are a user or an ancestor of a user.

When the ``t``-th op ``x`` of ``sigma`` runs, ``s`` is live in ``pi`` if some op of
``started(s)`` is among ``sigma[0..t]`` (so ``p`` has run: ``s`` exists) and some op of
``pending(s)`` is *not* among ``sigma[0..t-1]`` (it is ``x`` or runs later, so some user runs
at or after ``x``: ``s`` is not freed yet); a graph output only needs the first condition.
Summing those storages at every step of ``sigma``, taking the maximum over steps and the
minimum over linear extensions of ``G`` gives a number that is at most the peak of ``pi``.
It is a lower bound on the peak of *every* valid order, and any lower bound that CP-SAT
proves on that minimum (its ``best_objective_bound``, valid at any time limit) is one too.

* With ``G`` = all ops the model is exact: its optimum is the minimum peak of the graph.
* With ``G`` = the ops between two consecutive key points (a unit, in every order at the same
  steps) the model is exact on those steps; the maximum over units is the exact optimum.
* The live-set bound (:func:`~roam_core.oracle.bounds.live_set_lower_bound`) is the case
  ``G = {x}``; the update-group bound is the case of one parameter's update (this model also
  sees users outside ``G`` through ``pending``, so it is at least as tight on the same group).

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
small graphs in ``tests/roam_core/test_proven_bounds.py``.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, round_size
from roam_core.model.reach import Reachability, iter_bits, reachability
from roam_core.oracle.bounds import live_set_lower_bound, weighted_mask_sum

__all__ = [
    "ChainGroupBound",
    "ChoiceBound",
    "RestrictionBound",
    "StorageMasks",
    "chain_group_lower_bound",
    "choice_lower_bound",
    "forward_value_groups",
    "free_branch_groups",
    "greedy_chain",
    "heavy_path",
    "peak_window_chain_bound",
    "peak_window_groups",
    "restriction_bound",
    "storage_masks",
    "window_bound",
]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StorageMasks:
    """Per planned storage (non-zero rounded size): the global masks of the argument above.

    Parameters
    ----------
    sizes : tuple of int
        Rounded bytes.
    started : tuple of int
        Mask of ops that are the producer or its descendants.
    pending : tuple of int
        Mask of ops that are a user or an ancestor of a user (``-1`` for a graph output:
        always pending).
    resident_bytes : int
        Rounded resident bytes.
    """

    sizes: tuple[int, ...]
    started: tuple[int, ...]
    pending: tuple[int, ...]
    resident_bytes: int


def storage_masks(graph: Graph, alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES, *,
                  reach: Reachability | None = None) -> StorageMasks:
    """The :class:`StorageMasks` of ``graph`` (cost ``O(users * N / 64)``)."""
    r = reach if reach is not None else reachability(graph)
    sizes, started, pending = [], [], []
    for size, st, pd in _iter_storage_masks(graph, alignment_bytes, r):
        sizes.append(size)
        started.append(st)
        pending.append(pd)
    return StorageMasks(tuple(sizes), tuple(started), tuple(pending),
                        graph.resident_bytes(alignment_bytes))


def _iter_storage_masks(graph: Graph, alignment_bytes: int, r: Reachability):
    """``(size, started, pending)`` of every planned storage, one at a time (the
    :class:`StorageMasks` rows without keeping them: ``O(N / 8)`` bytes each)."""
    outputs = set(graph.outputs)
    for t in graph.tensors.values():
        if t.producer is None:
            continue
        size = round_size(t.size_bytes, alignment_bytes)
        if size == 0:
            continue
        p = r.index[t.producer]
        started = r.descendants[p] | (1 << p)
        if t.id in outputs:
            yield size, started, -1
            continue
        m = r.ancestors[p] | (1 << p)
        for c in t.consumers:
            i = r.index[c]
            m |= r.ancestors[i] | (1 << i)
        yield size, started, m


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


def _local(mask: int, pos: dict[int, int]) -> list[int]:
    return [pos[i] for i in iter_bits(mask)]


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
    cancel: Callable[[], bool] | None = None,
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
        Precomputed :func:`~roam_core.model.reach.reachability` and :func:`storage_masks`.
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
    cancel : callable, optional
        Returns True to stop early (the bound proven so far is kept).

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
    from ortools.sat.python import cp_model

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
    lo = [a.bit_count() for a in anc_l]
    hi = [k - 1 - d.bit_count() for d in desc_l]
    # transitive reduction of the local precedences
    preds: list[list[int]] = []
    for j in range(k):
        cover = anc_l[j]
        for i in iter_bits(anc_l[j]):
            cover &= ~anc_l[i]
        preds.append(list(iter_bits(cover)))
    # storage classes
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
    scale = 0
    for s in (const, *classes.values()):
        scale = math.gcd(scale, s)
    scale = max(scale, 1)
    m = cp_model.CpModel()
    done: list[dict[int, object]] = [{} for _ in range(k)]
    for j in range(k):
        prev = None
        for t in range(lo[j], hi[j]):
            v = m.new_bool_var(f"d{j}_{t}")
            done[j][t] = v
            if prev is not None:
                m.add_implication(prev, v)
            prev = v

    def lit(j: int, t: int) -> object:
        if t < lo[j]:
            return False
        if t >= hi[j]:
            return True
        return done[j][t]

    for t in range(k):
        terms_t = [done[j][t] for j in range(k) if lo[j] <= t < hi[j]]
        fixed = sum(1 for j in range(k) if t >= hi[j])
        if terms_t:
            m.add(sum(terms_t) == t + 1 - fixed)
    for b in range(k):
        for a in preds[b]:
            for t in range(lo[b], hi[b]):
                la = lit(a, t - 1)
                if la is True:
                    continue
                if la is False:
                    m.add(done[b][t] == 0)
                else:
                    m.add_implication(done[b][t], la)
    mem: list[list[tuple[int, object]]] = [[] for _ in range(k)]
    const_t = [const // scale] * k
    s_cache: dict[tuple[int, int], object] = {}
    p_cache: dict[tuple[int, int], object] = {}

    def or_lit(lits: list[object], cache: dict[tuple[int, int], object],
               key: tuple[int, int]) -> object:
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
        aux = m.new_bool_var(f"or{len(cache)}_{key[1]}")
        for x in lits:
            m.add_implication(x, aux)  # type: ignore[arg-type]
        cache[key] = aux
        return aux

    def neg(x: object) -> object:
        if x is True:
            return False
        if x is False:
            return True
        return x.Not()  # type: ignore[attr-defined]

    for (st, pdm), size in classes.items():
        w = size // scale
        st_l = _local(st, pos)
        st_set = set(st_l)
        mins = [j for j in st_l if not (anc_l[j] and any(i in st_set for i in iter_bits(anc_l[j])))]
        if pdm == -1:
            maxs: list[int] | None = None
        else:
            pd_l = _local(pdm, pos)
            pd_set = set(pd_l)
            maxs = [u for u in pd_l
                    if not (desc_l[u] and any(i in pd_set for i in iter_bits(desc_l[u])))]
        for t in range(k):
            s_lit = or_lit([lit(j, t) for j in mins], s_cache, (st, t))
            if s_lit is False:
                continue
            if maxs is None:
                p_lit: object = True
            else:
                p_lit = or_lit([neg(lit(u, t - 1)) for u in maxs], p_cache, (pdm, t))
            if p_lit is False:
                continue
            if s_lit is True and p_lit is True:
                const_t[t] += w
                continue
            live = m.new_bool_var("l")
            clause = [live]
            for x in (s_lit, p_lit):
                if x is not True:
                    clause.append(neg(x))
            m.add_bool_or(clause)  # type: ignore[arg-type]
            mem[t].append((w, live))
    ub = (const + sum(classes.values())) // scale
    peak = m.new_int_var(max(const_t), max(ub, max(const_t)), "peak")
    for t in range(k):
        m.add(peak >= const_t[t] + sum(w * v for w, v in mem[t]))  # type: ignore[operator]
    m.minimize(peak)
    if hint_order is not None:
        for j in range(k):
            for t, v in done[j].items():
                m.add_hint(v, t >= j)  # type: ignore[arg-type]
    solver = make_solver(time_limit_s=time_limit_s, random_seed=random_seed)
    out = solve_with_stop(solver, m, cancel=cancel)
    res = sm.resident_bytes
    if out.objective is None:
        return RestrictionBound(res + max(const_t) * scale, None, out.status, k, len(classes),
                                time.perf_counter() - t0, label)
    bound = math.ceil(out.best_bound - 1e-6) * scale if out.best_bound is not None else 0
    obj = round(out.objective) * scale
    status = "optimal" if out.status == "optimal" else out.status
    if status == "optimal":
        bound = obj
    _logger.debug("restriction bound %s: %d ops, %d classes, %s, bound %d",
                  label, k, len(classes), status, bound + res)
    return RestrictionBound(bound + res, obj + res, status, k, len(classes),
                            time.perf_counter() - t0, label)


def peak_window_groups(
    order: Sequence[OpId],
    live_bytes: Sequence[int],
    *,
    half_width: int = 60,
    max_windows: int = 3,
) -> list[tuple[str, tuple[OpId, ...]]]:
    """Windows of ``order`` centred on its highest steps (distinct windows, highest first).

    Each is ``(label, ops)`` with the ops at steps ``[c - half_width, c + half_width]``.
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
    cancel: Callable[[], bool] | None = None,
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
        Precomputed reachability / :func:`storage_masks`.
    deadline : float, optional
        ``time.monotonic()`` after which no new window is started.
    cancel : callable, optional
        Returns True to stop.

    Returns
    -------
    (int, list of RestrictionBound)
        The best bound (resident bytes included) and every window's record.
    """
    from roam_core.oracle.simulate import simulate

    r = reach if reach is not None else reachability(graph)
    sm = masks if masks is not None else storage_masks(graph, alignment_bytes, reach=r)
    prof = simulate(graph, order, alignment_bytes=alignment_bytes)
    best = sm.resident_bytes
    records: list[RestrictionBound] = []
    for w in half_widths:
        for label, ops in peak_window_groups(order, prof.live_bytes, half_width=w,
                                             max_windows=max_windows):
            if (cancel is not None and cancel()) or (deadline is not None
                                                     and time.monotonic() > deadline):
                return best, records
            rb = restriction_bound(graph, ops, alignment_bytes, reach=r, masks=sm,
                                   hint_order=order, time_limit_s=time_limit_s, label=label,
                                   cancel=cancel)
            records.append(rb)
            best = max(best, rb.bound_bytes)
            if best >= prof.peak_bytes:
                return best, records
    return best, records


# ----------------------------------------------------------------- choice bound
@dataclass(frozen=True, slots=True)
class ChoiceBound:
    """The per-op choice bound (see :func:`choice_lower_bound`).

    Parameters
    ----------
    bound_bytes : int
        The bound, resident bytes included.
    op_id : OpId or None
        The op where it is attained.
    per_op_bytes : tuple of int
        Per op in program order: planned bytes live at that op in every order, choices
        included (resident bytes excluded).
    groups_used : int
        Groups solved (the others were too large and count as forced-only).
    """

    bound_bytes: int
    op_id: OpId | None
    per_op_bytes: tuple[int, ...]
    groups_used: int


def _down_sets(pred_local: Sequence[int], limit: int) -> list[int] | None:
    k = len(pred_local)
    seen = {0}
    frontier = [0]
    while frontier:
        nxt = []
        for d in frontier:
            for j in range(k):
                b = 1 << j
                if d & b or pred_local[j] & ~d:
                    continue
                e = d | b
                if e not in seen:
                    seen.add(e)
                    nxt.append(e)
                    if len(seen) > limit:
                        return None
        frontier = nxt
    return sorted(seen)


def free_branch_groups(graph: Graph, max_descendants: int = 40, *,
                       reach: Reachability | None = None) -> list[tuple[OpId, ...]]:
    """Weakly connected groups of *free-branch* ops: optimizer ops, and ops with at most
    ``max_descendants`` descendants all of whose successors are free-branch ops
    (weight-gradient matmuls, gradient accumulations).  Any disjoint groups give a valid
    :func:`choice_lower_bound`; these are the ones whose placement is a real choice (run
    early and hold the result, or late and hold the input)."""
    from roam_core.model.graph import Phase
    from roam_core.model.reach import topological_indices

    r = reach if reach is not None else reachability(graph)
    ids = graph.op_ids
    free = [False] * len(ids)
    index = {op: i for i, op in enumerate(ids)}
    for i in reversed(topological_indices(graph)):
        op = ids[i]
        if graph.op(op).phase is Phase.OPTIMIZER:
            free[i] = True
        else:
            free[i] = (r.descendants.bit_count(r.index[op]) <= max_descendants
                       and all(free[index[s]] for s in graph.successors(op)))
    parent = list(range(len(ids)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for src, dst, _ in graph.edges():
        a, b = index[src], index[dst]
        if free[a] and free[b]:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[ra] = rb
    comps: dict[int, list[OpId]] = {}
    for i, op in enumerate(ids):
        # sinks that allocate nothing (``detach``) only multiply the down-sets: leave them out
        # (a smaller group is still a valid group)
        if free[i] and (graph.successors(op) or any(
                graph.tensors[t].size_bytes for t in graph.storages_created(op))):
            comps.setdefault(find(i), []).append(op)
    return [tuple(c) for c in comps.values()]


def forward_value_groups(graph: Graph, max_group_ops: int = 40, *,
                         reach: Reachability | None = None) -> list[tuple[OpId, ...]]:
    """Weakly connected groups of *forward-value* ops: backward ops that do not descend from
    a loss op (products of forward values that only the backward reads, e.g. the ``3 * x**2``
    of a tanh-GELU's backward).

    Such an op may run in the forward (hold its result until the backward) or in the
    backward (hold its forward inputs until then): at an op of the backward one of the two is
    live in every order, and the live-set argument sees neither.  Used as the groups of
    :func:`choice_lower_bound`, they make it count the cheaper one.  Any disjoint groups give
    a valid bound; groups above ``max_group_ops`` are left out, and so are sinks that allocate
    nothing (views, ``detach``).  Without a loss op every backward op qualifies (the groups
    are then large and left out, or still valid).
    """
    from roam_core.model.graph import Phase
    from roam_core.model.reach import mask_to_bool

    r = reach if reach is not None else reachability(graph)
    after_loss = 0
    for i, o in enumerate(graph.ops):  # program order: ``i`` is the op's index
        if o.phase is Phase.LOSS:
            after_loss |= r.descendants[i] | (1 << i)
    after = mask_to_bool(after_loss, len(graph.ops)).tolist()  # one unpacking, no shifts
    free = {o.id for o, a in zip(graph.ops, after, strict=True)
            if o.phase is Phase.BACKWARD and not a}
    parent = {op: op for op in free}

    def find(x: OpId) -> OpId:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for src, dst, _ in graph.edges():
        if src in free and dst in free:
            ra, rb = find(src), find(dst)
            if ra != rb:
                parent[ra] = rb
    comps: dict[OpId, list[OpId]] = {}
    for op in graph.op_ids:
        if op in free and any(graph.tensors[t].size_bytes for t in graph.storages_created(op)):
            comps.setdefault(find(op), []).append(op)
    return [tuple(c) for c in comps.values() if len(c) <= max_group_ops]


def choice_lower_bound(
    graph: Graph,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    groups: Sequence[Sequence[OpId]] | None = None,
    reach: Reachability | None = None,
    masks: StorageMasks | None = None,
    max_group_ops: int = 40,
    max_down_sets: int = 512,
) -> ChoiceBound:
    """Live-set bound plus, at each op, the cheapest choice of every free op group.

    For an op ``x`` and a group ``U`` of ops (by default each weakly connected group of
    optimizer ops: one parameter's update), the ops of ``U`` that run before ``x`` in an
    order form a down-set ``D`` of ``U`` that contains ``U``'s ancestors of ``x`` and none of
    its descendants.  Each storage touched by ``U`` (assigned to one group only) is live at
    ``x`` when, judged from ``{x} | D`` alone (the restriction argument of this module), it
    has been created and a user is still to come.  The minimum over compatible ``D`` of those
    bytes, summed over groups, plus every unassigned storage the live-set argument forces
    at ``x``, is live at ``x`` in every order: the gradient-or-state choice of an Adam update
    (the gradient waits, or ``exp_avg`` / ``exp_avg_sq`` exist) counts as the cheaper one.
    The bound is the maximum over ``x`` (resident bytes included).

    Parameters
    ----------
    graph : Graph
        The graph.
    alignment_bytes : int
        Storage rounding.
    groups : sequence of sequence of OpId, optional
        Disjoint op groups (default :func:`free_branch_groups`).
    reach, masks : optional
        Precomputed reachability / :func:`storage_masks`.
    max_group_ops, max_down_sets : int
        Groups above these sizes are left out (their storages count as forced only).

    Returns
    -------
    ChoiceBound

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> from roam_core.oracle.bounds import live_set_lower_bound
    >>> g = tiny_train_step()
    >>> choice_lower_bound(g, 1).bound_bytes >= live_set_lower_bound(g, 1).bound_bytes
    True
    """
    import numpy as np

    from roam_core.model.reach import mask_to_bool
    r = reach if reach is not None else reachability(graph)
    n = len(graph.ops)
    resident = graph.resident_bytes(alignment_bytes)
    if n == 0:
        return ChoiceBound(resident, None, (), 0)
    outputs = set(graph.outputs)
    grps = [tuple(gr) for gr in (groups if groups is not None
                                       else free_branch_groups(graph, max_group_ops, reach=r))]
    # storages: rounded size of each planned (produced, non-empty) one; the started /
    # pending masks (N bits each) are built for the few storages the groups touch, when used
    info: dict[str, int] = {}
    for t in graph.tensors.values():
        if t.producer is not None:
            size = round_size(t.size_bytes, alignment_bytes)
            if size:
                info[t.id] = size

    def masks_of(s: str) -> tuple[int, int, int]:
        """``(size, started mask, pending mask or -1)`` of storage ``s``."""
        t = graph.tensors[s]
        p = r.index[t.producer]  # type: ignore[index]
        st = r.descendants[p] | (1 << p)
        if s in outputs:
            return info[s], st, -1
        pd = r.ancestors[p] | (1 << p)
        for c in t.consumers:
            i = r.index[c]
            pd |= r.ancestors[i] | (1 << i)
        return info[s], st, pd

    unit = max(math.gcd(*info.values()), 1) if info else 1

    # the storages' forced-live bytes are the live-set bound's (cached per graph: the
    # update-group bound computed them for the same graph); every size is a multiple of
    # ``unit``, so the integer division is exact and the float64 total is the same as the
    # sum of ``size // unit`` over the masks
    total = (np.asarray(live_set_lower_bound(graph, alignment_bytes, reach=r).forced_bytes,
                        dtype=np.int64) // unit).astype(np.float64)
    assigned: set[str] = set()
    used = 0
    full = (1 << n) - 1
    gains: list[tuple[int, int]] = []  # (best - base, ops): added over the ops at the end
    for grp in grps:
        k = len(grp)
        if k == 0 or k > max_group_ops:
            continue
        gidx = [r.index[o] for o in grp]
        local = {g: j for j, g in enumerate(gidx)}
        umask = 0
        for g in gidx:
            umask |= 1 << g
        pred_local = [0] * k
        for j, g in enumerate(gidx):
            for i in iter_bits(r.ancestors[g] & umask):
                pred_local[j] |= 1 << local[i]
        ds = _down_sets(pred_local, max_down_sets)
        if ds is None:
            continue
        touched: list[str] = []
        for op in grp:
            for s in (*graph.storages_read(op), *graph.storages_created(op)):
                if s in info and s not in assigned:
                    assigned.add(s)
                    touched.append(s)
        if not touched:
            continue
        used += 1
        # An op ``x`` comparable with every op of the group has one compatible down-set
        # (the group's ancestors of ``x``), and there each storage is live exactly when it is
        # forced: the group adds ``best - base = 0``.  So only the ops incomparable with
        # some group op are looked at, and of those one per run of equal columns (the
        # group's reachability bits and the storages' started / pending bits decide the
        # column, hence its ``best - base``).
        comp = full
        for g in gidx:
            comp &= r.ancestors[g] | r.descendants[g] | (1 << g)
        inc = full ^ comp
        if not inc:
            continue
        items = [(size // unit, st, pd) for size, st, pd in map(masks_of, touched)]
        rows = ([r.descendants[g] for g in gidx] + [r.ancestors[g] | (1 << g) for g in gidx]
                + [st for _, st, _ in items] + [pd for _, _, pd in items if pd != -1])
        # the ops of ``inc`` by their column (the rows' bits there), which decides their
        # ``best - base``: few classes (GPT-2: 5-21), so they are split as bitsets (a few
        # ANDs of N-bit ints per row) instead of reading every op's column
        parts = _partition(inc, rows, _MAX_CLASSES)
        if parts is not None:
            classes, sig = parts
            gain = _group_gain(sig, k, ds, gidx, umask, items)
            gains.extend((int(v), c) for v, c in zip(np.rint(gain).astype(np.int64), classes,
                                                     strict=True) if v)
            continue
        cols = np.flatnonzero(mask_to_bool(inc, n))
        sig = np.stack([mask_to_bool(x, n)[cols] for x in rows])
        runs = np.concatenate(([0], np.flatnonzero(
            np.any(sig[:, 1:] != sig[:, :-1], axis=0)) + 1))
        lengths = np.diff(np.append(runs, len(cols)))
        gain = _group_gain(sig[:, runs], k, ds, gidx, umask, items)  # one column per run
        total[cols] += np.repeat(gain, lengths)
    if gains:
        total += weighted_mask_sum(gains, n).astype(np.float64)
    per_op = np.rint(total).astype(np.int64) * unit
    i = int(np.argmax(per_op))
    return ChoiceBound(int(per_op[i]) + resident, r.op_ids[i], tuple(per_op.tolist()), used)


#: :func:`choice_lower_bound` splits a group's incomparable ops into at most this many
#: classes of equal columns as bitsets, else it reads every op's column.
_MAX_CLASSES = 64


def _partition(inc: int, rows: Sequence[int], limit: int) -> tuple[list[int], Any] | None:
    """The ops of bitset ``inc`` split by their bits in ``rows``: ``(class bitsets, the
    rows' bits of each class as a (rows, classes) boolean array)``, or None past ``limit``
    classes.

    >>> classes, sig = _partition(0b1111, [0b0011, 0b0101], 8)
    >>> [bin(c) for c in classes], sig.astype(int).tolist()
    (['0b1', '0b10', '0b100', '0b1000'], [[1, 1, 0, 0], [1, 0, 1, 0]])
    """
    import numpy as np

    classes = [inc]
    bits: list[list[bool]] = [[]]
    for x in rows:
        nc: list[int] = []
        nb: list[list[bool]] = []
        for c, b in zip(classes, bits, strict=True):
            on = c & x
            if on:
                nc.append(on)
                nb.append([*b, True])
            off = c ^ on
            if off:
                nc.append(off)
                nb.append([*b, False])
        if len(nc) > limit:
            return None
        classes, bits = nc, nb
    return classes, np.array(bits, dtype=bool).T


def _group_gain(sig: Any, k: int, ds: Sequence[int], gidx: Sequence[int], umask: int,
                items: Sequence[tuple[int, int, int]]) -> Any:
    """``best - base`` (float64, in units) of each column of ``sig`` for one group: rows
    ``0 .. k - 1`` whether group op ``u`` is an ancestor of the op, ``k .. 2k - 1`` whether the
    op is ``u`` or an ancestor of it, then each item's started bits and each (non-output)
    item's pending bits (``items``: ``(size in units, started mask, pending mask or -1)``)."""
    import numpy as np

    m = sig.shape[1]
    nd = len(ds)
    dmat = np.array([[d >> j & 1 for j in range(k)] for d in ds], dtype=np.float64)
    a_vec = sig[:k].astype(np.float64)  # a[u, x]: u is an ancestor of x
    b_vec = sig[k:2 * k].astype(np.float64)  # b[u, x]: x is u or an ancestor of u
    viol = (1.0 - dmat) @ a_vec + dmat @ b_vec  # > 0: D incompatible with x
    cost = np.zeros((nd, m), dtype=np.float64)
    base = np.zeros(m, dtype=np.float64)
    st_row = 2 * k
    pd_row = 2 * k + len(items)
    for w, st, pd in items:
        st_x = sig[st_row]
        st_row += 1
        if pd == -1:
            pd_x = np.ones(m, dtype=bool)
        else:
            pd_x = sig[pd_row]
            pd_row += 1
        base += (st_x & pd_x) * w
        st_u = st & umask
        a_d = np.array([bool(st_u & _global_mask(d, gidx)) for d in ds])
        if pd == -1:
            b_d = np.ones(nd, dtype=bool)
        else:
            pd_u = pd & umask
            b_d = np.array([bool(pd_u & ~_global_mask(d, gidx)) for d in ds])
        for av in (False, True):
            for bv in (False, True):
                sel = (a_d == av) & (b_d == bv)
                if not sel.any():
                    continue
                live = (st_x | av) & (pd_x | bv)
                if live.any():
                    cost[sel] += live.astype(np.float64) * w
    cost[viol > 0.5] = np.inf
    best = cost.min(axis=0)
    assert np.all(np.isfinite(best)), "every op has a compatible down-set"
    return best - base


def _global_mask(local_set: int, gidx: Sequence[int]) -> int:
    m = 0
    for j in iter_bits(local_set):
        m |= 1 << gidx[j]
    return m


# ------------------------------------------------------------ chain-group bound
@dataclass(frozen=True, slots=True)
class ChainGroupBound:
    """The chain-group bound (see :func:`chain_group_lower_bound`).

    Parameters
    ----------
    bound_bytes : int
        The bound, resident bytes included.
    group : tuple of OpId
        The group that gives it (empty when no group beats the chain alone).
    chain_ops : int
        Ops in the chain.
    groups_used : int
        Groups solved.
    """

    bound_bytes: int
    group: tuple[OpId, ...]
    chain_ops: int
    groups_used: int


def greedy_chain(order: Sequence[OpId], reach: Reachability,
                 skip: Iterable[OpId] = ()) -> list[OpId]:
    """A chain (every two ops comparable) picked greedily along ``order``: an op joins when
    the last chain op is its ancestor; ops in ``skip`` never join."""
    sk = set(skip)
    out: list[OpId] = []
    last = -1
    for op in order:
        if op in sk:
            continue
        i = reach.index[op]
        if last < 0 or reach.ancestors.has(i, last):
            out.append(op)
            last = i
    return out


def heavy_path(graph: Graph, reach: Reachability, weights: Sequence[int],
               skip: Iterable[OpId] = ()) -> list[OpId]:
    """A chain: the path (along data and control edges, avoiding ``skip``) of largest total
    ``weights`` (per op, program order; e.g. the bytes the live-set argument forces there)."""
    from roam_core.model.reach import topological_indices

    sk = {reach.index[o] for o in skip}
    ids = graph.op_ids
    index = {op: i for i, op in enumerate(ids)}
    best = [0] * len(ids)
    back = [-1] * len(ids)
    for i in topological_indices(graph):
        if i in sk:
            continue
        top, arg = 0, -1
        for p in graph.predecessors(ids[i]):
            j = index[p]
            if j not in sk and best[j] > top:
                top, arg = best[j], j
        best[i] = top + int(weights[i]) + 1
        back[i] = arg
    if not ids:
        return []
    i = max(range(len(ids)), key=best.__getitem__)
    path = []
    while i >= 0:
        path.append(ids[i])
        i = back[i]
    return path[::-1]


def _chain_scan(entry, cost, stop: int):
    """``w[0] = entry[0]``, ``w[i+1] = min(entry[i+1], max(w[i], cost[i]))`` for ``i < stop``
    and ``w[i+1] = entry[i+1]`` after: a prefix scan of clamp maps ``x -> min(h, max(l, x))``
    (closed under composition), in ``log2(len)`` numpy steps."""
    import numpy as np

    m = len(entry) - 1
    lo = np.full(m, np.inf)
    lo[:stop] = cost[:stop]
    hi = np.asarray(entry[1:], dtype=np.float64).copy()
    s = 1
    while s < m:  # Hillis-Steele: P_j = f_j o ... o f_0
        lo_prev, hi_prev = lo[:-s].copy(), hi[:-s].copy()
        new_hi = np.minimum(hi[s:], np.maximum(lo[s:], hi_prev))
        lo[s:] = np.maximum(lo_prev, lo[s:])
        hi[s:] = new_hi
        s *= 2
    out = np.empty(m + 1)
    out[0] = entry[0]
    out[1:] = np.minimum(hi, np.maximum(lo, entry[0]))
    return out


def _chain_window(anc: int, desc: int, cmask: int, cpos: Mapping[int, int], monotone: bool,
                  m: int) -> tuple[int, int]:
    """``(lo, hi)``: an op with ancestor / descendant masks ``anc`` / ``desc`` runs between
    chain positions ``lo`` (one after its last chain ancestor) and ``hi`` (its first chain
    descendant).  With a monotone chain (program indices increasing along it) those are the
    highest / lowest set bits: ``O(N / 64)`` instead of iterating every bit (``O(m N / 64)``).
    """
    ca, cd = anc & cmask, desc & cmask
    lo, hi = 0, m
    if ca:
        lo = (cpos[ca.bit_length() - 1] if monotone else max(cpos[i] for i in iter_bits(ca))) + 1
    if cd:
        hi = cpos[(cd & -cd).bit_length() - 1] if monotone else min(cpos[i] for i in iter_bits(cd))
    return lo, hi


def _gather_bits(packed, cols: Sequence[int]):
    """Columns ``cols`` of ``packed`` (rows of ``numpy.packbits``) as a 0/1 uint8 matrix."""
    import numpy as np

    c = np.asarray(cols, dtype=np.int64)
    return (packed[:, c >> 3] >> (7 - (c & 7)).astype(np.uint8)) & 1


def chain_group_lower_bound(
    graph: Graph,
    order: Sequence[OpId] | None = None,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    chain: Sequence[OpId] | str | None = None,
    groups: Sequence[Sequence[OpId]] | None = None,
    reach: Reachability | None = None,
    masks: StorageMasks | None = None,
    max_group_ops: int = 24,
    max_down_sets: int = 256,
    max_groups: int = 64,
) -> ChainGroupBound:
    """Exact restriction bound of ``G = chain + one group``, maximised over groups.

    A *chain* (ops pairwise comparable: by default the path outside every group through
    the most bytes the live-set argument forces, :func:`heavy_path`) runs in the same
    relative order in every valid order, so the linear extensions of ``chain + U`` for a
    small group ``U`` (a parameter's update, a weight-gradient branch) are interleavings:
    states ``(i, D)`` = ``i`` chain ops and a down-set ``D`` of ``U`` done.  A dynamic
    programme over those states (vectorised over ``i``) gives the exact minimum over
    interleavings of the maximum step memory of the restriction model (module docstring),
    which bounds every order's peak: it sees that an update run early costs its transient on
    top of the memory the chain forces there, and one
    run late holds its gradient across the chain's high steps.

    Parameters
    ----------
    graph : Graph
        The graph.
    order : sequence of OpId, optional
        Unused unless ``chain == "greedy"`` (then the chain is :func:`greedy_chain` of it).
    alignment_bytes : int
        Storage rounding.
    chain : sequence of OpId or "greedy", optional
        A chain to use instead of the heavy path (must be pairwise comparable).
    groups : sequence of sequence of OpId, optional
        Disjoint from the chain, not necessarily from each other (default
        :func:`free_branch_groups`, a component too large split into one-op groups).
    reach, masks : optional
        Precomputed reachability / :func:`storage_masks`.
    max_group_ops, max_down_sets, max_groups : int
        Size limits: larger groups are skipped; at most ``max_groups`` groups (largest
        storage touched first) are solved.

    Returns
    -------
    ChainGroupBound
    """
    import numpy as np

    r = reach if reach is not None else reachability(graph)
    # the storages' masks are streamed (one pass below) unless given: at 100k ops all of
    # them together take about 1 GB
    resident = (masks.resident_bytes if masks is not None
                else graph.resident_bytes(alignment_bytes))
    if groups is not None:
        grps = [tuple(gr) for gr in groups]
    else:
        # groups need not be disjoint here (each is solved on its own): a component too
        # large to solve contributes each of its ops as a one-op group
        grps = []
        for gr in free_branch_groups(graph, max_group_ops, reach=r):
            if len(gr) <= max_group_ops:
                grps.append(tuple(gr))
            else:
                grps.extend((op,) for op in gr)
    in_group = {op for gr in grps for op in gr}
    if chain is None:
        from roam_core.oracle.bounds import live_set_lower_bound

        lb = live_set_lower_bound(graph, alignment_bytes, reach=r)
        ch = heavy_path(graph, r, lb.forced_bytes, in_group)
    elif chain == "greedy":
        assert order is not None
        ch = greedy_chain(order, r, in_group)
    else:
        ch = list(chain)
    m = len(ch)
    if m == 0:
        return ChainGroupBound(resident, (), 0, 0)
    cidx = [r.index[o] for o in ch]
    cpos = {g: j for j, g in enumerate(cidx)}
    cmask = 0
    for g in cidx:
        cmask |= 1 << g
    for j in range(1, m):
        assert r.ancestors.has(cidx[j], cidx[j - 1]), "chain ops must be comparable"
    # rank groups by the largest storage they touch
    ranked = []
    for gr in grps:
        if not gr or len(gr) > max_group_ops:
            continue
        top = 0
        for op in gr:
            for s in (*graph.storages_read(op), *graph.storages_created(op)):
                top = max(top, graph.tensors[s].size_bytes)
        ranked.append((top, gr))
    ranked.sort(key=lambda x: -x[0])
    # one pass over the storages' masks: first / last chain index, and the bits at the
    # group ops' columns (packed); a per-group ``mask & umask`` over every storage costs
    # O(n_st x N / 64) per group
    cols = np.asarray(sorted({r.index[o] for _, gr in ranked[:max_groups] for o in gr}),
                      dtype=np.int64)
    col_of = {int(g): j for j, g in enumerate(cols)}
    byte, bit = cols >> 3, (cols & 7).astype(np.uint8)
    nb = (len(r) + 7) // 8 or 1
    big = m + 5
    # along a chain the program indices increase when program order is topological: then
    # the first / last chain op of a mask is its lowest / highest set bit
    monotone = all(x < y for x, y in itertools.pairwise(cidx))
    rows = (zip(masks.sizes, masks.started, masks.pending, strict=True) if masks is not None
            else _iter_storage_masks(graph, alignment_bytes, r))
    size_l, a_l, b_l, st_l, pd_l = [], [], [], [], []
    zero = np.zeros((len(cols) + 7) // 8, dtype=np.uint8)
    for size, st, pd in rows:
        size_l.append(size)
        a_k, b_k = big, -1  # first chain index in started / last chain index in pending
        sc = st & cmask
        if sc:
            a_k = (cpos[(sc & -sc).bit_length() - 1] if monotone
                   else min(cpos[i] for i in iter_bits(sc)))
        if pd == -1:
            b_k = big
        else:
            pc = pd & cmask
            if pc:
                b_k = (cpos[pc.bit_length() - 1] if monotone
                       else max(cpos[i] for i in iter_bits(pc)))
        a_l.append(a_k)
        b_l.append(b_k)
        if len(cols):
            st_l.append(np.packbits(np.frombuffer(st.to_bytes(nb, "little"), np.uint8)[byte]
                                    >> bit & 1))
            pd_l.append(zero if pd == -1 else np.packbits(
                np.frombuffer(pd.to_bytes(nb, "little"), np.uint8)[byte] >> bit & 1))
        else:
            st_l.append(zero)
            pd_l.append(zero)
    n_st = len(size_l)
    a_s = np.asarray(a_l, dtype=np.int64).reshape(n_st)
    b_s = np.asarray(b_l, dtype=np.int64).reshape(n_st)
    st_cols = np.stack(st_l) if n_st else np.zeros((0, len(zero)), np.uint8)
    pd_cols = np.stack(pd_l) if n_st else np.zeros((0, len(zero)), np.uint8)
    del st_l, pd_l
    sizes = np.asarray(size_l, dtype=np.float64).reshape(n_st)
    idx = np.arange(m + 1)

    def vecs(sel: np.ndarray) -> tuple[np.ndarray, ...]:
        """Chain/gap cost vectors of a storage subset for the 4 (alpha, beta) cases."""
        a, b, w = a_s[sel], b_s[sel], sizes[sel]

        def count(lo_ok: np.ndarray | None, hi_ok: np.ndarray | None, shift: int) -> np.ndarray:
            # sum of w over storages with (a <= i - shift) and (b >= i), per i in 0..m
            d = np.zeros(m + 3, dtype=np.float64)
            start = np.clip(a + shift if lo_ok is None else np.zeros_like(a), 0, m + 2)
            end = np.clip(b + 1 if hi_ok is None else np.full_like(b, m + 1), 0, m + 2)
            ok = start < end
            np.add.at(d, start[ok], w[ok])
            np.add.at(d, end[ok], -w[ok])
            return np.cumsum(d)[:m + 1]

        c00 = count(None, None, 0)
        c10 = count(True, None, 0)  # S already true
        c01 = count(None, True, 0)  # P already true
        c11 = count(True, True, 0)
        g00 = count(None, None, 1)
        g10 = count(True, None, 1)
        g01 = count(None, True, 1)
        g11 = count(True, True, 1)
        return c00, c10, c01, c11, g00, g10, g01, g11

    # the chain alone (U empty): every storage in its (a, b) case
    base_all = vecs(np.ones(n_st, dtype=bool))
    best = int(base_all[0][:m].max()) if m else 0
    best_group: tuple[OpId, ...] = ()
    used = 0
    for _, gr in ranked[:max_groups]:
        k = len(gr)
        gidx = [r.index[o] for o in gr]
        local = {g: j for j, g in enumerate(gidx)}
        umask = 0
        for g in gidx:
            umask |= 1 << g
        pred_local = [0] * k
        lo_u = [0] * k
        hi_u = [m] * k
        for j, g in enumerate(gidx):
            for i in iter_bits(r.ancestors[g] & umask):
                pred_local[j] |= 1 << local[i]
            lo_u[j], hi_u[j] = _chain_window(r.ancestors[g], r.descendants[g], cmask, cpos,
                                             monotone, m)
        if any(lo_u[j] > hi_u[j] for j in range(k)):
            continue  # inconsistent (cannot happen for a true chain); skip
        ds = _down_sets(pred_local, max_down_sets)
        if ds is None:
            continue
        used += 1
        # storage classes by (started & U, pending & U)
        # storage classes by (started & U, pending & U): the bits at U's columns per storage
        ucols = [col_of[g] for g in gidx]
        bits = np.concatenate((_gather_bits(st_cols, ucols), _gather_bits(pd_cols, ucols)),
                              axis=1)
        touched = bits.any(axis=1)
        fixed_v = vecs(~touched)
        cls_v = []
        t_idx = np.nonzero(touched)[0]
        if len(t_idx):
            uniq, first, inv = np.unique(bits[t_idx], axis=0, return_index=True,
                                         return_inverse=True)
            inv = inv.reshape(-1)
            for c in np.argsort(first, kind="stable"):  # classes by first storage, as before
                sel = np.zeros(n_st, dtype=bool)
                sel[t_idx[inv == c]] = True
                row = uniq[c].tolist()
                loc_st = sum(1 << j for j in range(k) if row[j])
                loc_pd = sum(1 << j for j in range(k) if row[k + j])
                cls_v.append((loc_st, loc_pd, vecs(sel)))

        def chain_cost(d: int, fixed_v=fixed_v, cls_v=cls_v) -> np.ndarray:
            tot = fixed_v[0].copy()
            for loc_st, loc_pd, v in cls_v:
                al = bool(loc_st & d)
                be = bool(loc_pd & ~d)
                tot += v[(1 if al else 0) + (2 if be else 0)]
            return tot

        def gap_cost(d: int, u: int, fixed_v=fixed_v, cls_v=cls_v) -> np.ndarray:
            tot = fixed_v[4].copy()
            du = d | (1 << u)
            for loc_st, loc_pd, v in cls_v:
                al = bool(loc_st & du)
                be = bool(loc_pd & ~d)
                tot += v[4 + (1 if al else 0) + (2 if be else 0)]
            return tot

        inf = np.inf
        val: dict[int, np.ndarray] = {}
        # U op j must be done before chain op i >= hi_u[j]: with down-set d the chain can
        # step while no op outside d is needed, i.e. up to the lowest hi_u of those
        needed_at = [(hi_u[j], j) for j in range(k) if hi_u[j] < m]
        for d in ds:  # ascending ints: every subset comes before its supersets
            v = np.full(m + 1, inf)
            if d == 0:
                v[0] = 0.0
            for u in iter_bits(d):
                prev = d & ~(1 << u)
                if prev not in val or pred_local[u] & ~prev:
                    continue
                cand = np.maximum(val[prev], gap_cost(prev, u))
                ok = (idx >= lo_u[u]) & (idx <= hi_u[u])
                v = np.where(ok, np.minimum(v, cand), v)
            cc = chain_cost(d)
            # chain steps: v[i+1] = min(v[i+1], max(v[i], cc[i])) where allowed; the needed set only
            # grows with i, so the allowed steps are a prefix
            stop = min((h for h, j in needed_at if not d >> j & 1), default=m)
            val[d] = _chain_scan(v, cc, stop)
        full = (1 << k) - 1
        res = val.get(full)
        if res is None:
            continue
        gb = res[m]
        if np.isfinite(gb) and int(gb) > best:
            best, best_group = int(gb), tuple(gr)
    _logger.debug("chain-group bound: %d ops in chain, %d groups", m, used)
    return ChainGroupBound(best + resident, best_group, m, used)


def peak_window_chain_bound(
    graph: Graph,
    order: Sequence[OpId],
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    half_widths: Sequence[int] = (1, 2, 4),
    max_peaks: int = 2,
    reach: Reachability | None = None,
    masks: StorageMasks | None = None,
    max_down_sets: int = 4096,
) -> ChainGroupBound:
    """:func:`chain_group_lower_bound` with the chain and the groups taken from an order's peak.

    The chain is :func:`greedy_chain` of ``order`` without the ops within ``min(half_widths)``
    steps of a peak step (each of the first ``max_peaks`` steps at the peak); the groups are
    the ops off the chain within ``w`` steps of a peak step, for each ``w`` of
    ``half_widths``.  The chain then runs through what
    the order holds around its peak, and the dynamic programme over a group's interleavings
    decides whether another placement of the ops at the peak could lower it: on GPT-2 small
    b1 t1024 with ``torch.utils.checkpoint`` (dropout on) the group of the three ops at the
    peak (an MLP weight-gradient matmul, its input-gradient matmul and a transpose) proves
    the planned peak optimal, where the heavy-path chain with one free-branch group fell
    9 MiB short.  Valid for every order whatever ``order`` is (any chain of comparable ops
    with any groups disjoint from it gives a bound).  One pass over the storages' masks.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> from roam_core.oracle.simulate import simulate
    >>> g = diamond()
    >>> b = peak_window_chain_bound(g, g.op_ids, 512)
    >>> b.bound_bytes <= simulate(g, g.op_ids, alignment_bytes=512).peak_bytes
    True
    """
    from roam_core.oracle.simulate import simulate

    r = reach if reach is not None else reachability(graph)
    prof = simulate(graph, order, alignment_bytes=alignment_bytes)
    if not order:
        return ChainGroupBound(prof.resident_bytes, (), 0, 0)
    live = prof.live_bytes
    top = max(live)
    peaks = [s for s, b in enumerate(live) if b == top][:max_peaks]
    widths = sorted(set(half_widths))

    def window(ps: int, w: int) -> Sequence[OpId]:
        return order[max(0, ps - w): ps + w + 1]

    # the chain skips the narrowest windows; the wider ones add the ops off the chain
    chain = greedy_chain(order, r, {op for ps in peaks for op in window(ps, widths[0])})
    on_chain = set(chain)
    groups = [gr for gr in dict.fromkeys(tuple(op for op in window(ps, w) if op not in on_chain)
                                         for w in widths for ps in peaks) if gr]
    return chain_group_lower_bound(graph, order, alignment_bytes, chain=chain, groups=groups,
                                   reach=r, masks=masks,
                                   max_group_ops=max((len(gr) for gr in groups), default=1),
                                   max_down_sets=max_down_sets)
