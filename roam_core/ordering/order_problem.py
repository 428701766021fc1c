"""The plain-data problem of re-ordering one sub-task inside a valid order, and its merge.

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

:func:`build_order_problem` makes an :class:`OrderProblem` (plain picklable data, solved by
:func:`roam_core.ordering.order_ilp.solve_order_problem`, possibly in a worker process);
:func:`merge_orders` / :func:`merge_all_orders` put the solved ranges back into the order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from roam_core.base.status import SolveStatus
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, TensorId, round_size
from roam_core.oracle.simulate import Lifetime, lifetimes
from roam_core.ordering.config import OrderSolverConfig

__all__ = [
    "OrderProblem",
    "OrderResult",
    "RangeProblem",
    "StorageTerm",
    "build_order_problem",
    "identity_orders",
    "merge_all_orders",
    "merge_orders",
    "problem_peak",
    "range_profile",
]


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
    stopped : str
        Why the solve stopped (one of ``StageCost``'s reasons): ``"done"``
        (proved, or no model needed), ``"at_bound"``, ``"work"`` (the deterministic limit),
        ``"time"`` (a safety limit) or ``"cancelled"``.
    deterministic_time_s : float
        CP-SAT's deterministic seconds spent (0 without a model).
    """

    task_id: str
    orders: tuple[tuple[OpId, ...], ...]
    peak_bytes: int
    hint_peak_bytes: int
    status: SolveStatus
    best_bound_bytes: int | None
    wall_time_s: float
    num_ops: int
    stopped: str = "done"
    deterministic_time_s: float = 0.0



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



def problem_peak(problem: OrderProblem, local_orders: Sequence[Sequence[int]]) -> int:
    """The peak of :func:`range_profile` over every range of ``problem`` run in
    ``local_orders`` (one local order per range)."""
    return max((max(range_profile(r, o)) for r, o in zip(problem.ranges, local_orders,
                                                         strict=True) if r.ops), default=0)


def identity_orders(problem: OrderProblem) -> list[list[int]]:
    """The base (hint) order of every range, as local indices."""
    return [list(range(len(r.ops))) for r in problem.ranges]


def merge_all_orders(order: Sequence[OpId],
                     solved: Iterable[tuple[OrderProblem, OrderResult]]) -> tuple[OpId, ...]:
    """:func:`merge_orders` of every ``(problem, result)`` in turn, on one list: the same
    order, ``O(N + merged ops)`` instead of a copy of the order per sub-task.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> g = diamond()
    >>> p = build_order_problem(g, g.op_ids, ["b", "c"])
    >>> res = OrderResult("t", (("c", "b"),), 0, 0, SolveStatus.FEASIBLE, None, 0.0, 2)
    >>> merge_all_orders(g.op_ids, [(p, res)])
    ('a', 'c', 'b', 'd')
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
