"""Module paths of earlier roam versions, still importable for one version with a warning.

:data:`OLD_MODULE_PATHS` maps each old path to the module(s) that now hold its names;
:func:`install_old_paths` (called by ``import roam_core``) puts a meta-path finder first on
``sys.meta_path`` that answers those paths.  Nothing here imports the target modules until an
old path is imported: ``import roam_core`` stays light.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

__all__ = ["OLD_MODULE_PATHS", "OldPathFinder", "OldPathLoader", "install_old_paths",
           "old_path_targets"]

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
    # renamed in 0.1.1 so that no two modules share a name, and configs moved to their layers
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


def old_path_targets(fullname: str) -> tuple[str, ...] | None:
    """The modules an old path stands for (``None``: not an old path)."""
    if fullname in OLD_MODULE_PATHS:
        return OLD_MODULE_PATHS[fullname]
    head = fullname.rpartition(".")[0]
    while head:  # a submodule of an old package path: roam_core.execute.step
        targets = OLD_MODULE_PATHS.get(head)
        if targets is not None and len(targets) == 1:
            return (f"{targets[0]}.{fullname[len(head) + 1:]}",)
        head = head.rpartition(".")[0]
    return None


class OldPathLoader(importlib.abc.Loader):
    """Loads an old module path as the new module itself (or a merged view of several)."""

    def __init__(self, targets: tuple[str, ...]) -> None:
        self.targets = targets

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a plain module; exec_module swaps in the real one

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__
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
        merged.__dict__["__all__"] = sorted({n for m in mods for n in getattr(m, "__all__", ())})
        sys.modules[name] = merged


class OldPathFinder:
    """Meta-path finder for :data:`OLD_MODULE_PATHS` (first on ``sys.meta_path``)."""

    @classmethod
    def find_spec(cls, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("roam_core."):
            return None
        targets = old_path_targets(fullname)
        if targets is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, OldPathLoader(targets))


def install_old_paths() -> None:
    """Put :class:`OldPathFinder` first on ``sys.meta_path`` (once per process).

    Found by name, not identity: a re-imported copy of this module must not add a second
    finder.
    """
    if not any(isinstance(f, type) and f.__name__ == "OldPathFinder" for f in sys.meta_path):
        # a class with a find_spec classmethod is a valid finder; typeshed wants an instance
        sys.meta_path.insert(0, OldPathFinder)
