"""roam: memory-efficient execution plans for PyTorch training steps.

``import roam_core`` is light: it never imports torch, Dash or plotly.  The tracer and the
executor import torch lazily when called.  The module paths of roam 0.0 (``roam_core.graph``,
``roam_core.heuristics``, ``roam_core.execute``, ...) still import for this version, with a
``DeprecationWarning`` (:data:`OLD_MODULE_PATHS`).
"""

from roam_core.base.errors import (
    BudgetInfeasibleError,
    ConfigError,
    ExecutorError,
    GraphError,
    InfeasibleError,
    PlanFormatError,
    PlanInvalidError,
    RoamError,
    TraceError,
    Violation,
    ViolationKind,
)
from roam_core.base.old_paths import OLD_MODULE_PATHS, install_old_paths
from roam_core.base.status import SolveStatus
from roam_core.formats.graph_io import dumps_graph, load_graph, loads_graph, save_graph
from roam_core.model.graph import (
    Alias,
    ControlEdge,
    EdgeReason,
    Graph,
    Op,
    OpId,
    Order,
    Phase,
    Tensor,
    TensorId,
    TensorKind,
    round_size,
)
from roam_core.model.plan import Plan, SolveRecord
from roam_core.model.recompute_ops import RecomputeOp, expand_graph
from roam_core.oracle.simulate import Lifetime, MemoryProfile, lifetimes, simulate
from roam_core.oracle.validate import check_arena, check_order, check_plan

install_old_paths()  # roam 0.0's module paths import, with a DeprecationWarning

#: Public names whose modules load OR-Tools or torch (imported on first use, PEP 562).
_LAZY = {
    "make_plan": "roam_core.planner",
    "PlanProgress": "roam_core.planner",
    "PlannerConfig": "roam_core.planner.config",
    "OrderSolverConfig": "roam_core.ordering.config",
    "ArenaConfig": "roam_core.layout.config",
    "RecomputeConfig": "roam_core.recompute.config",
    "save_plan": "roam_core.formats.plan_io",
    "load_plan": "roam_core.formats.plan_io",
    "dumps_plan": "roam_core.formats.plan_io",
    "loads_plan": "roam_core.formats.plan_io",
    "eager_report": "roam_core.oracle.baseline",
    "live_set_lower_bound": "roam_core.oracle.bounds",
    "simulate_allocator": "roam_core.oracle.allocator_sim",
    "plan_arena": "roam_core.layout.arena_layout",
    "solve_dsa": "roam_core.layout.dsa_solver",
    "recompute_frontier": "roam_core.planner.budget_frontier",
    "exact_recompute": "roam_core.recompute.exact",
    "PlannedStep": "roam_core.runtime.planned_step",
    "BatchMismatchError": "roam_core.runtime.step_plans",
    "StepMismatchError": "roam_core.runtime.step_context",
    "GradientsNotKeptError": "roam_core.runtime.absent_grads",
    "NewShapeWarning": "roam_core.runtime.step_plans",
    "pad_to_bucket": "roam_core.runtime.buckets",
    "execute_plan": "roam_core.runtime.execution",
    "trace_training_step": "roam_core.trace.tracer",
    "apply_checkpoint_plan": "roam_core.runtime.checkpoint_policy",
    "check_checkpoint_plan": "roam_core.runtime.checkpoint_check",
    "export_checkpoint_policy": "roam_core.recompute.checkpoint_export",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'roam_core' has no attribute {name!r}")


__all__ = [
    *sorted(_LAZY),
    "Alias",
    "BudgetInfeasibleError",
    "ConfigError",
    "ControlEdge",
    "EdgeReason",
    "ExecutorError",
    "Graph",
    "GraphError",
    "InfeasibleError",
    "Lifetime",
    "MemoryProfile",
    "OLD_MODULE_PATHS",
    "Op",
    "OpId",
    "Plan",
    "SolveRecord",
    "SolveStatus",
    "check_arena",
    "check_order",
    "check_plan",
    "Order",
    "Phase",
    "PlanFormatError",
    "PlanInvalidError",
    "RecomputeOp",
    "RoamError",
    "Tensor",
    "TensorId",
    "TensorKind",
    "TraceError",
    "Violation",
    "ViolationKind",
    "dumps_graph",
    "expand_graph",
    "lifetimes",
    "load_graph",
    "loads_graph",
    "round_size",
    "save_graph",
    "simulate",
]

__version__ = "0.1.0"
