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
    "recompute_frontier": "roam_core.planner.budget",
    "exact_recompute": "roam_core.recompute.exact",
    "PlannedStep": "roam_core.runtime",
    "BatchMismatchError": "roam_core.runtime",
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


# ------------------------------------------------------------- old module paths (0.1 only)
#: Module paths of roam 0.0 (one flat package) -> the layer modules that now hold their
#: names.  ``import roam_core.graph`` still works for this version, with a DeprecationWarning;
#: a path with several targets gives a module that looks its names up in each, in order.
#: A package path (``roam_core.execute``) also maps every submodule below it.
OLD_MODULE_PATHS: dict[str, tuple[str, ...]] = {
    "roam_core._cpsat": ("roam_core.base.cpsat",),
    "roam_core.allocator_sim": ("roam_core.oracle.allocator_sim",),
    "roam_core.arena": ("roam_core.layout.arena_layout",),
    "roam_core.baseline": ("roam_core.oracle.baseline",),
    "roam_core.bounds": ("roam_core.oracle.bounds",),
    "roam_core.brute_force": ("roam_core.oracle.brute_force",),
    "roam_core.config": ("roam_core.planner.config",),
    "roam_core.dag_view": ("roam_core.model.dag_view",),
    "roam_core.decompose": ("roam_core.ordering.decompose",),
    "roam_core.dsa": ("roam_core.model.dsa", "roam_core.formats.dsa_csv"),
    "roam_core.dsa_heuristics": ("roam_core.layout.dsa_heuristics",),
    "roam_core.dsa_solver": ("roam_core.layout.dsa_solver", "roam_core.layout.dsa_search",
                             "roam_core.layout.dsa_repair", "roam_core.layout.dsa_bounds"),
    "roam_core.errors": ("roam_core.base.errors",),
    "roam_core.execute": ("roam_core.runtime",),
    "roam_core.graph": ("roam_core.model.graph",),
    "roam_core.graph_io": ("roam_core.formats.graph_io",),
    "roam_core.heuristics": ("roam_core.ordering.registry", "roam_core.ordering.list_schedulers",
                             "roam_core.ordering.searches"),
    "roam_core.layout_baselines": ("roam_core.layout.baseline_layouts", "roam_core.layout.llfb",
                                   "roam_core.layout.inductor_pool"),
    "roam_core.monolithic": ("roam_core.ordering.monolithic",),
    "roam_core.order_ilp": ("roam_core.ordering.order_ilp", "roam_core.ordering.order_problem",
                            "roam_core.ordering.order_model",
                            "roam_core.ordering.order_hint_check"),
    "roam_core.plan": ("roam_core.model.plan",),
    "roam_core.plan_io": ("roam_core.formats.plan_io",),
    "roam_core.reach": ("roam_core.model.reach",),
    "roam_core.rewrites": ("roam_core.ordering.rewrites",),
    "roam_core.safe_gzip": ("roam_core.base.safe_gzip",),
    "roam_core.samples": ("roam_core.model.samples",),
    "roam_core.simulate": ("roam_core.oracle.simulate",),
    "roam_core.snapshot": ("roam_core.formats.snapshot",),
    "roam_core.units": ("roam_core.base.units",),
    "roam_core.updates": ("roam_core.ordering.update_groups",
                          "roam_core.ordering.update_insertion"),
    "roam_core.validate": ("roam_core.oracle.validate",),
    # renamed in 0.1.1 so that no two modules share a name, configs moved to their layers,
    # and the bound families split into roam_core.oracle.bounds
    "roam_core.base.config": ("roam_core.planner.config", "roam_core.ordering.config"),
    "roam_core.layout.arena": ("roam_core.layout.arena_layout",),
    "roam_core.layout.layout_baselines": ("roam_core.layout.baseline_layouts",
                                          "roam_core.layout.llfb",
                                          "roam_core.layout.inductor_pool"),
    "roam_core.model.recompute": ("roam_core.model.recompute_ops",),
    "roam_core.oracle.proven_bounds": ("roam_core.oracle.bounds.restriction",
                                       "roam_core.oracle.bounds.masks",
                                       "roam_core.oracle.bounds.op_groups",
                                       "roam_core.oracle.bounds.choice",
                                       "roam_core.oracle.bounds.chain"),
    "roam_core.runtime.arena": ("roam_core.runtime.arena_runner",),
    "roam_core.runtime.recompute": ("roam_core.runtime.recompute_replay",),
    "roam_core.runtime.train": ("roam_core.runtime.planned_step",),
    "roam_core.runtime.training": ("roam_core.runtime.compare_training",),
}


def _old_path_targets(fullname: str) -> tuple[str, ...] | None:
    if fullname in OLD_MODULE_PATHS:
        return OLD_MODULE_PATHS[fullname]
    head = fullname.rpartition(".")[0]
    while head:  # a submodule of an old package path: roam_core.execute.step
        targets = OLD_MODULE_PATHS.get(head)
        if targets is not None and len(targets) == 1:
            return (f"{targets[0]}.{fullname[len(head) + 1:]}",)
        head = head.rpartition(".")[0]
    return None


class _OldPathLoader:
    """Loads an old module path as the new module itself (or a merged view of several)."""

    def __init__(self, targets: tuple[str, ...]) -> None:
        self.targets = targets

    def create_module(self, spec: object) -> None:
        return None  # a plain module; exec_module swaps in the real one

    def exec_module(self, module: object) -> None:
        import importlib
        import sys
        import types
        import warnings

        name = module.__name__  # type: ignore[attr-defined]
        new = " and ".join(self.targets)
        warnings.warn(f"{name} is deprecated (roam 0.1 moved it): import {new} instead",
                      DeprecationWarning, stacklevel=2)
        mods = [importlib.import_module(t) for t in self.targets]
        if len(mods) == 1:
            sys.modules[name] = mods[0]  # the import system hands back sys.modules[name]
            return
        merged = types.ModuleType(name, f"Deprecated: the names of {new}.")
        for m in reversed(mods):  # the first target wins a clash
            merged.__dict__.update({k: v for k, v in vars(m).items()
                                    if not k.startswith("__")})
        merged.__all__ = sorted({n for m in mods for n in getattr(m, "__all__", ())})
        sys.modules[name] = merged


class _OldPathFinder:
    """Meta-path finder for :data:`OLD_MODULE_PATHS` (first on ``sys.meta_path``)."""

    @classmethod
    def find_spec(cls, fullname: str, path: object = None, target: object = None) -> object:
        if not fullname.startswith("roam_core."):
            return None
        targets = _old_path_targets(fullname)
        if targets is None:
            return None
        import importlib.machinery

        return importlib.machinery.ModuleSpec(fullname, _OldPathLoader(targets))  # type: ignore[arg-type]


def _install_old_paths() -> None:
    import sys

    if not any(isinstance(f, type) and f.__name__ == "_OldPathFinder" for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPathFinder)  # type: ignore[arg-type]


_install_old_paths()


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
