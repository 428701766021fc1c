"""roam: memory-efficient execution plans for PyTorch training steps.

``import roam_core`` is light: it never imports torch, Dash or plotly.  The tracer and the
executor import torch lazily when called.
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
from roam_core.model.recompute import RecomputeOp, expand_graph
from roam_core.oracle.simulate import Lifetime, MemoryProfile, lifetimes, simulate
from roam_core.oracle.validate import check_arena, check_order, check_plan

#: Public names whose modules load OR-Tools (imported on first use, PEP 562).
_LAZY = {
    "make_plan": "roam_core.planner",
    "PlanProgress": "roam_core.planner",
    "PlannerConfig": "roam_core.base.config",
    "OrderSolverConfig": "roam_core.base.config",
    "ArenaConfig": "roam_core.base.config",
    "save_plan": "roam_core.formats.plan_io",
    "load_plan": "roam_core.formats.plan_io",
    "dumps_plan": "roam_core.formats.plan_io",
    "loads_plan": "roam_core.formats.plan_io",
    "eager_report": "roam_core.oracle.baseline",
    "live_set_lower_bound": "roam_core.oracle.bounds",
    "simulate_allocator": "roam_core.oracle.allocator_sim",
    "plan_arena": "roam_core.layout.arena",
    "solve_dsa": "roam_core.layout.dsa_solver",
    "recompute_frontier": "roam_core.planner.budget",
    "exact_recompute": "roam_core.recompute.exact",
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
    "execute_plan",
    "expand_graph",
    "lifetimes",
    "load_graph",
    "loads_graph",
    "round_size",
    "save_graph",
    "simulate",
    "trace_training_step",
]

__version__ = "0.1.0"


def trace_training_step(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Trace a training step into a :class:`Graph` (imports torch lazily).

    See :func:`roam_core.trace.trace_training_step` for the parameters.
    """
    from roam_core.trace import trace_training_step as _trace

    return _trace(*args, **kwargs)


def execute_plan(*args, **kwargs):  # type: ignore[no-untyped-def]
    """Run a plan in one arena and compare it with eager PyTorch (imports torch lazily).

    See :func:`roam_core.runtime.execute_plan` for the parameters.
    """
    from roam_core.runtime import execute_plan as _execute

    return _execute(*args, **kwargs)
