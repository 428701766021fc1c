"""The tracer: one full training step (forward, loss, backward, optimizer update) as a Graph.

* :mod:`~roam_core.trace.tracer`: :func:`trace_training_step` and :func:`trace_fx` (how a
  step is traced, with fake tensors, and what the graph records);
* :mod:`~roam_core.trace.traced_step`: :class:`TracedStep`, the FX program and its graph;
* :mod:`~roam_core.trace.optimizers`: the single-tensor optimizers a step is traced with;
* :mod:`~roam_core.trace.fx_graph`, :mod:`~roam_core.trace.modules`,
  :mod:`~roam_core.trace.rng`, :mod:`~roam_core.trace.guards`: the graph build, module
  names, the random-number timeline and data-dependence guards;
* :mod:`~roam_core.trace.min_cut`: torch's min-cut partitioner as a baseline.

This package imports torch; ``import roam_core`` does not import it.
"""

from roam_core.base.collector import gc_paused
from roam_core.trace.fx_graph import ValueRef
from roam_core.trace.optimizers import OPTIMIZERS, SETTINGS, make_optimizer_factory
from roam_core.trace.rng import RngTimeline
from roam_core.trace.traced_step import PlaceholderRole, TracedStep
from roam_core.trace.tracer import trace_fx, trace_training_step

__all__ = [
    "OPTIMIZERS",
    "SETTINGS",
    "PlaceholderRole",
    "RngTimeline",
    "TracedStep",
    "ValueRef",
    "gc_paused",
    "make_optimizer_factory",
    "trace_fx",
    "trace_training_step",
]
