"""Plan rules: a plan is checked against the graph it claims to be made for.

``FINGERPRINT`` when it was made for another graph; then its order
(:mod:`~roam_core.oracle.validate.order_rules`), its recompute ops
(:mod:`~roam_core.oracle.validate.recompute_rules`), its arena
(:mod:`~roam_core.oracle.validate.arena_rules`), on the expanded graph when it recomputes,
and every figure it states (:mod:`~roam_core.oracle.validate.figure_rules`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roam_core.base.errors import ConfigError, GraphError, Violation, ViolationKind
from roam_core.model.graph import Graph
from roam_core.model.recompute_ops import expand_graph
from roam_core.oracle.validate.arena_rules import check_arena
from roam_core.oracle.validate.figure_rules import check_alignment, check_figures
from roam_core.oracle.validate.order_rules import check_order
from roam_core.oracle.validate.recompute_rules import check_recompute

if TYPE_CHECKING:
    from roam_core.model.plan import Plan

__all__ = ["check_plan"]


def check_plan(graph: Graph, plan: Plan) -> list[Violation]:
    """Check a :class:`~roam_core.model.plan.Plan` against ``graph``: fingerprint, order,
    arena, and the figures it states.

    A plan with recompute ops is checked by :func:`check_recompute`, and its order and arena
    on the expanded graph.  The figures (peaks, bounds, alignment, FLOPs:
    :func:`~roam_core.oracle.validate.figure_rules.check_figures`) are checked when the
    order is a permutation of the ops.

    Returns
    -------
    list of Violation
        ``FINGERPRINT`` first when the plan was made for another graph (the order and layout
        are still checked when they can be).

    Raises
    ------
    ConfigError
        ``graph`` is not a Graph or ``plan`` not a Plan.
    """
    _check_types(graph, plan)
    out: list[Violation] = []
    fp = graph.fingerprint()
    if plan.graph_fingerprint != fp:
        out.append(Violation(ViolationKind.FINGERPRINT, "plan",
                             f"plan was made for graph {plan.graph_fingerprint[:12]}, "
                             f"this graph is {fp[:12]}"))
    rops = tuple(getattr(plan, "recompute", ()) or ())
    if not rops:
        order_bad = check_order(graph, plan.order)
        out.extend(order_bad)
        out.extend(check_arena(graph, plan.order, plan.offsets, plan.arena_bytes,
                               plan.alignment_bytes))
        return out + _figures(graph, plan, graph, order_bad)
    own = check_recompute(graph, rops, plan.order)
    out.extend(own)
    try:
        g2 = expand_graph(graph, rops)
    except GraphError as e:
        if not own:
            out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, "recompute", str(e)))
        return out
    # a reader before its recompute op, or a recompute op before its input's producer,
    # is reported once, by check_recompute, not again as a broken data edge
    flagged = {v.subject_id for v in own}
    order_bad = check_order(g2, plan.order)
    out.extend(v for v in order_bad
               if not (v.kind in (ViolationKind.PRECEDENCE, ViolationKind.RNG_ORDER)
                       and v.subject_id in flagged))
    out.extend(check_arena(g2, plan.order, plan.offsets, plan.arena_bytes,
                           plan.alignment_bytes))
    return out + _figures(graph, plan, g2, order_bad)


_NOT_A_PERMUTATION = (ViolationKind.MISSING_OP, ViolationKind.DUPLICATE_OP,
                      ViolationKind.UNKNOWN_OP)


def _figures(graph: Graph, plan: Plan, expanded: Graph, order_bad: list[Violation]
             ) -> list[Violation]:
    """The figure rules, when the order is a permutation (else only the alignment)."""
    if any(v.kind in _NOT_A_PERMUTATION for v in order_bad):
        return check_alignment(plan)
    return check_figures(graph, plan, expanded)


def _check_types(graph: object, plan: object) -> None:
    from roam_core.model.plan import Plan

    if not isinstance(graph, Graph):
        raise ConfigError(f"check_plan needs a Graph, not {type(graph).__name__}")
    if not isinstance(plan, Plan):
        raise ConfigError(f"check_plan needs a Plan, not {type(plan).__name__}")
