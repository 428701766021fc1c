"""Layer 5, the planner: :func:`make_plan` joins ordering and layout into a validated plan."""

from roam_core.planner.pipeline import PlanProgress, make_plan, order_methods

__all__ = ["PlanProgress", "make_plan", "order_methods"]
