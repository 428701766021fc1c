"""Module attribution while tracing: which ``nn.Module`` every FX node ran in.

Used by :func:`roam_core.trace.trace_fx`.  Every FX node created while tracing is tagged with
``node.meta["roam_module"]``: the qualified path of the innermost module running at that
moment (``"transformer.h.3.attn"``; ``""`` at the top level).  Only public hooks are used:

* **Forward**: a forward pre-hook and a forward hook on every submodule push and pop its path
  (``named_modules`` names; a module shared under two paths is named by the first).
* **Backward**: after the loss is computed, the autograd graph behind it is walked and every
  autograd node gets a pre-hook that makes its *forward* module current.  The forward module
  of an autograd node comes from its sequence number: the forward hooks record the autograd
  sequence counter at every module entry and exit (``torch.autograd._get_sequence_nr`` and
  ``Node._sequence_nr``, feature-detected: without them backward ops stay at ``""``).
  An ``AccumulateGrad`` node belongs to its parameter's module.  Gradient sums the engine
  does between nodes belong to the node that ran last.  Ops recomputed inside the backward
  (activation checkpointing) run the forward hooks again and take their module (when the
  recomputation stops early, the ops left in that autograd node keep the module it stopped
  in).
* **Optimizer** ops are attributed afterwards, in :func:`roam_core.trace.fx_graph.build_graph`,
  to the module of the parameter whose storages they touch.

Nodes are tagged lazily: whenever the current module changes, the nodes appended to the
traced graph since the last change are tagged with the module that was current (each node
is visited once).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import get_proxy_mode

if TYPE_CHECKING:
    from torch.autograd.graph import Node

__all__ = ["META_KEY", "SCOPE_ATTRIBUTE", "SEQ_KEY", "ModuleTracker", "node_modules",
           "owner_module", "scoped_name"]

_logger = logging.getLogger(__name__)

#: ``node.meta`` key holding the module path of a traced FX node.
META_KEY = "roam_module"
#: ``node.meta`` key holding, on a backward FX node, the autograd sequence number of the
#: autograd node that ran it (its forward op's number; see :mod:`roam_core.trace.sources`).
SEQ_KEY = "roam_backward_seq"
#: A wrapper module (a loss wrapper around the user's model) may name, in this class
#: attribute, the submodule whose names the graph should use: with ``"model"``, the
#: wrapper's ``model.h.0.attn`` is recorded as ``h.0.attn`` (and ``model.h.0.attn.weight``
#: as ``h.0.attn.weight``), the names the user's own model has.
SCOPE_ATTRIBUTE = "roam_name_scope"


def scoped_name(name: str, scope: str) -> str:
    """``name`` relative to the submodule ``scope`` (unchanged outside it).

    Examples
    --------
    >>> scoped_name("model.h.0.attn", "model"), scoped_name("model", "model")
    ('h.0.attn', '')
    >>> scoped_name("head.weight", "model"), scoped_name("h.0", "")
    ('head.weight', 'h.0')
    """
    if not scope:
        return name
    if name == scope:
        return ""
    return name[len(scope) + 1:] if name.startswith(scope + ".") else name


def owner_module(qualified_name: str) -> str:
    """The module path owning a parameter or buffer name.

    Examples
    --------
    >>> owner_module("transformer.h.3.attn.c_attn.weight"), owner_module("scale")
    ('transformer.h.3.attn.c_attn', '')
    """
    return qualified_name.rpartition(".")[0]


class ModuleTracker:
    """Tag every FX node traced while installed with the module it ran in.

    Parameters
    ----------
    model : nn.Module
        The traced model (hooks are added on enter and removed on exit).
    param_names : Mapping of int to str
        ``id(parameter)`` -> qualified name, for ``AccumulateGrad`` nodes.
    scope : str
        Record paths relative to this submodule (see :data:`SCOPE_ATTRIBUTE`).
    """

    def __init__(self, model: nn.Module, param_names: Mapping[int, str],
                 scope: str = "") -> None:
        self.model = model
        self.param_names = param_names
        self.scope = scope
        self.stack: list[str] = []
        self.backward_current = ""
        self.backward_seq: int | None = None
        self.handles: list[Any] = []
        self.last_node: Any = None
        self.graph: Any = None
        get_seq = getattr(torch.autograd, "_get_sequence_nr", None)
        self.get_seq = get_seq if callable(get_seq) else None
        # (sequence number, module current from there on), increasing
        self.seq_at: list[int] = []
        self.seq_module: list[str] = []

    # -------------------------------------------------------------- installing
    def __enter__(self) -> ModuleTracker:
        for path, mod in self.model.named_modules():
            path = scoped_name(path, self.scope)
            if path == "":
                continue  # the root is the top level: ""
            self.handles.append(mod.register_forward_pre_hook(self._pre(path)))
            self.handles.append(mod.register_forward_hook(self._post(path)))
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    # -------------------------------------------------------------- tagging
    def current(self) -> str:
        """The module path the next traced node belongs to."""
        return self.stack[-1] if self.stack else self.backward_current

    def flush(self) -> None:
        """Tag the nodes traced since the last call with the current module."""
        mode = get_proxy_mode()
        if mode is None:
            return
        graph = mode.tracer.graph
        if graph is not self.graph:
            self.graph, self.last_node = graph, None
        path = self.current()
        seq = None if self.stack else self.backward_seq
        for node in self._new_nodes(graph):
            node.meta.setdefault(META_KEY, path)
            if seq is not None:
                node.meta.setdefault(SEQ_KEY, seq)
            self.last_node = node

    def _new_nodes(self, graph: Any) -> Iterator[Any]:
        node = next(iter(graph.nodes), None) if self.last_node is None else self.last_node.next
        while node is not None and node.op != "root":
            yield node
            node = node.next

    def _record_seq(self) -> None:
        if self.get_seq is not None:
            self.seq_at.append(int(self.get_seq()))
            self.seq_module.append(self.current())

    def _pre(self, path: str) -> Any:
        def hook(module: nn.Module, args: Any) -> None:
            self.flush()
            self.stack.append(path)
            self._record_seq()
        return hook

    def _post(self, path: str) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            self.flush()
            if self.stack and self.stack[-1] == path:
                self.stack.pop()
            self._record_seq()
        return hook

    def set_backward(self, path: str, seq: int | None = None) -> None:
        """Make ``path`` current outside any module (the phase boundaries use ``""``);
        ``seq``: the autograd sequence number of the backward node running now."""
        self.flush()
        self.backward_current = path
        self.backward_seq = seq

    # -------------------------------------------------------------- backward
    def forward_module_of_seq(self, seq: int) -> str:
        """The module that was current when autograd sequence number ``seq`` was taken."""
        i = bisect.bisect_right(self.seq_at, seq) - 1
        return self.seq_module[i] if i >= 0 else ""

    def hook_backward(self, loss: torch.Tensor) -> None:
        """Give every autograd node behind ``loss`` a pre-hook selecting its forward module."""
        self.flush()
        root = loss.grad_fn
        if root is None:
            return
        can_seq = self.get_seq is not None and hasattr(root, "_sequence_nr")
        if not can_seq:
            _logger.info("this torch has no autograd sequence numbers: backward ops are "
                         "attributed to the top level")
        seen: set[int] = set()
        todo: list[Node | None] = [root]
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            var = getattr(node, "variable", None)
            seq = None
            if isinstance(var, torch.Tensor):
                name = self.param_names.get(id(var))
                path = owner_module(scoped_name(name, self.scope)) if name is not None else ""
            elif can_seq:
                seq = int(node._sequence_nr())
                path = self.forward_module_of_seq(seq)
            else:
                path = ""
            node.register_prehook(self._backward_pre(path, seq))
            todo.extend(nxt for nxt, _ in node.next_functions)

    def _backward_pre(self, path: str, seq: int | None) -> Any:
        def hook(grad_outputs: Any) -> None:
            self.set_backward(path, seq)
            # a forward recomputed in the backward (checkpointing) may stop early, before
            # its modules' forward hooks pop them: no forward module is running here
            self.stack.clear()
        return hook


def node_modules(gm: Any) -> dict[str, str]:
    """FX node name -> module path recorded by a :class:`ModuleTracker` (``""`` if none)."""
    return {n.name: str(n.meta.get(META_KEY, "")) for n in gm.graph.nodes}
