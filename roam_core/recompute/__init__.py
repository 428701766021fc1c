"""Recomputation under a memory budget: which storages to drop, and the baselines.

Layer: between ``ordering | layout`` and ``planner`` (it may import ordering, layout,
oracle, model and base; the planner imports it).

* :mod:`~roam_core.recompute.evaluator` -- the exact just-in-time evaluation of a drop set
  over a fixed base order (:mod:`~roam_core.recompute.base_order_index`: what it indexes
  once, read-only);
* :mod:`~roam_core.recompute.greedy` -- the scalable method: a greedy drop trajectory over
  the planner's order, scored by bytes removed at the peak per recompute cost and evaluated
  exactly, then pruned to a budget;
* :mod:`~roam_core.recompute.improve` -- a portfolio of candidate drop sets per budget and a
  swap pass; :mod:`~roam_core.recompute.windows` -- exact CP-SAT windows refining one;
* :mod:`~roam_core.recompute.exact` -- an exact CP-SAT model (drop decisions and the order
  jointly) for small graphs, the test oracle;
* :mod:`~roam_core.recompute.baselines` -- checkpointing policies applied by module
  structure (every block, every k-th block, sqrt(n) segments, ``checkpoint_sequential``,
  selective attention core).
"""

from roam_core.recompute.evaluator import Evaluation, JitEvaluator, hoist_views, jit_order
from roam_core.recompute.greedy import (
    GreedyTrajectory,
    TrajectoryPoint,
    greedy_trajectory,
    knee,
    prune,
)

__all__ = ["Evaluation", "GreedyTrajectory", "JitEvaluator", "TrajectoryPoint",
           "greedy_trajectory", "hoist_views", "jit_order", "knee", "prune"]
