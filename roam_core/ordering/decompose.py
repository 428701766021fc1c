"""ROAM's tree-based task division: nested forward/backward rings around the loss.

Key points
----------
A *key point* is an op with ``asap == alap`` (:mod:`roam_core.model.reach`): every other op is its
ancestor or descendant, so it sits at the same step in every valid order.  Cutting a valid
base order just before every key point gives *units*: runs of consecutive steps whose op sets
are the same in every valid order.  Re-ordering inside a unit never loses optimality.

The tree (ROAM's ``generate_subtask_flexible``, ``docs/design/roam_method.md`` §2.2)
------------------------------------------------------------------------------------
1. The unit holding the loss op (phase ``LOSS``, the last one in the order; no names) is the
   centre.  A *ring* grows outward from it, adding the next forward unit and the next
   backward/optimizer unit together while the ring owns at most ``node_limit`` ops (NL), one
   side alone when only that fits; then the next ring starts.  Each ring is the parent of the
   ring inside it.
2. When one side runs out, what is left (the head of the forward, or the tail of the
   backward/optimizer) goes to the outer task (``"root"``) if it has at most NL ops, else it
   is cut into ``"tail"`` sub-tasks of consecutive units with at most NL ops each.
3. A unit with more than NL ops is cut into ``"segment"`` windows of NL consecutive steps of
   the base order; they are children of the sub-task that reached the unit.  (Windows are
   valid sub-problems, but ops cannot cross a window border.)

Every op belongs to exactly one sub-task (its ``op_ids``, children's ops excluded).

Tensor classes per sub-task (``docs/design/roam_method.md`` §2.3), judged on the base order:
the storages
a sub-task's ops create or touch are CIFI (created and freed inside), CIFO (created inside,
freed outside: read later, or a graph output), COFI (created outside, freed inside: its last
user is inside) and ``boundary`` (created and freed outside, touched inside).  A storage is
*freed* at its last user (its producer when nobody reads it); graph outputs are never freed
inside.  Since sub-tasks own whole units or windows, which sub-task holds that last user does
not depend on how each sub-task orders its own ops.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from roam_core.base.errors import ConfigError
from roam_core.base.status import SolveStatus
from roam_core.model.graph import DEFAULT_ALIGNMENT_BYTES, Graph, OpId, Phase, TensorId
from roam_core.model.plan import SolveRecord
from roam_core.model.reach import Reachability, key_points

if TYPE_CHECKING:
    from roam_core.oracle.simulate import MemoryProfile

__all__ = ["SubTask", "TaskTree", "decompose", "units"]

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SubTask:
    """One node of the task tree.

    Parameters
    ----------
    id : str
        ``"root"`` for the outer task, then ``"t1"``, ``"t2"``, ...
    kind : str
        ``"outer"``, ``"ring"``, ``"tail"`` or ``"segment"``.
    op_ids : tuple of OpId
        The ops ordered by this sub-task (children's ops excluded), in program order.
    children : tuple of str
        Child sub-task ids.
    parent : str or None
        Parent id (``None`` for the root).
    created_inside_freed_inside : tuple of TensorId
        CIFI storages.
    created_inside_freed_outside : tuple of TensorId
        CIFO storages.
    created_outside_freed_inside : tuple of TensorId
        COFI storages.
    boundary : tuple of TensorId
        Storages live across the sub-task and touched inside (liveness only).
    """

    id: str
    kind: str
    op_ids: tuple[OpId, ...]
    children: tuple[str, ...]
    parent: str | None
    created_inside_freed_inside: tuple[TensorId, ...]
    created_inside_freed_outside: tuple[TensorId, ...]
    created_outside_freed_inside: tuple[TensorId, ...]
    boundary: tuple[TensorId, ...]


@dataclass(frozen=True)
class TaskTree:
    """The sub-tasks of one planning run.

    Parameters
    ----------
    root : str
        Id of the outer task.
    subtasks : Mapping of str to SubTask
        Every sub-task by id (parents before children in iteration order is not promised).
    graph : Graph or None
        The graph it was built for (used by :meth:`to_summary`).
    base_order : tuple of OpId
        The valid order it was cut from (the "before" order of :meth:`to_summary`).
    node_limit : int
        NL used.
    """

    root: str
    subtasks: Mapping[str, SubTask]
    graph: Graph | None = field(default=None, compare=False, repr=False)
    base_order: tuple[OpId, ...] = field(default=(), compare=False, repr=False)
    node_limit: int = 0

    def task_of_op(self) -> dict[OpId, str]:
        """The sub-task owning each op."""
        return {op: st.id for st in self.subtasks.values() for op in st.op_ids}

    def walk(self) -> list[SubTask]:
        """Sub-tasks in depth-first pre-order from the root."""
        out, stack = [], [self.root]
        while stack:
            st = self.subtasks[stack.pop()]
            out.append(st)
            stack.extend(reversed(st.children))
        return out

    def to_summary(self, order: Sequence[OpId], records: Sequence[SolveRecord] = (),
                   alignment_bytes: int = DEFAULT_ALIGNMENT_BYTES) -> dict[str, Any]:
        """JSON summary (for ``Plan.task_tree``) of the tree with ``order`` as the result.

        Each node: ``id, kind, num_ops, steps`` (``[start, end)`` runs of its own ops in
        ``order``), ``peak_before_bytes`` / ``peak_after_bytes`` (peak at its own steps in the
        base order / in ``order``, resident bytes included), ``status, objective_bytes,
        best_bound_bytes, gap, wall_time_s`` (from the ``stage == "order"`` record of that
        sub-task, if any), ``num_cifi, num_cifo, num_cofi, children`` (nested nodes).
        """
        from roam_core.oracle.simulate import simulate

        before = after = None
        if self.graph is not None:
            after = simulate(self.graph, order, alignment_bytes=alignment_bytes)
            if self.base_order:
                before = simulate(self.graph, self.base_order, alignment_bytes=alignment_bytes)
        pos_after = {op: i for i, op in enumerate(order)}
        pos_before = {op: i for i, op in enumerate(self.base_order)}
        recs = {r.task_id: r for r in records if r.stage == "order"}

        def peak(prof: MemoryProfile | None, pos: Mapping[OpId, int],
                 ops: Sequence[OpId]) -> int | None:
            if prof is None or not ops or not pos:
                return None
            return max(prof.live_bytes[pos[o]] for o in ops) + prof.resident_bytes

        def node(tid: str, children: list[dict[str, Any]]) -> dict[str, Any]:
            st = self.subtasks[tid]
            steps = sorted(pos_after[o] for o in st.op_ids if o in pos_after)
            runs: list[list[int]] = []
            for s in steps:
                if runs and runs[-1][1] == s:
                    runs[-1][1] = s + 1
                else:
                    runs.append([s, s + 1])
            rec = recs.get(tid)
            obj = rec.objective if rec is not None else None
            bound = rec.best_bound if rec is not None else None
            gap = (obj - bound) / obj if obj and bound is not None else None
            return {
                "id": tid, "kind": st.kind, "num_ops": len(st.op_ids), "steps": runs,
                "peak_before_bytes": peak(before, pos_before, st.op_ids),
                "peak_after_bytes": peak(after, pos_after, st.op_ids),
                "status": str(rec.status if rec is not None else SolveStatus.NONE),
                "objective_bytes": obj, "best_bound_bytes": bound,
                "gap": gap, "wall_time_s": rec.wall_time_s if rec is not None else 0.0,
                "num_cifi": len(st.created_inside_freed_inside),
                "num_cifo": len(st.created_inside_freed_outside),
                "num_cofi": len(st.created_outside_freed_inside),
                "children": children,
            }

        # children first, by a stack: a recursive closure would hold itself (a cycle through
        # its cell) and with it the tree, the graph and the position maps until the
        # collector's next run
        done: dict[str, dict[str, Any]] = {}
        todo = [(self.root, False)]
        while todo:
            tid, ready = todo.pop()
            kids = self.subtasks[tid].children
            if ready:
                done[tid] = node(tid, [done.pop(c) for c in kids])
            else:
                todo.append((tid, True))
                todo.extend((c, False) for c in kids)
        return done[self.root]


def units(order: Sequence[OpId], reach: Reachability | Sequence[OpId]
          ) -> list[tuple[int, int]]:
    """``[start, end)`` step runs of ``order`` cut just before every key point.

    ``reach`` is the graph's :class:`Reachability` or its key points
    (:func:`~roam_core.model.reach.key_points`).

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> from roam_core.model.reach import reachability
    >>> units(["a", "c", "b", "d"], reachability(diamond()))
    [(0, 3), (3, 4)]
    """
    pos = {op: i for i, op in enumerate(order)}
    keys = reach.key_points() if isinstance(reach, Reachability) else reach
    cuts = sorted({0, len(order)} | {pos[k] for k in keys})
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def _classes(graph: Graph, ops: Sequence[OpId], pos: Mapping[OpId, int]
             ) -> tuple[tuple[TensorId, ...], ...]:
    inside = set(ops)
    outputs = set(graph.outputs)
    touched = graph.storages_touched(ops)
    cifi: list[TensorId] = []
    cifo: list[TensorId] = []
    cofi: list[TensorId] = []
    bnd: list[TensorId] = []
    for s in touched:
        t = graph.tensors[s]
        if t.producer is None:
            continue
        created_in = t.producer in inside
        if s in outputs:
            freed_in = False
        elif t.consumers:
            freed_in = max(t.consumers, key=pos.__getitem__) in inside
        else:
            freed_in = created_in
        if created_in:
            (cifi if freed_in else cifo).append(s)
        else:
            (cofi if freed_in else bnd).append(s)
    return tuple(cifi), tuple(cifo), tuple(cofi), tuple(bnd)


def decompose(
    graph: Graph,
    order: Sequence[OpId],
    *,
    node_limit: int = 60,
    reach: Reachability | None = None,
) -> TaskTree:
    """Split ``graph`` into ROAM's task tree, cutting the valid base ``order``.

    Parameters
    ----------
    graph : Graph
        The (rewritten) graph; its key points decide the units.
    order : sequence of OpId
        A valid order of ``graph``.
    node_limit : int
        NL: the most ops a sub-task orders itself.
    reach : Reachability, optional
        ``reachability(graph)`` if already computed; without it the key points come from
        :func:`~roam_core.model.reach.key_points` (no ``O(N^2)`` bitsets).

    Returns
    -------
    TaskTree

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> g = tiny_train_step()
    >>> tree = decompose(g, g.op_ids, node_limit=3)
    >>> [(st.id, st.kind, len(st.op_ids)) for st in tree.walk()]
    [('root', 'outer', 2), ('t1', 'ring', 0), ('t2', 'segment', 3), ('t3', 'segment', 3)]
    """
    if node_limit < 1:
        raise ConfigError(f"node_limit must be at least 1, not {node_limit}")
    order = tuple(order)
    keys = reach.key_points() if reach is not None else key_points(graph)
    pos = {op: i for i, op in enumerate(order)}
    us = units(order, keys)
    nl = node_limit
    weight = _unit_weight(us, nl)
    center = _loss_unit(graph, order, us, pos)
    rings, rest_left, rest_right = _rings(us, center, weight, nl)
    tails, outer = _tails(rest_left, rest_right, weight, nl)
    specs = _tree_specs(rings, tails, outer, us, nl)
    subtasks = _subtasks(graph, order, pos, us, specs, weight)
    tree = TaskTree("root", subtasks, graph, order, nl)
    _logger.info("task tree of %s: %d units, %d rings, %d tails, %d sub-tasks (NL %d)",
                 graph.name, len(us), len(rings), len(tails), len(subtasks), nl)
    return tree


def _unit_weight(us: Sequence[tuple[int, int]], nl: int) -> Callable[[int], int]:
    """Ops a unit adds to the sub-task holding it (0 for an oversized unit: its ops go to
    segment windows instead)."""
    def weight(u: int) -> int:
        a, b = us[u]
        return b - a if b - a <= nl else 0

    return weight


def _loss_unit(graph: Graph, order: Sequence[OpId], us: Sequence[tuple[int, int]],
               pos: Mapping[OpId, int]) -> int | None:
    """Step 1: the unit holding the last loss op (the centre of the rings), if any."""
    losses = [op for op in order if graph.op(op).phase == Phase.LOSS]
    if not losses:
        return None
    lp = pos[losses[-1]]
    return next(k for k, (a, b) in enumerate(us) if a <= lp < b)


def _rings(us: Sequence[tuple[int, int]], center: int | None, weight: Callable[[int], int],
           nl: int) -> tuple[list[list[int]], list[int], list[int]]:
    """Step 2: rings of units grown around the centre, both sides at once while they fit in
    NL ops, else the lighter side; the units left over on each side."""
    if center is None:
        return [], [], list(range(len(us)))
    rings: list[list[int]] = []
    cur, size = [center], weight(center)
    lo, hi = center - 1, center + 1
    while lo >= 0 and hi < len(us):
        wl, wr = weight(lo), weight(hi)
        if size + wl + wr <= nl:
            cur += [lo, hi]
            size += wl + wr
            lo, hi = lo - 1, hi + 1
        elif size + min(wl, wr) <= nl:
            if wl <= wr:
                cur.append(lo)
                size += wl
                lo -= 1
            else:
                cur.append(hi)
                size += wr
                hi += 1
        else:
            rings.append(cur)
            cur, size = [], 0
    if cur:
        rings.append(cur)
    return rings, list(range(lo + 1)), list(range(hi, len(us)))


def _tails(rest_left: list[int], rest_right: list[int], weight: Callable[[int], int],
           nl: int) -> tuple[list[list[int]], list[int]]:
    """Step 3: the leftover units: all in the outer task when they fit in NL ops, else cut
    into tails of at most NL ops per side."""
    if sum(weight(u) for u in rest_left + rest_right) <= nl:
        return [], rest_left + rest_right
    tails: list[list[int]] = []
    for side in (rest_left, rest_right):
        cur: list[int] = []
        size = 0
        for u in side:
            if cur and size + weight(u) > nl:
                tails.append(cur)
                cur, size = [], 0
            cur.append(u)
            size += weight(u)
        if cur:
            tails.append(cur)
    return tails, []


def _tree_specs(rings: list[list[int]], tails: list[list[int]], outer: list[int],
                us: Sequence[tuple[int, int]], nl: int) -> dict[str, dict[str, Any]]:
    """Step 4: the tree's shape: root (outer units), nested rings (innermost deepest),
    tails under the root, and NL-op segment windows under the task holding an oversized
    unit."""
    specs: dict[str, dict[str, Any]] = {}
    counter = itertools.count(1)

    def new(kind: str, unit_ids: list[int]) -> str:
        tid = f"t{next(counter)}"
        specs[tid] = {"kind": kind, "units": unit_ids, "children": [], "parent": None}
        return tid

    specs["root"] = {"kind": "outer", "units": outer, "children": [], "parent": None}
    ring_ids = [new("ring", r) for r in rings]
    for inner, outer_ring in itertools.pairwise(ring_ids):
        specs[outer_ring]["children"].append(inner)
        specs[inner]["parent"] = outer_ring
    if ring_ids:
        specs["root"]["children"].append(ring_ids[-1])
        specs[ring_ids[-1]]["parent"] = "root"
    for t in tails:
        tid = new("tail", t)
        specs["root"]["children"].append(tid)
        specs[tid]["parent"] = "root"
    for owner in list(specs):
        for u in specs[owner]["units"]:
            a, b = us[u]
            if b - a <= nl:
                continue
            for w in range(a, b, nl):
                tid = new("segment", [])
                specs[tid]["window"] = (w, min(b, w + nl))
                specs[tid]["parent"] = owner
                specs[owner]["children"].append(tid)
    return specs


def _subtasks(graph: Graph, order: tuple[OpId, ...], pos: Mapping[OpId, int],
              us: Sequence[tuple[int, int]], specs: Mapping[str, Mapping[str, Any]],
              weight: Callable[[int], int]) -> dict[str, SubTask]:
    """Step 5: every sub-task's ops (program order) and storage classes."""
    index = {op: i for i, op in enumerate(graph.op_ids)}
    subtasks: dict[str, SubTask] = {}
    for tid, sp in specs.items():
        if "window" in sp:
            a, b = sp["window"]
            ops = list(order[a:b])
        else:
            ops = [op for u in sp["units"] if weight(u) for op in order[us[u][0]:us[u][1]]]
        ops.sort(key=index.__getitem__)
        cifi, cifo, cofi, bnd = _classes(graph, ops, pos)
        subtasks[tid] = SubTask(tid, sp["kind"], tuple(ops), tuple(sp["children"]),
                                sp["parent"], cifi, cifo, cofi, bnd)
    return subtasks
