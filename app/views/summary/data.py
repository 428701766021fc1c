"""The summary card of a stored graph and plan, against the chosen "before" order."""

from __future__ import annotations

from app.core import state
from app.core.formatting import fmt_bytes
from app.core.memo import memoised
from app.services.plan_data import after_data, before_data
from app.services.planning import CANCELLED_NOTE
from app.services.view_graph import without_reruns
from app.views.summary.model import (
    Summary,
    headline,
    headline_rows,
    parallel_rows,
    solver_details,
    summary_table,
    why_notes,
)
from roam_core.base.errors import RoamError
from roam_core.planner.headline import NextStep, next_step, plan_headline, setting_text

__all__ = ["summary", "summary_rows"]


def summary(graph_key: str, plan_key: str | None, base: str) -> Summary:
    """View 7: the headline, the table, the solver's record and the why notes."""
    graph = state.get_graph(graph_key)
    b = before_data(graph_key, base)
    before_peak = int(b.curve.max(initial=0))
    head = [("graph", f"{graph.name}: {len(graph.ops):,} ops, {len(graph.tensors):,} storages"),
            *parallel_rows(graph)]
    if not plan_key:
        return Summary(headline(before_peak, None, b.label),
                       f"{b.label} reserved (caching allocator): {fmt_bytes(b.reserved_bytes)}",
                       (*head, (f"{b.label} peak", fmt_bytes(before_peak)),
                        (f"{b.label} reserved", fmt_bytes(b.reserved_bytes)),
                        ("plan", "not planned yet: press Plan")))
    a = after_data(graph_key, plan_key)
    plan = a.plan
    # the honest headline: the saving against eager allocated and reserved, side by side
    eager = b if base == "eager" else before_data(graph_key, "eager")
    h = plan_headline(graph, plan, eager_reserved_bytes=eager.reserved_bytes)
    nxt = _next_step(graph_key, plan_key) if h.reason is not None else None
    head += headline_rows(h, setting_text(graph), nxt)
    # op by op against the baseline: the plan's re-runs left out of its order
    why = why_notes(graph, without_reruns(plan), b.order, b.label, b.curve, a.curve)
    sub = (f"arena {fmt_bytes(plan.arena_bytes)} (one buffer for every tensor) against "
           f"{fmt_bytes(b.reserved_bytes)} the caching allocator reserves for {b.label}")
    return Summary(headline(before_peak, plan, b.label), sub,
                   (*head, *summary_table(plan, before_peak, b.label, b.reserved_bytes,
                                          show_eager=base != "eager")),
                   tuple(solver_details(plan)), tuple(why),
                   CANCELLED_NOTE if CANCELLED_NOTE in plan.notes else "")


@memoised(8)
def _next_step(graph_key: str, plan_key: str) -> NextStep | None:
    """The frontier's knee and lowest point over the plan's order (greedy estimate)."""
    try:
        return next_step(state.get_graph(graph_key), state.get_plan(plan_key))
    except RoamError:
        return None


def summary_rows(graph_key: str, plan_key: str | None, base: str) -> list[tuple[str, str]]:
    """The summary as (label, value) rows, for the HTML report: headline first, then the
    table, the solver's record and the why notes (labelled ``"why"``)."""
    s = summary(graph_key, plan_key, base)
    return [("headline", s.headline), *(("warning", s.warning) for _ in s.warning[:1]),
            *s.rows, *s.details, *(("why", w) for w in s.why)]
