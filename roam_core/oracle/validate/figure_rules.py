"""Figure rules: every number a plan states is recomputed from the graph and compared.

A plan file carries figures that reports, the app and ``roam plan --json`` show as they are
(the planned peak, the saving against eager, the lower bound, the fragmentation, the extra
FLOPs of recomputation).  A plan whose order and layout are valid can still state a false
figure -- an edited file, a bug -- so each one is checked (``WRONG_FIGURE``, subject: the
field's name):

* ``alignment_bytes``: an integer ``>= 1`` (every other byte figure depends on it);
* ``resident_bytes``, ``planned_peak_bytes`` and ``live_bytes`` (when given): equal to the
  live bytes of the plan's order, recomputed here (:func:`order_profile`);
* ``baseline_peak_bytes``: equal to the peak of program order (the eager baseline);
* ``lower_bound_bytes``: at most the recomputed planned peak (a lower bound on the peak of
  every valid order cannot exceed the peak of a valid order);
* ``arena_bytes``: at least the planned peak (a layout holds every byte live at once);
  the fragmentation ``arena / peak - 1`` is then true and never negative;
* ``extra_flops``: the FLOPs of the recompute ops' sources, recomputed; ``step_flops``: 0
  (not stated) or the step's FLOPs, recomputed;
* ``solve_seconds``: a finite number ``>= 0``.

The live bytes are computed from :func:`~roam_core.oracle.validate.steps.live_spans`, not
taken from the simulator the planner uses.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from roam_core.base.errors import Violation, ViolationKind
from roam_core.model.graph import Graph, OpId, round_size
from roam_core.model.recompute_ops import op_flops, step_flops
from roam_core.oracle.validate.steps import live_spans

if TYPE_CHECKING:
    from roam_core.model.plan import Plan

__all__ = ["check_alignment", "check_figures", "order_profile"]


def order_profile(graph: Graph, order: Sequence[OpId], alignment_bytes: int
                  ) -> tuple[int, list[int]]:
    """``(resident bytes, planned bytes live at each step)`` of a valid ``order``.

    Examples
    --------
    >>> from roam_core.model.samples import diamond
    >>> g = diamond()
    >>> order_profile(g, g.op_ids, 1)
    (0, [100, 300, 350, 260])
    """
    spans = live_spans(graph, order)
    n = len(order)
    diff = [0] * (n + 1)
    resident = 0
    for t in graph.tensors.values():
        size = round_size(t.size_bytes, alignment_bytes)
        if not size:
            continue
        if t.producer is None:
            resident += size
            continue
        s, e = spans[t.id]
        diff[max(s, 0)] += size
        diff[min(e, n)] -= size
    return resident, list(itertools.accumulate(diff[:n]))


def _wrong(field: str, message: str) -> Violation:
    return Violation(ViolationKind.WRONG_FIGURE, field, f"{field}: {message}")


def check_alignment(plan: Plan) -> list[Violation]:
    """``WRONG_FIGURE`` unless ``plan.alignment_bytes`` is an integer ``>= 1``."""
    align = plan.alignment_bytes
    if isinstance(align, bool) or not isinstance(align, int) or align < 1:
        return [_wrong("alignment_bytes", f"{align!r} is not an integer >= 1")]
    return []


def check_figures(graph: Graph, plan: Plan, expanded: Graph) -> list[Violation]:
    """Check the figures ``plan`` states against ``graph`` (the graph it was made for) and
    ``expanded`` (the graph its order runs: ``graph`` with the recompute ops added).

    Call it only for an order that is a permutation of ``expanded``'s ops (the order rules
    report the others, and the figures of such an order mean nothing).

    Returns
    -------
    list of Violation
        ``WRONG_FIGURE`` records, one per false figure, naming the field.
    """
    bad = check_alignment(plan)
    if bad:
        return bad
    align = plan.alignment_bytes
    out: list[Violation] = []
    resident, live = order_profile(expanded, plan.order, align)
    peak = resident + max(live, default=0)
    if plan.resident_bytes != resident:
        out.append(_wrong("resident_bytes", f"states {plan.resident_bytes}, the graph's "
                                            f"resident storages take {resident}"))
    if plan.planned_peak_bytes != peak:
        out.append(_wrong("planned_peak_bytes", f"states {plan.planned_peak_bytes}, the "
                                                f"plan's order peaks at {peak}"))
    if plan.live_bytes and tuple(plan.live_bytes) != tuple(live):
        step = next((i for i, (a, b) in enumerate(zip(plan.live_bytes, live)) if a != b),
                    min(len(plan.live_bytes), len(live)))
        out.append(_wrong("live_bytes", f"differs from the order's live bytes from step "
                                        f"{step} on ({len(plan.live_bytes)} values for "
                                        f"{len(live)} steps)"))
    base_resident, base_live = order_profile(graph, graph.op_ids, align)
    base = base_resident + max(base_live, default=0)
    if plan.baseline_peak_bytes != base:
        out.append(_wrong("baseline_peak_bytes", f"states {plan.baseline_peak_bytes}, "
                                                 f"program order peaks at {base}"))
    if not 0 <= plan.lower_bound_bytes <= peak:
        out.append(_wrong("lower_bound_bytes", f"states {plan.lower_bound_bytes}, above the "
                                               f"peak {peak} that this valid order reaches"))
    if plan.arena_bytes < peak:
        out.append(_wrong("arena_bytes", f"states {plan.arena_bytes}, below the planned "
                                         f"peak {peak}"))
    out.extend(_flops_and_time(graph, plan))
    return out


def _flops_and_time(graph: Graph, plan: Plan) -> list[Violation]:
    """The recomputation FLOPs and the solve time."""
    out: list[Violation] = []
    try:
        extra = sum(op_flops(graph, graph.op(r.source)) for r in plan.recompute)
    except Exception:  # an unknown source: the recompute rules name it
        extra = None
    if extra is not None and plan.extra_flops != extra:
        out.append(_wrong("extra_flops", f"states {plan.extra_flops}, the recompute ops' "
                                         f"sources take {extra}"))
    if plan.step_flops:
        total = step_flops(graph)
        if plan.step_flops != total:
            out.append(_wrong("step_flops", f"states {plan.step_flops}, the step takes "
                                            f"{total}"))
    secs = plan.solve_seconds
    if isinstance(secs, bool) or not isinstance(secs, int | float) or not math.isfinite(secs) \
            or secs < 0:
        out.append(_wrong("solve_seconds", f"{secs!r} is not a finite number >= 0"))
    return out
