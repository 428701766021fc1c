"""roam: memory-efficient execution plans for PyTorch training steps.

``import roam_core`` is light: it never imports torch, Dash or plotly.  The tracer and the
executor import torch lazily when called.
"""

from roam_core.errors import (
    ExecutorError,
    GraphError,
    InfeasibleError,
    PlanFormatError,
    PlanInvalidError,
    RoamError,
    SolverTimeoutError,
    TraceError,
    Violation,
    ViolationKind,
)
from roam_core.graph import (
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
from roam_core.graph_io import dumps_graph, load_graph, loads_graph, save_graph
from roam_core.plan import Plan, SolveRecord
from roam_core.simulate import Lifetime, MemoryProfile, lifetimes, simulate
from roam_core.validate import check_arena, check_order, check_plan

#: Public names whose modules load OR-Tools (imported on first use, PEP 562).
_LAZY = {
    "make_plan": "roam_core.planner",
    "PlanProgress": "roam_core.planner",
    "PlannerConfig": "roam_core.config",
    "OrderSolverConfig": "roam_core.config",
    "save_plan": "roam_core.plan_io",
    "load_plan": "roam_core.plan_io",
    "dumps_plan": "roam_core.plan_io",
    "loads_plan": "roam_core.plan_io",
    "eager_report": "roam_core.baseline",
    "live_set_lower_bound": "roam_core.bounds",
    "simulate_allocator": "roam_core.allocator_sim",
    "plan_arena": "roam_core.arena",
    "solve_dsa": "roam_core.dsa_solver",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'roam_core' has no attribute {name!r}")

__all__ = [
    *sorted(_LAZY),
    "Alias",
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
    "check_arena",
    "check_order",
    "check_plan",
    "Order",
    "Phase",
    "PlanFormatError",
    "PlanInvalidError",
    "RoamError",
    "SolverTimeoutError",
    "Tensor",
    "TensorId",
    "TensorKind",
    "TraceError",
    "Violation",
    "ViolationKind",
    "dumps_graph",
    "execute_plan",
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

    See :func:`roam_core.execute.execute_plan` for the parameters.
    """
    from roam_core.execute import execute_plan as _execute

    return _execute(*args, **kwargs)
