"""The walkthrough's steps, the lifetimes a plan changed most, and the teaching graphs'
lessons."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.analysis.layout_view import LayoutView
from app.analysis.peaks import peak_tensors, tensor_label
from app.core.formatting import fmt_bytes, order_name
from roam_core.model.graph import Graph, OpId, TensorId, round_size
from roam_core.model.plan import Plan
from roam_core.oracle.simulate import lifetimes

__all__ = ["TEACHING_GRAPHS", "TEACHING_LESSONS", "WalkStep", "lifetime_changes",
           "teaching_lesson", "walkthrough"]

#: One step of the walkthrough: ``(title, text, [(tensor id, link label)])``.
WalkStep = tuple[str, str, Sequence[tuple[str, str]]]


#: Graph-name prefixes of the teaching graphs (the walkthrough opens by itself on them).
TEACHING_GRAPHS = ("teach_order", "teach_updates", "teach_layout", "teach_recompute", "mlp",
                   "residual_block", "tiny_gpt", "tiny_train_step")


#: What each ``teach_*`` graph teaches (graph-name prefix -> one line, shown in the walkthrough).
TEACHING_LESSONS: dict[str, str] = {
    "teach_order": "the order. A wide branch makes a big temporary that no backward needs; "
                   "program order makes it on top of the narrow branch's saved activations, "
                   "the planner runs the wide branch first and frees it before they exist.",
    "teach_updates": "weight-update placement. Big weights, small batch: in program order every "
                     "gradient is alive when the optimizer runs at the end; the planner applies "
                     "each update as soon as its gradient is ready and frees the gradients one "
                     "by one.",
    "teach_layout": "the layout. Activation sizes swell and shrink: the caching allocator's "
                    "segments reserve about twice the peak (step 3), while roam's arena gives "
                    "every tensor a fixed offset within the peak.",
    "teach_recompute": "recomputation. A chain of cheap tanh layers whose outputs are all saved: "
                       "the order is already at the floor, and only a memory budget (the budget "
                       "view) lowers the peak, by dropping activations and re-running them in "
                       "the backward.",
}


def teaching_lesson(graph_name: str) -> str | None:
    """The one line a ``teach_*`` graph teaches (``None`` for other graphs).

    Examples
    --------
    >>> teaching_lesson("teach_order-b256-steady").split(".")[0]
    'the order'
    >>> teaching_lesson("gpt2-b1-t128-steady") is None
    True
    """
    for prefix, line in TEACHING_LESSONS.items():
        if graph_name.startswith(prefix):
            return line
    return None


def lifetime_changes(graph: Graph, plan: Plan, before_order: Sequence[OpId], limit: int = 6
                     ) -> list[tuple[TensorId, int, int, int]]:
    """Storages whose lifetime the plan changed most, by bytes × steps:
    ``(id, steps before, steps after, bytes x steps saved)``, largest change first."""
    a = plan.alignment_bytes
    after, before = lifetimes(graph, plan.order), lifetimes(graph, before_order)
    rows: list[tuple[TensorId, int, int, int]] = []
    for tid, la in after.items():
        lb = before.get(tid)
        if lb is None or graph.tensors[tid].producer is None:
            continue
        nb, na = lb.end - lb.start, la.end - la.start
        if nb != na:
            size = round_size(graph.tensors[tid].size_bytes, a)
            rows.append((tid, nb, na, size * (nb - na)))
    rows.sort(key=lambda r: (-abs(r[3]), r[0]))
    return rows[:limit]


def walkthrough(graph: Graph, plan: Plan, before_order: Sequence[OpId], before_label: str,
                before_curve: np.ndarray, before_view: LayoutView, after_view: LayoutView,
                reserved_bytes: int | None) -> list[WalkStep]:
    """The guided walkthrough: ``(title, text, [(tensor id, link label)])`` per step.

    On a ``teach_*`` graph a first line says what the graph teaches (:func:`teaching_lesson`).

    1. where the compared order peaks and which tensors make that peak;
    2. what the planner moved: the largest lifetime changes (clickable);
    3. how the layout packs the arena (and where to ask why a tensor sits at its offset);
    4. what recomputation would add.
    """
    k = int(np.argmax(before_curve)) if len(before_curve) else 0
    top = peak_tensors(before_view, k)
    lesson = teaching_lesson(graph.name)
    order = order_name(before_label)
    step1 = (f"1. The {order} peaks at step {k}: "
             f"{fmt_bytes(int(before_curve[k]) if len(before_curve) else 0)}. "
             "The largest tensors live there:",
             [(t, f"{tensor_label(graph, t)} ({fmt_bytes(b)})") for t, b in top])
    moved = lifetime_changes(graph, plan, before_order)
    step2 = ("2. What the planner moved: the tensors whose lifetime changed most "
             "(bytes × steps; click one to see it everywhere):" if moved else
             "2. The planner changed no lifetime: the order was already as good as it gets.",
             [(t, f"{tensor_label(graph, t)}: {nb} → {na} steps ({'−' if d > 0 else '+'}"
                  f"{fmt_bytes(abs(d))}·steps)") for t, nb, na, d in moved])
    pk = int(np.argmax(plan.live_bytes)) if plan.live_bytes else 0
    ptop = peak_tensors(after_view, pk)
    step3 = (f"3. The layout packs every tensor into one arena of {fmt_bytes(plan.arena_bytes)} "
             f"({100 * plan.fragmentation:.1f} % above the planned peak); the caching allocator "
             f"reserves {fmt_bytes(reserved_bytes)} for the {order}. Click a "
             "rectangle of the layout and Explain says why it sits at its offset, for example "
             "the tensors at the planned peak:",
             [(t, f"{tensor_label(graph, t)} ({fmt_bytes(b)})") for t, b in ptop])
    step4: tuple[str, Sequence[tuple[str, str]]] = (
             "4. Recomputation (freeing an activation and computing it again in the backward) "
             "lowers the peak further at the cost of extra compute; a plan without a memory "
             "budget recomputes nothing: give one (the budget view, or roam plan --budget).", [])
    intro: list[WalkStep] = ([("what this graph teaches", f"What this graph teaches: {lesson}", [])]
             if lesson else [])
    return [*intro, ("where the peak is", *step1), ("what the planner moved", *step2),
            ("how the layout packs", *step3), ("what recomputation would add", *step4)]

