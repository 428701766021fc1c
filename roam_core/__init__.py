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
from roam_core.simulate import Lifetime, MemoryProfile, lifetimes, simulate

__all__ = [
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
