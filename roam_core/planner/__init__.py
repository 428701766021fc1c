"""Layer 5, the planner: :func:`make_plan` joins ordering and layout into a validated plan.

:mod:`~roam_core.planner.facade` holds the one door (:func:`make_plan`), which runs the
pipeline without a budget (:mod:`~roam_core.planner.pipeline`) or the budget planner
(:mod:`~roam_core.planner.budget`; the frontier of many budgets:
:mod:`~roam_core.planner.budget_frontier`).
"""

from roam_core.planner.facade import make_plan, order_methods
from roam_core.planner.pipeline import PlanProgress

__all__ = ["PlanProgress", "make_plan", "order_methods"]
