"""Weight-update placement as graph rewrites: extra ``WEIGHT_UPDATE`` control edges.

ROAM fixes where each parameter's optimizer update runs *before* ordering (its
``constrain_weight_updates_early`` / ``adjust_apply_position`` / ``constrain_adam_zero_fanin``
passes, see ``docs/design/roam_method.md`` §2.4).  Without that, an update branch may run
anywhere after
its gradient, so almost no op of the backward is a key point and the tree decomposition has
nothing to cut at.  This module does the same job generically (no node names):

1. **Placement.**  Each per-parameter update group
   (:func:`roam_core.ordering.update_groups.update_groups`)
   is given a slot in a *reference order*:

   * ``"asap"``: right after its last ancestor (gradient ready, every backward reader of the
     parameter done): ROAM's forced-early rule;
   * ``"cost_aware"`` (default): the slot with the lowest simulated peak of the whole order,
     earliest on ties (:func:`roam_core.ordering.update_insertion.best_update_insertion`).  This
     is ASAP
     *except* where running the branch early would raise the peak: ROAM's
     ``adjust_apply_position`` estimates that with ``live + 3 * grad`` against the activation
     peak at the loss; here every slot is scored exactly against the current profile, so a
     branch is delayed exactly when, and as far as, that lowers the peak (mobilenet_v2's
     classifier update is the standard case, see ``docs/design/calibration.md``);
   * ``"none"``: no group is pinned.

   The group is then pinned between its neighbours in the reference order: an edge from the
   nearest preceding op ``Y`` that is neither its own nor a loose op (see 2) to every source
   op of the group, and from every sink op of the group to the nearest such following op
   ``Z``.  ``Y`` or ``Z`` may belong to another group: a run of delayed updates at the end
   of the step then forms a chain, one group per unit, instead of one big free block.
   Each source is pinned after its own nearest such op, each sink before its own (a group
   need not be contiguous in the reference order).  Before that, state-init ops and in-place
   state updates of the group sink to just before their first consumer when that cannot
   extend any lifetime, so the group forms one short block.
2. **Loose ops** outside groups are pinned too (ROAM's ``constrain_adam_zero_fanin`` and its
   model-specific post-processing, made generic): zero-fan-in ops (constants, fresh buffers)
   and pure views (``detach``, ``t``) run just in time, with an edge from the latest
   predecessor (in the reference order) of their first consumer; sinks run before the next
   successor of their latest predecessor.  State-init ops inside a group (``zeros_like``) are
   sources of the group and are pinned with it.

Correctness
-----------
*Acyclic.*  Every added edge ``u -> v`` has ``u`` before ``v`` in the reference order, which is
a valid order of the input graph.  The reference order is therefore a topological order of the
rewritten graph, which is hence acyclic (and :meth:`Graph.with_control_edges` re-checks it).

*Semantics preserved.*  Edges are only ever *added*: the data, ``MUTATION`` and ``RNG`` edges
of the input are all still present, so every order that is valid for the rewritten graph is
valid for the input graph (the set of valid orders can only shrink), and every read still
sees the same write version and random ops keep their relative order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from roam_core.base.errors import ConfigError
from roam_core.model.graph import (
    DEFAULT_ALIGNMENT_BYTES,
    ControlEdge,
    EdgeReason,
    Graph,
    OpId,
    Order,
    TensorId,
)
from roam_core.model.reach import Reachability, adjacency, reachability

if TYPE_CHECKING:
    from roam_core.ordering.update_groups import UpdateGroup

__all__ = ["GroupPlacement", "RewriteResult", "asap_insertion", "place_weight_updates"]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GroupPlacement:
    """Where one update group was placed in the reference order.

    Parameters
    ----------
    param : TensorId
        The parameter the group updates.
    num_ops : int
        Ops in the group.
    position : int
        Step of the group's first op in the reference order.
    earliest_position : int
        The first step it could take (right after its last ancestor).
    delayed : bool
        True when some non-update op runs between its last ancestor and the group.
    after_op, before_op : OpId or None
        The pins: ``after_op -> group -> before_op`` (``None`` when at an end).
    """

    param: TensorId
    num_ops: int
    position: int
    earliest_position: int
    delayed: bool
    after_op: OpId | None
    before_op: OpId | None


@dataclass(frozen=True)
class RewriteResult:
    """The rewritten graph and how it was obtained.

    Parameters
    ----------
    graph : Graph
        The input graph plus ``edges``.
    edges : tuple of ControlEdge
        The added edges (all ``EdgeReason.WEIGHT_UPDATE``).
    order : tuple of OpId
        The reference order: valid for ``graph`` (hence for the input graph too).
    placements : tuple of GroupPlacement
        One per pinned update group.
    policy : str
        The placement policy used.
    """

    graph: Graph
    edges: tuple[ControlEdge, ...]
    order: Order
    placements: tuple[GroupPlacement, ...]
    policy: str

    @property
    def num_delayed(self) -> int:
        """Update groups that do not run as early as possible."""
        return sum(p.delayed for p in self.placements)


def asap_insertion(graph: Graph, reference: Sequence[OpId],
                   groups: Sequence[Sequence[OpId]], reach: Reachability | None = None) -> Order:
    """``reference`` with each group moved right after its last ancestor (ROAM's early rule).

    Groups are processed in the order given; each keeps its ops' relative order.  A group
    that cannot run as one block (an op outside it descends from one member and precedes
    another member's last ancestor) has each op moved right after its own last ancestor.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> g = tiny_train_step()
    >>> asap_insertion(g, ["mm", "relu", "loss", "ones", "update", "relu_bw", "t", "grad_w"],
    ...                [("update",)])[-3:]
    ('t', 'grad_w', 'update')
    """
    reach = reach if reach is not None else reachability(graph)
    in_group = {op for grp in groups for op in grp}
    seq = [op for op in reference if op not in in_group]
    rank = {op: i for i, op in enumerate(reference)}
    for grp in groups:
        ops = sorted(grp, key=rank.__getitem__)
        anc = desc = 0
        for op in ops:
            anc |= reach.ancestors[reach.index[op]]
            desc |= reach.descendants[reach.index[op]]
        last = _last_in(seq, anc, reach)
        if any(desc >> reach.index[op] & 1 for op in seq[:last + 1]):
            # one op at a time: an op's ancestors all precede its descendants in a valid seq
            for op in ops:
                k = _last_in(seq, reach.ancestors[reach.index[op]], reach)
                seq.insert(k + 1, op)
        else:
            seq[last + 1:last + 1] = ops
    return tuple(seq)


def _last_in(seq: Sequence[OpId], mask: int, reach: Reachability) -> int:
    """Index of the last op of ``seq`` in the bitset ``mask`` (-1 if none)."""
    last = -1
    for k, op in enumerate(seq):
        if mask >> reach.index[op] & 1:
            last = k
    return last


def _reference(graph: Graph, policy: str, groups: Sequence[UpdateGroup],
               reach: Reachability, alignment_bytes: int) -> Order:
    from roam_core.ordering.update_insertion import best_update_insertion

    ref = tuple(best_update_insertion(graph, alignment_bytes=alignment_bytes))
    if policy == "asap":
        first = {op: i for i, op in enumerate(graph.op_ids)}
        by_program = sorted((g.op_ids for g in groups), key=lambda g: min(first[o] for o in g))
        ref = asap_insertion(graph, ref, by_program, reach)
    return ref


def _loose_ops(graph: Graph, grouped: set[OpId]) -> list[OpId]:
    """Ops outside the groups that have a consumer and allocate nothing, or have no
    predecessor (zero fan-in): they float in the partial order unless pinned."""
    return [z for z in graph.op_ids if z not in grouped and graph.successors(z)
            and (not graph.predecessors(z) or not graph.storages_created(z))]


#: :func:`_sink_moves` numbers its linked list this far apart (a move takes a midpoint;
#: when a gap runs out the list is numbered again).
_KEY_GAP = 1 << 32


def _sink_moves(graph: Graph, ref: list[OpId], grouped: set[OpId],
                state_init: Sequence[OpId] = ()) -> list[OpId]:
    """Move loose ops just in time in ``ref`` (moves keep it valid); returns the loose ops.

    What :func:`_loose_edges` then pins:

    * zero-fan-in ops, pure views and other allocation-free ops (in-place updates) run just
      before their first consumer ``c``: an edge from the latest predecessor of ``c`` (else
      from the op just before them).  Moving such an op later is valid (its predecessors
      are earlier still) and frees no byte later: a view's consumer reads the viewed storage
      itself; an in-place op is moved only when some later op still reads what it reads.
    * sinks (no successor) are pinned before the next successor of their latest predecessor
      (else before the next op), so that a dangling view cannot float to the end;
    * isolated ops (no edge at all) are pinned between their neighbours;
    * ``state_init`` ops (zero-fan-in ops inside update groups) are moved just in time too,
      but pinned with their group, not here.

    Moving a zero-fan-in op or a pure view just before its first consumer ``c`` never raises
    the peak: the steps it leaves lose its outputs, and at its new step the live set is the
    one entering ``c`` plus its outputs, which ``c``'s step holds anyway.  (An op with an
    output nobody reads is not moved: that output would not be live at ``c``.)
    """
    # 1. moves first (reverse program order: consumers settle before their producers), on a
    #    linked list with integer order keys (midpoints; renumbered when a gap runs out) ...
    loose = _loose_ops(graph, grouped)
    init = set(state_init)
    loose_set = set(loose)
    # group ops that allocate nothing (in-place state updates) may sink too; every move is
    # checked not to extend a lifetime (``sinkable``) nor to leave an unread output behind
    in_place = {z for z in grouped if z not in init and graph.successors(z)
                and not graph.storages_created(z)}
    outputs = set(graph.outputs)

    def outputs_held(z: OpId) -> bool:
        """Every storage ``z`` creates is still live at its first consumer's step."""
        return all(graph.tensors[t].consumers or t in outputs or not graph.tensors[t].size_bytes
                   for t in graph.storages_created(z))

    movers = [z for z in graph.op_ids
              if ((z in init and graph.successors(z) and not graph.predecessors(z))
                  or z in loose_set or z in in_place) and outputs_held(z)]

    # the linked list and its keys by program index (lists, not dicts keyed by id)
    adj = adjacency(graph)
    index, succs, ids = adj.index, adj.succs, graph.op_ids
    gap = _KEY_GAP
    key = [0] * len(ids)
    prv = [-1] * len(ids)
    nxt = [-1] * len(ids)
    seq = [index[op] for op in ref]
    for k, v in enumerate(seq):
        key[v] = k * gap
        if k:
            prv[v] = seq[k - 1]
            nxt[seq[k - 1]] = v
    head = seq[0] if seq else -1

    def sinkable(z: OpId, c: int) -> bool:
        kc = key[c]
        for s_ in graph.storages_read(z):
            t = graph.tensors[s_]
            if t.producer is None or s_ in outputs:
                continue
            if not any(u != z and key[index[u]] >= kc for u in t.consumers):
                return False
        return True

    def walk() -> list[int]:
        out, cur = [], head
        while cur >= 0:
            out.append(cur)
            cur = nxt[cur]
        return out

    for z in reversed(movers):
        zi = index[z]
        c = min(succs[zi], key=key.__getitem__)
        if nxt[zi] == c or key[c] < key[zi] or not sinkable(z, c):
            continue
        p_, n_ = prv[zi], nxt[zi]  # unlink z
        if p_ < 0:
            head = n_
        else:
            nxt[p_] = n_
        if n_ >= 0:
            prv[n_] = p_
        before = prv[c]  # link z just before c
        prv[zi], nxt[zi], prv[c] = before, c, zi
        if before < 0:
            head = zi
        else:
            nxt[before] = zi
        lo = key[before] if before >= 0 else key[c] - gap
        key[zi] = (lo + key[c]) // 2
        if key[zi] in (lo, key[c]):  # gap exhausted: renumber
            for k, v in enumerate(walk()):
                key[v] = k * gap
    ref[:] = [ids[v] for v in walk()]
    return loose


def _loose_edges(graph: Graph, ref: Sequence[OpId], grouped: set[OpId], loose: Sequence[OpId],
                 floating: set[OpId], reach: Reachability,
                 pins: Sequence[ControlEdge]) -> list[ControlEdge]:
    """Edges pinning the loose ops where :func:`_sink_moves` left them (see its docstring).

    A loose op ``z`` placed just before its consumer ``c`` gets an edge from the latest
    predecessor of ``c`` placed before ``z`` (group ``pins`` count as predecessors); when that
    adds nothing (none, or it is an ancestor of ``z`` already) the nearest preceding anchor
    op (not ``floating``) is used.  Every edge runs forward in ``ref``.
    """
    pos = {op: i for i, op in enumerate(ref)}
    extra_preds: dict[OpId, list[OpId]] = {}
    for e in pins:
        extra_preds.setdefault(e.dst, []).append(e.src)
    edges: list[ControlEdge] = []

    def add(u: OpId, v: OpId) -> bool:
        if pos[u] < pos[v] and not reach.is_ancestor(u, v) and not reach.is_ancestor(v, u):
            edges.append(ControlEdge(u, v, EdgeReason.WEIGHT_UPDATE))
            return True
        return False

    def anchor_before(z: OpId) -> OpId | None:
        return next((ref[k] for k in range(pos[z] - 1, -1, -1) if ref[k] not in floating),
                    None)

    for z in loose:
        c = min(graph.successors(z), key=pos.__getitem__)
        others = [p for p in (*graph.predecessors(c), *extra_preds.get(c, ()))
                  if p != z and pos[p] < pos[z]]
        if others and add(max(others, key=pos.__getitem__), z):
            continue
        y = anchor_before(z)
        if y is not None:
            add(y, z)
    for z in graph.op_ids:
        preds = graph.predecessors(z)
        if z in grouped or graph.successors(z):
            continue
        if not preds:  # isolated (e.g. a counter bumped in place): keep it where it is
            if pos[z] > 0:
                add(ref[pos[z] - 1], z)
            if pos[z] < len(ref) - 1:
                add(z, ref[pos[z] + 1])
            continue
        if pos[z] == len(ref) - 1:
            continue
        p = max(preds, key=pos.__getitem__)
        later = [w for w in graph.successors(p) if w != z and pos[w] > pos[z]]
        add(z, min(later, key=pos.__getitem__) if later else ref[pos[z] + 1])
    return edges


def place_weight_updates(
    graph: Graph,
    *,
    policy: str = "cost_aware",
    reference: Sequence[OpId] | None = None,
    zero_fanin_just_in_time: bool = True,
    alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES,
) -> RewriteResult:
    """Pin every update group (and zero-fan-in op) with extra control edges.

    Parameters
    ----------
    graph : Graph
        A training-step graph.
    policy : str
        ``"cost_aware"``, ``"asap"`` or ``"none"`` (see the module docstring).
    reference : sequence of OpId, optional
        A valid order in which the groups already sit where they should; default: computed
        from ``policy``.
    zero_fanin_just_in_time : bool
        Also pin zero-fan-in ops just before their first consumer.
    alignment_bytes : int
        Rounding of the storage sizes when the cost-aware reference order is scored.

    Returns
    -------
    RewriteResult

    Raises
    ------
    ConfigError
        For an unknown policy.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> from roam_core.oracle.validate import check_order
    >>> r = place_weight_updates(tiny_train_step())
    >>> [(e.src, e.dst) for e in r.edges], check_order(r.graph, r.order)
    ([('relu_bw', 't')], [])
    """
    from roam_core.ordering.config import UPDATE_POLICIES
    from roam_core.ordering.update_groups import update_groups

    if policy not in UPDATE_POLICIES:
        raise ConfigError(f"unknown update policy {policy!r}; known: {UPDATE_POLICIES}")
    reach = reachability(graph)
    found = update_groups(graph, alignment_bytes=alignment_bytes) if policy != "none" else ()
    groups = [tuple(g.op_ids) for g in found]
    params = [g.param for g in found]
    ref = list(reference) if reference is not None else list(
        _reference(graph, policy, found, reach, alignment_bytes))
    grouped = {op for g in groups for op in g}
    edges: list[ControlEdge] = []
    loose: list[OpId] = []
    if zero_fanin_just_in_time:
        loose = _sink_moves(graph, ref, grouped, [op for g in found for op in g.state_init_ops])
    pos = {op: i for i, op in enumerate(ref)}
    # pins go to anchor ops: neither update ops nor loose ops (those are pinned themselves)
    loose_set = set(loose)
    floating = grouped | loose_set
    placements = []
    for param, grp in zip(params, groups, strict=True):
        members = set(grp)
        first = min(pos[o] for o in grp)
        last = max(pos[o] for o in grp)
        # neighbours: any op that is neither loose nor in this group (another group's op
        # chains the two groups, so a run of delayed updates still has key points)
        def before(k: int, members: set[OpId] = members) -> OpId | None:
            return next((ref[j] for j in range(k - 1, -1, -1)
                         if ref[j] not in members and ref[j] not in loose_set), None)

        def after(k: int, members: set[OpId] = members) -> OpId | None:
            return next((ref[j] for j in range(k + 1, len(ref))
                         if ref[j] not in members and ref[j] not in loose_set), None)

        y, z = before(first), after(last)
        sources = [o for o in grp if not any(p in members for p in graph.predecessors(o))]
        sinks = [o for o in grp if not any(s in members for s in graph.successors(o))]
        for src in sources:
            ys = before(pos[src])
            if ys is not None and not reach.is_ancestor(ys, src):
                edges.append(ControlEdge(ys, src, EdgeReason.WEIGHT_UPDATE))
        for snk in sinks:
            zs = after(pos[snk])
            if zs is not None and not reach.is_ancestor(snk, zs):
                edges.append(ControlEdge(snk, zs, EdgeReason.WEIGHT_UPDATE))
        # the latest ancestor in a valid order is always a direct predecessor
        anc_pos = [pos[p] for o in grp for p in graph.predecessors(o) if p not in members]
        earliest = max(anc_pos) + 1 if anc_pos else 0
        between = sum(1 for k in range(earliest, first) if ref[k] not in grouped)
        placements.append(GroupPlacement(param, len(grp), first, earliest, between > 0, y, z))
    if zero_fanin_just_in_time:
        edges += _loose_edges(graph, ref, grouped, loose, floating, reach, edges)
    edges = list(dict.fromkeys(edges))
    out = graph.with_control_edges(edges) if edges else graph
    order = tuple(ref)
    _logger.info("update placement %s: %d groups (%d delayed), %d edges", policy,
                 len(placements), sum(p.delayed for p in placements), len(edges))
    return RewriteResult(out, tuple(edges), order, tuple(placements), policy)
