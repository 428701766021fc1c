"""The summary card's rows, and one-line reasons for results that look odd."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.core.formatting import fmt_bytes
from roam_core.model.graph import Graph, OpId, TensorKind, round_size
from roam_core.model.parallel import parallel_of
from roam_core.model.plan import Plan, SolveRecord

__all__ = ["parallel_rows", "summary_table", "why_notes"]


def parallel_rows(graph: Graph) -> list[tuple[str, str]]:
    """The data-parallel setting of a rank's step (none for a one-device graph).

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> parallel_rows(chain3())
    []
    """
    par = parallel_of(graph)
    if not par.active:
        return []
    comm = sum(t.size_bytes for t in graph.tensors.values()
               if t.kind is TensorKind.COMMUNICATION)
    return [("parallel", f"{par.describe()}: the step of one rank, every byte is per rank"),
            ("communication buffers", f"{fmt_bytes(comm)} allocated over the step "
             "(gathered parameters, all-gather, reduce-scatter and bucket buffers)")]


def summary_table(plan: Plan, before_peak_bytes: int, before_label: str,
                  reserved_bytes: int | None, *, show_eager: bool = True
                  ) -> list[tuple[str, str]]:
    """(label, value) rows of the summary card (``show_eager=False`` when the "before" order
    is eager already: its peak is not repeated)."""
    saved = before_peak_bytes - plan.planned_peak_bytes
    pct = 100.0 * saved / before_peak_bytes if before_peak_bytes else 0.0
    rows = [
        (f"{before_label} peak (allocated)", fmt_bytes(before_peak_bytes)),
        (f"{before_label} reserved (caching allocator)", fmt_bytes(reserved_bytes)),
        *([("eager peak (allocated)", fmt_bytes(plan.baseline_peak_bytes))]
          if show_eager else []),
        (f"planned peak ({plan.method})", fmt_bytes(plan.planned_peak_bytes)),
        ("saving", f"{fmt_bytes(saved)} ({pct:.1f} %)"),
        ("arena", fmt_bytes(plan.arena_bytes)),
        ("fragmentation", f"{100 * plan.fragmentation:.2f} %"),
        ("lower bound", fmt_bytes(plan.lower_bound_bytes)),
        ("proven gap", "-" if plan.proven_gap is None else f"{plan.proven_gap:.4f}"),
        ("solve time", f"{plan.solve_seconds:.2f} s"),
    ]
    stages: dict[str, list[SolveRecord]] = {}
    for r in plan.provenance:
        stages.setdefault(r.stage, []).append(r)
    for stage, recs in stages.items():
        statuses: dict[str, int] = {}
        for r in recs:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        st = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
        rows.append((f"stage {stage}", f"{len(recs)} calls, "
                     f"{sum(r.wall_time_s for r in recs):.2f} s ({st})"))
    rows.extend(("note", n) for n in plan.notes)
    return rows


def why_notes(graph: Graph, plan: Plan, before_order: Sequence[OpId], before_label: str,
              before_curve: np.ndarray, after_curve: np.ndarray) -> list[str]:
    """One-line reasons for results that look odd, where the plan knows them.

    * optimizer ops that run before the loss in the plan but after it in the compared order;
    * a planned curve above the compared one for much of the time before its peak;
    * no saving at all, when the peak equals the lower bound.
    """
    notes: list[str] = []
    pos_a = {o: i for i, o in enumerate(plan.order)}
    pos_b = {o: i for i, o in enumerate(before_order)}
    losses = [o.id for o in graph.ops if o.phase.value == "loss"]
    if losses and all(x in pos_a and x in pos_b for x in losses):
        la, lb = min(pos_a[x] for x in losses), min(pos_b[x] for x in losses)
        hoisted = [o.id for o in graph.ops if o.phase.value == "optimizer"
                   and pos_a.get(o.id, la) < la and pos_b.get(o.id, -1) > lb]
        if hoisted:
            made = sum(round_size(graph.tensors[t].size_bytes, plan.alignment_bytes)
                       for op in hoisted for t in graph.storages_created(op))
            notes.append(
                f"{len(hoisted)} optimizer ops run before the loss in the plan (after it in "
                f"{before_label}): they need nothing from this step's backward (step counters, "
                f"bias corrections, state set-up), so they may run first; "
                + (f"together they allocate {fmt_bytes(made)}." if made else
                   "they allocate nothing."))
    n = min(len(before_curve), len(after_curve))
    if n:
        k = int(np.argmax(after_curve[:n]))
        if k > 4:
            above = float(np.mean(after_curve[:k] > before_curve[:k]))
            if above >= 0.25:
                notes.append(
                    f"The planned curve is above {before_label} for {100 * above:.0f} % of the "
                    f"steps before its peak: only the peak sets the memory a step needs, so "
                    f"below it the planner is free to keep tensors longer or run work earlier; "
                    f"that costs nothing.")
    before_peak = float(np.max(before_curve, initial=0))
    if plan.planned_peak_bytes >= before_peak and plan.lower_bound_bytes \
            and plan.lower_bound_bytes >= before_peak:
        notes.append(f"No saving is possible here: {before_label} already reaches the lower "
                     f"bound ({fmt_bytes(plan.lower_bound_bytes)}), the bytes that some step of "
                     f"every valid order must hold at once.")
    return notes
