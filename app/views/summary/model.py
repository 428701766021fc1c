"""The summary card's rows, and one-line reasons for results that look odd."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.core.formatting import fmt_bytes
from roam_core.model.graph import Graph, OpId, TensorKind, round_size
from roam_core.model.parallel import parallel_of
from roam_core.model.plan import Plan, SolveRecord
from roam_core.planner.headline import Headline, NextStep

__all__ = ["STAGE_WORDS", "STATUS_WORDS", "Summary", "bound_text", "headline",
           "headline_rows", "parallel_rows", "solver_details", "summary_table", "why_notes"]


#: The planner's stages (``SolveRecord.stage``) in words.
STAGE_WORDS: dict[str, str] = {
    "baseline": "scoring the baseline orders", "rewrite": "placing the weight updates",
    "order": "ordering the sub-tasks", "bound": "tightening the lower bound",
    "layout": "laying out the arena", "merge": "improving the layout",
    "recompute": "choosing what to recompute",
}
#: How a solve ended (``SolveStatus``), in words.
STATUS_WORDS: dict[str, str] = {
    "optimal": "proven optimal", "feasible": "improved, not proven optimal",
    "heuristic": "heuristic", "cancelled": "cut short by Cancel", "unknown": "no result",
    "timeout": "out of time", "infeasible": "proven impossible", "invalid": "solver error",
    "bound": "already at the lower bound", "hint": "no better order than its start",
    "trivial": "nothing to reorder", "none": "no solve",
}


@dataclass(frozen=True, slots=True)
class Summary:
    """The summary card: a headline, its second line, the table, the solver's record (folded
    away) and the one-line reasons (``why``)."""

    headline: str
    subline: str
    rows: tuple[tuple[str, str], ...]
    details: tuple[tuple[str, str], ...] = ()
    why: tuple[str, ...] = ()
    warning: str = ""


def headline(before_peak_bytes: int, plan: Plan | None, before_label: str) -> str:
    """The one line the page leads with.

    >>> headline(2**30, None, "eager (program order)")
    'eager (program order) peak 1.00 GiB: not planned yet (press Plan)'
    """
    if plan is None:
        return f"{before_label} peak {fmt_bytes(before_peak_bytes)}: not planned yet (press Plan)"
    saved = before_peak_bytes - plan.planned_peak_bytes
    pct = 100.0 * saved / before_peak_bytes if before_peak_bytes else 0.0
    verb = f"saves {fmt_bytes(saved)} ({pct:.1f} %)" if saved > 0 else (
        "no saving" if saved == 0 else f"{fmt_bytes(-saved)} more ({-pct:.1f} %)")
    return (f"peak {fmt_bytes(before_peak_bytes)} → {fmt_bytes(plan.planned_peak_bytes)}: "
            f"{verb}")


def bound_text(plan: Plan) -> str:
    """The lower bound and how far the plan is from it, in words (not a ratio).

    >>> from types import SimpleNamespace as P
    >>> bound_text(P(lower_bound_bytes=2**20, planned_peak_bytes=2**20))
    '1.00 MiB: the plan is at it (proven optimal)'
    >>> bound_text(P(lower_bound_bytes=100 * 2**20, planned_peak_bytes=103 * 2**20))
    '100.00 MiB: the plan is 3.00 MiB above it (at most 3.0 % from the best order)'
    """
    lb, peak = plan.lower_bound_bytes, plan.planned_peak_bytes
    if not lb:
        return "n/a (no bound computed)"
    if peak <= lb:
        return f"{fmt_bytes(lb)}: the plan is at it (proven optimal)"
    return (f"{fmt_bytes(lb)}: the plan is {fmt_bytes(peak - lb)} above it (at most "
            f"{100 * (peak - lb) / lb:.1f} % from the best order)")


def solver_details(plan: Plan) -> list[tuple[str, str]]:
    """How the planner spent its time, stage by stage, in words."""
    stages: dict[str, list[SolveRecord]] = {}
    for r in plan.provenance:
        stages.setdefault(r.stage, []).append(r)
    rows = []
    for stage, recs in stages.items():
        statuses: dict[str, int] = {}
        for r in recs:
            word = STATUS_WORDS.get(str(r.status), str(r.status))
            statuses[word] = statuses.get(word, 0) + 1
        how = ", ".join(f"{v} {k}" for k, v in sorted(statuses.items(), key=lambda kv: -kv[1]))
        n = len(recs)
        rows.append((STAGE_WORDS.get(stage, stage),
                     f"{sum(r.wall_time_s for r in recs):.2f} s, {n} solve{'s' * (n != 1)} "
                     f"({how})"))
    return rows


def headline_rows(h: Headline, setting: str, nxt: NextStep | None = None
                  ) -> list[tuple[str, str]]:
    """The honest headline as (label, value) rows: the saving against eager allocated and
    against eager reserved, named side by side, the tracing setting, and, when nothing is
    saved against eager allocated, the reason and the next step."""
    def saved(n: int, of: int) -> str:
        return f"{fmt_bytes(n)} ({100 * n / of:.1f} %)" if of else fmt_bytes(n)

    rows = [
        ("saving vs eager allocated",
         f"{saved(h.saved_vs_allocated_bytes, h.eager_allocated_bytes)}: planned peak "
         f"{fmt_bytes(h.planned_peak_bytes)} vs eager's {fmt_bytes(h.eager_allocated_bytes)}"),
        ("saving vs eager reserved",
         f"{saved(h.saved_vs_reserved_bytes, h.eager_reserved_bytes)}: arena "
         f"{fmt_bytes(h.arena_bytes)} vs eager's reserved {fmt_bytes(h.eager_reserved_bytes)} "
         "(what nvidia-smi shows)"),
        ("setting", setting),
    ]
    if h.extra_seconds > 0:
        rows.append(("recomputation time",
                     f"+{1e3 * h.extra_seconds:.3f} ms per step "
                     f"({100 * h.extra_seconds / max(h.step_seconds, 1e-12):.2f}% of "
                     f"{1e3 * h.step_seconds:.3f} ms, estimated on {h.device_profile})"))
    if h.reason is not None:
        rows.append(("why no saving" if h.saved_vs_allocated_bytes <= 0
                     else "why little saving", h.reason))
        if nxt is not None:
            rows.append(("next step", nxt.text()))
    return rows


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
    is eager already: its peak and the saving against it, which the headline rows give, are
    not repeated)."""
    saved = before_peak_bytes - plan.planned_peak_bytes
    pct = 100.0 * saved / before_peak_bytes if before_peak_bytes else 0.0
    short = before_label.split(" (")[0]  # "eager (program order)" -> "eager"
    rows = [
        (f"{short} peak (allocated)", fmt_bytes(before_peak_bytes)),
        (f"{short} reserved (caching allocator)", fmt_bytes(reserved_bytes)),
        *([("eager peak (allocated)", fmt_bytes(plan.baseline_peak_bytes))]
          if show_eager else []),
        (f"planned peak ({plan.method})", fmt_bytes(plan.planned_peak_bytes)),
        # against eager the headline rows above already say it
        *([(f"saving vs {before_label} (allocated)", f"{fmt_bytes(saved)} ({pct:.1f} %)")]
          if show_eager else []),
        ("arena", f"{fmt_bytes(plan.arena_bytes)} (+{100 * plan.fragmentation:.2f} % over the "
                  "peak: layout waste)"),
        ("lower bound", bound_text(plan)),
        ("planning time", f"{plan.solve_seconds:.2f} s"),
    ]
    rows.extend(("note", n) for n in plan.notes if not n.startswith("cancelled: this is"))
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
