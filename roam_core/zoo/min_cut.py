"""torch's min-cut partitioner baseline for zoo graphs (:mod:`roam_core.trace.min_cut`).

The partitioner needs the model, not only roam's graph: a graph whose ``origin`` names a zoo
config is rebuilt (on the meta device), traced again to recover the FX program its op ids
refer to, and checked to be the *same* graph (fingerprint) before torch's decision is mapped
onto it.  Other graphs get "not applicable" with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from roam_core.model.graph import Graph, TensorId
from roam_core.trace.min_cut import MIN_CUT_BUDGETS, MinCutResult, min_cut_available, torch_min_cut

if TYPE_CHECKING:
    from roam_core.trace.traced_step import TracedStep

__all__ = ["NOT_ZOO", "min_cut_baselines", "zoo_min_cut"]

#: Why the baseline does not apply to a graph that is not a zoo trace.
NOT_ZOO = ("the graph is not a zoo model's trace: torch's partitioner needs the model "
           "(AOT autograd traces it again)")


def zoo_min_cut(graph: Graph, budgets: Sequence[float] = MIN_CUT_BUDGETS,
                traced: TracedStep | None = None) -> MinCutResult:
    """torch's min-cut decision at each budget for a zoo graph, as roam drop sets.

    Parameters
    ----------
    graph : Graph
        A graph traced from the zoo (``graph.origin["source"] == "zoo"``).
    budgets : sequence of float
        ``activation_memory_budget`` values in [0, 1].
    traced : roam_core.trace.TracedStep, optional
        roam's trace of this graph, when the caller has it (saves a re-trace).

    Returns
    -------
    MinCutResult
        ``reason`` is set when the baseline does not apply (not a zoo graph, a graph that
        the current tracer does not reproduce, torch without the partitioner, a mapping
        that fails).
    """
    from roam_core.trace.tracer import trace_fx
    from roam_core.zoo.registry import ZOO
    from roam_core.zoo.steps import build_zoo_step

    why = min_cut_available()
    if why is not None:
        return MinCutResult(reason=why)
    origin = dict(graph.origin or {})
    if origin.get("source") != "zoo" or origin.get("model") not in ZOO:
        return MinCutResult(reason="the graph is not a zoo model's trace: torch's partitioner "
                                   "needs the model (AOT autograd traces it again)")
    try:
        step = build_zoo_step(origin["model"], int(origin["batch_size"]),
                              origin.get("seq_len"), origin.get("setting", "steady"),
                              origin.get("optimizer"), "meta",
                              attention=origin.get("attention"))
    except Exception as e:
        return MinCutResult(reason=f"could not rebuild zoo model {origin.get('model')!r}: {e}")
    if traced is None:
        try:
            traced = trace_fx(step.model, step.example_inputs, step.loss_fn,
                              step.optimizer_factory, setting=origin.get("setting", "steady"),
                              name=graph.name, origin=origin)
        except Exception as e:
            return MinCutResult(reason=f"could not trace {origin['model']!r} again: {e}")
    if traced.graph.fingerprint() != graph.fingerprint():
        return MinCutResult(reason=f"tracing {origin['model']!r} again gives a different graph "
                                   f"(traced with torch {origin.get('torch', '?')}); re-trace "
                                   "it here to compare with torch's partitioner")
    return torch_min_cut(traced, step.model, step.example_inputs, step.loss_fn, budgets)


def min_cut_baselines(graph: Graph, budgets: Sequence[float] = MIN_CUT_BUDGETS,
                      traced: TracedStep | None = None
                      ) -> tuple[MinCutResult, dict[str, tuple[TensorId, ...]], list[str]]:
    """torch's min-cut decisions as the frontier's extra baselines.

    Parameters
    ----------
    graph : Graph
        A graph traced from the zoo.
    budgets : sequence of float
        ``activation_memory_budget`` values in [0, 1].
    traced : roam_core.trace.TracedStep, optional
        roam's trace of this graph, when the caller has it.

    Returns
    -------
    (MinCutResult, dict, list of str)
        The result, the drop set of each ``torch_min_cut_<budget>`` method (the
        ``extra_baselines`` of
        :func:`roam_core.planner.budget_frontier.recompute_frontier`), and the notes a reader
        needs (why it does not apply, what could not be mapped).
    """
    res = zoo_min_cut(graph, tuple(budgets), traced=traced)
    notes = [f"baseline torch_min_cut: not applicable ({res.reason})"] \
        if res.reason is not None else []
    notes.extend(f"torch_min_cut: {n}" for n in res.notes)
    return res, {d.method: d.dropped for d in res.decisions}, notes
