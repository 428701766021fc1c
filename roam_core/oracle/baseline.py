"""The eager baseline: what PyTorch itself would use for a training step.

Two baseline orders are reported:

* **program order**: the order the ops were traced in, which is the order eager PyTorch
  runs them;
* **moved-state order** (:func:`moved_state_order`): program order with every optimizer-state
  creation op moved to just before its first user.  torch 2.13's Adam creates *all* state
  (``zeros_like`` of every parameter) before the first parameter update, which inflates the
  program-order peak by about two parameter copies; the ROAM paper's "PyTorch" baseline
  behaves like the moved order (see ``docs/design/calibration.md``).

State creation ops are found structurally, not by name: optimizer-phase ops that allocate
storage but read no planned (non-resident) storage, so nothing computed in the step feeds
them.  Moving such an op later keeps every order constraint: its predecessors stay before it,
and it is placed before all of its successors.

:func:`eager_report` gathers the baseline figures: the peak of each order as the live-bytes
oracle (:func:`~roam_core.oracle.simulate.simulate`) sees it and as the caching-allocator model
(:mod:`roam_core.oracle.allocator_sim`) sees it (``allocated`` and ``reserved``), the lower bounds
of :mod:`roam_core.oracle.bounds`, and byte totals by tensor kind and by phase.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from roam_core.base.checks import require_type
from roam_core.base.errors import ConfigError
from roam_core.model.graph import (
    DEFAULT_ALIGNMENT_BYTES,
    EdgeReason,
    Graph,
    OpId,
    Order,
    Phase,
    TensorKind,
    round_size,
)
from roam_core.model.reach import reachability, topological_indices
from roam_core.oracle.allocator_sim import simulate_allocator
from roam_core.oracle.bounds import best_lower_bound, live_set_lower_bound
from roam_core.oracle.simulate import simulate

__all__ = ["EagerReport", "eager_report", "moved_state_order", "state_creation_ops"]

_logger = logging.getLogger(__name__)

#: Key of :attr:`EagerReport.bytes_by_phase` for storages that exist before the step.
RESIDENT_PHASE = "resident"


def state_creation_ops(graph: Graph) -> tuple[OpId, ...]:
    """:meth:`Graph.state_creation_ops <roam_core.model.graph.Graph.state_creation_ops>`.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> state_creation_ops(tiny_train_step())
    ()
    """
    return graph.state_creation_ops()


def moved_state_order(graph: Graph) -> Order:
    """Program order with each state-creation op moved to just before its first successor.

    Ops without successors stay where they are.  Several ops moved in front of the same op
    keep their program order.  The result honours every data and control edge.

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> moved_state_order(chain3())
    ('a', 'b', 'c')
    """
    ids = graph.op_ids
    topo = topological_indices(graph)  # program order when it is topological
    rank = {ids[i]: r for r, i in enumerate(topo)}
    moved = set(state_creation_ops(graph))
    # sort key: kept op -> (rank, 1, 0); moved op -> (min first key of successors, 0, rank)
    key: dict[OpId, tuple[int, int, int]] = {}
    for i in reversed(topo):
        op = ids[i]
        succ = graph.successors(op)
        if op in moved and succ:
            key[op] = (min(key[s][0] for s in succ), 0, rank[op])
        else:
            key[op] = (rank[op], 1, 0)
    order = tuple(sorted(ids, key=key.__getitem__))
    _logger.debug("moved %d state-creation ops", sum(1 for op in moved if graph.successors(op)))
    return order


@dataclass(frozen=True, slots=True)
class EagerReport:
    """Baseline figures of a graph (all byte counts rounded to ``alignment_bytes``).

    Parameters
    ----------
    n_ops, n_storages, n_aliases : int
        Graph size.
    control_edges_by_reason : Mapping of str to int
        Number of control edges per :class:`~roam_core.model.graph.EdgeReason` value.
    simulated_peak_bytes : int
        Peak of program order per the live-bytes oracle (``simulate``), resident included.
    peak_allocated_bytes, peak_reserved_bytes : int
        Program-order peaks per the caching-allocator model (like
        ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``).  ``allocated`` can
        exceed ``simulated_peak_bytes`` by unsplit block tails.
    peak_step : int
        Step of program order where the oracle's peak is reached.
    peak_op : OpId or None
        The op at ``peak_step``.
    moved_state_simulated_peak_bytes, moved_state_peak_allocated_bytes,
    moved_state_peak_reserved_bytes : int
        The same for :func:`moved_state_order`.
    moved_state_ops : int
        How many state-creation ops that order moved.
    lower_bound_bytes : int
        Best known lower bound on the peak of every valid order.
    lower_bound_method : str
        Which bound gave ``lower_bound_bytes``.
    live_set_lower_bound_bytes : int
        The live-set lower bound.
    lower_bound_op : OpId or None
        Op where the live-set bound is attained.
    resident_bytes : int
        Bytes live for the whole step.
    bytes_by_kind : Mapping of str to int
        Total bytes of the storages of each :class:`~roam_core.model.graph.TensorKind` (every kind
        is a key).
    bytes_by_phase : Mapping of str to int
        Total bytes allocated by the ops of each :class:`~roam_core.model.graph.Phase` (every phase
        is a key), plus ``"resident"``.
    peak_bytes_by_kind : Mapping of str to int
        Bytes of each kind live at the program-order peak (resident included).
    alignment_bytes : int
        The rounding used.
    """

    n_ops: int
    n_storages: int
    n_aliases: int
    control_edges_by_reason: Mapping[str, int]
    simulated_peak_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_step: int
    peak_op: OpId | None
    moved_state_simulated_peak_bytes: int
    moved_state_peak_allocated_bytes: int
    moved_state_peak_reserved_bytes: int
    moved_state_ops: int
    lower_bound_bytes: int
    lower_bound_method: str
    live_set_lower_bound_bytes: int
    lower_bound_op: OpId | None
    resident_bytes: int
    bytes_by_kind: Mapping[str, int] = field(default_factory=dict)
    bytes_by_phase: Mapping[str, int] = field(default_factory=dict)
    peak_bytes_by_kind: Mapping[str, int] = field(default_factory=dict)
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready dict of every field."""
        return {name: (dict(v) if isinstance(v, Mapping) else v)
                for name in self.__dataclass_fields__
                for v in [getattr(self, name)]}


def _by_kind(graph: Graph, alignment_bytes: int) -> dict[str, int]:
    out = {k.value: 0 for k in TensorKind}
    for t in graph.tensors.values():
        out[t.kind.value] += round_size(t.size_bytes, alignment_bytes)
    return out


def _by_phase(graph: Graph, alignment_bytes: int) -> dict[str, int]:
    out = {p.value: 0 for p in Phase}
    out[RESIDENT_PHASE] = 0
    for t in graph.tensors.values():
        size = round_size(t.size_bytes, alignment_bytes)
        key = RESIDENT_PHASE if t.producer is None else graph.op(t.producer).phase.value
        out[key] += size
    return out


def _live_by_kind(graph: Graph, order: Order, step: int, alignment_bytes: int) -> dict[str, int]:
    from roam_core.oracle.simulate import lifetimes

    out = {k.value: 0 for k in TensorKind}
    lts = lifetimes(graph, order)
    for t in graph.tensors.values():
        lt = lts.get(t.id)
        if t.producer is None or (lt is not None and lt.start <= step < lt.end):
            out[t.kind.value] += round_size(t.size_bytes, alignment_bytes)
    return out


def eager_report(
    graph: Graph,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
    *,
    progress: Callable[[str], None] | None = None,
) -> EagerReport:
    """Baseline figures of ``graph``: eager peaks, moved-state peaks, bounds, byte totals.

    Parameters
    ----------
    graph : Graph
        The graph.
    alignment_bytes : int
        Rounding for the oracle and the bounds (the allocator model always uses 512 B).
    progress : callable, optional
        Called with a short message before each stage (the CLI prints them).

    Returns
    -------
    EagerReport

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> r = eager_report(tiny_train_step())
    >>> r.simulated_peak_bytes, r.peak_allocated_bytes, r.peak_reserved_bytes, r.lower_bound_bytes
    (3072, 3072, 2097152, 3072)
    """
    require_type(graph, Graph, "eager_report: graph", ConfigError)
    say = progress or (lambda _msg: None)
    say("simulating program order")
    prog = simulate(graph, alignment_bytes=alignment_bytes)
    say("replaying program order through the allocator model")
    alloc = simulate_allocator(graph)
    say("moving optimizer-state creation to first use")
    moved = moved_state_order(graph)
    n_moved = sum(1 for a, b in zip(moved, graph.op_ids) if a != b)
    moved_prof = simulate(graph, moved, alignment_bytes=alignment_bytes)
    moved_alloc = simulate_allocator(graph, moved) if n_moved else alloc
    say("computing reachability and lower bounds")
    reach = reachability(graph)
    live_lb = live_set_lower_bound(graph, alignment_bytes, reach=reach)
    best = best_lower_bound(graph, alignment_bytes, reach=reach)
    edges = {r.value: 0 for r in EdgeReason}
    for e in graph.control_edges:
        edges[e.reason.value] += 1
    peak_op = graph.op_ids[prog.peak_step] if prog.peak_step >= 0 else None
    return EagerReport(
        n_ops=len(graph.ops),
        n_storages=len(graph.tensors),
        n_aliases=len(graph.aliases),
        control_edges_by_reason=edges,
        simulated_peak_bytes=prog.peak_bytes,
        peak_allocated_bytes=alloc.peak_allocated_bytes,
        peak_reserved_bytes=alloc.peak_reserved_bytes,
        peak_step=prog.peak_step,
        peak_op=peak_op,
        moved_state_simulated_peak_bytes=moved_prof.peak_bytes,
        moved_state_peak_allocated_bytes=moved_alloc.peak_allocated_bytes,
        moved_state_peak_reserved_bytes=moved_alloc.peak_reserved_bytes,
        moved_state_ops=len([op for op in state_creation_ops(graph)
                             if graph.successors(op)]),
        lower_bound_bytes=best.bound_bytes,
        lower_bound_method=best.method,
        live_set_lower_bound_bytes=live_lb.bound_bytes,
        lower_bound_op=live_lb.op_id,
        resident_bytes=prog.resident_bytes,
        bytes_by_kind=_by_kind(graph, alignment_bytes),
        bytes_by_phase=_by_phase(graph, alignment_bytes),
        peak_bytes_by_kind=_live_by_kind(graph, graph.op_ids, prog.peak_step, alignment_bytes),
        alignment_bytes=alignment_bytes,
    )
