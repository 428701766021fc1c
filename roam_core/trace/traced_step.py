"""What tracing a training step returns: the FX program, its memory graph and how they map.

Op ids are FX node names.  Value ids are FX node names too: a single-output op's value has
the op's name; an element of a multi-output op (``native_batch_norm``) is named after the
``getitem`` node that reads it (the getitem nodes are folded into the producing op), and an
element that no getitem reads is named ``"<op>.<i>"``.  :attr:`TracedStep.values` maps every
value id to a :class:`~roam_core.trace.fx_graph.ValueRef` ``(op, index, fx_node)``.
Placeholder ids are the placeholder node names (``params_1``, ``state_3``, ``inputs_1``...),
described by :attr:`TracedStep.placeholders` in graph order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from roam_core.model.graph import Graph, TensorKind
from roam_core.trace.fx_graph import ValueRef
from roam_core.trace.rng import RngTimeline
from roam_core.trace.step_spec import StepSpec

__all__ = ["PlaceholderRole", "TracedStep"]


@dataclass(frozen=True, slots=True)
class PlaceholderRole:
    """What a graph input (resident storage) holds.

    Parameters
    ----------
    node : str
        The FX placeholder (or ``get_attr``) node name; also the graph value id.
    kind : TensorKind
        ``PARAMETER``, ``BUFFER``, ``OPTIMIZER_STATE`` or ``INPUT``.
    name : str
        ``"fc.weight"`` (parameter/buffer qualified name), ``"fc.weight:exp_avg"`` (optimizer
        state of that parameter), ``"inputs[0]"`` (example input index) or the attribute name
        of a tensor constant.
    """

    node: str
    kind: TensorKind
    name: str


@dataclass(frozen=True)
class TracedStep:
    """The result of :func:`~roam_core.trace.tracer.trace_fx`: the FX program and its memory graph.

    Parameters
    ----------
    gm : torch.fx.GraphModule
        The traced step (profiler nodes and dead code removed).  Called with the flat list
        of placeholder tensors (order of ``placeholders``), it returns ``[loss]``
        (``[loss, total_norm]`` when the step clips its gradients).
    graph : Graph
        The memory graph (see the module docstring for how ids map to ``gm`` nodes).
    placeholders : tuple of PlaceholderRole
        Every placeholder node, in ``gm`` argument order (``get_attr`` constants excluded).
    constants : tuple of PlaceholderRole
        ``get_attr`` tensor constants (resident ``buffer`` storages).
    values : Mapping of str to ValueRef
        Every graph value id -> its FX location.
    loss_value : str
        Value id of the loss.
    setting : str
        ``"steady"`` or ``"roam"``.
    optimizer : str
        Optimizer name (``"custom"`` for a factory callable).
    trace_time_s : float
        Wall time of the trace and graph build.
    rng : RngTimeline
        The generator state every random op draws at (:mod:`roam_core.trace.rng`): records
        RNG rewinds such as ``torch.utils.checkpoint``'s, which the runtime replays.
    """

    #: a GraphModule, or a stand-in with recompute nodes added (the runtime's replay view)
    gm: Any
    graph: Graph
    placeholders: tuple[PlaceholderRole, ...]
    constants: tuple[PlaceholderRole, ...]
    values: Mapping[str, ValueRef]
    loss_value: str
    setting: str
    optimizer: str
    trace_time_s: float
    rng: RngTimeline = field(default_factory=RngTimeline)
    spec: StepSpec = field(default_factory=StepSpec)
