"""Replay recompute plans: the traced step's FX graph with the recompute ops added.

:func:`expand_traced` turns a :class:`~roam_core.trace.TracedStep` and a plan's recompute
ops into a traced step the :class:`~roam_core.runtime.arena_runner.ArenaRunner` runs unchanged:

* each recompute op is a copy of its source's FX node (and of the ``getitem`` nodes that
  unpack it), named by the recompute op's id, reading the original inputs or their copies;
* each listed reader reads the copies instead of the originals;
* every new node, and every view a reader makes of a copy, gets a fresh fake value computed
  by running its target on the fake inputs (so a copy is a new storage and a view of a
  copy shares the copy's storage, as in the expanded memory graph);
* the memory graph is :func:`roam_core.model.recompute_ops.expand_graph` of the traced one.
* a re-run of batch norm in training mode is passed no running statistics
  (:func:`roam_core.model.recompute_ops.running_stats_writes`): it computes the same outputs
  from the batch, bit for bit, and the statistics are updated once, by the forward.

* each re-run of a random op (dropout's ``bernoulli_`` on CPU, ``native_dropout`` on CUDA)
  is added to the step's RNG timeline as a replay of its source
  (:meth:`~roam_core.trace.rng.RngTimeline.with_replay`): the runner's
  :class:`~roam_core.runtime.rng.RngReplay` sets the generator back to the state the source
  drew at (saved when the forward stream reached it) and, after the re-run, to where the
  stream was.  The re-run is the same kernel on the same inputs from the same generator
  state, so its mask is the forward's bit for bit -- on CPU (Mersenne Twister state) and on
  CUDA (Philox seed and offset), exactly what ``torch.utils.checkpoint`` relies on.

The FX graph is not recompiled (recompute op ids are not Python identifiers); the runner
interprets nodes, it never calls the generated code.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from roam_core.base.errors import ExecutorError
from roam_core.model.recompute_ops import (
    RUNNING_STATS_INPUTS,
    RecomputeOp,
    expand_graph,
    running_stats_writes,
)
from roam_core.trace.kernel_fakes import rerun_fake_value

if TYPE_CHECKING:
    from roam_core.model.graph import Graph
    from roam_core.trace.rng import RngTimeline
    from roam_core.trace.traced_step import TracedStep

__all__ = ["expand_traced"]


class _GraphView:
    """A GraphModule stand-in: a new FX graph, attributes (constants) from the original."""

    def __init__(self, gm: Any, graph: torch.fx.Graph) -> None:
        self._gm = gm
        self.graph = graph

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_gm"], name)


def _rerun_meta(node: Any) -> None:
    """Recompute ``node.meta['val']`` from its inputs' fake values."""
    if not rerun_fake_value(node):
        raise ExecutorError(f"op {node.name!r}: no fake inputs to recompute its value from")


def _without_running_stats(node: Any) -> None:
    """A batch-norm re-run: no running mean or variance (same outputs, nothing updated)."""
    schema = getattr(node.target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    args, kwargs = list(node.args), dict(node.kwargs)
    for i in RUNNING_STATS_INPUTS:
        if i < len(args):
            args[i] = None
        elif i < len(names) and names[i] in kwargs:
            kwargs[names[i]] = None
        else:
            raise ExecutorError(f"op {node.name!r}: batch norm without running statistics "
                                f"at argument {i}")
    node.args, node.kwargs = tuple(args), kwargs


def expand_traced(traced: TracedStep, recompute: Sequence[RecomputeOp]) -> TracedStep:
    """The traced step with the plan's recompute ops as FX nodes (see the module docstring).

    Raises
    ------
    ExecutorError
        A recompute op names an op or value the traced step does not have.
    """
    if not recompute:
        return traced
    g0 = traced.graph
    g2 = expand_graph(g0, recompute)
    x = _Expansion(traced)
    anchors = _anchors(x, recompute)
    read_copies = _read_copies(g0, recompute)
    for r in recompute:
        x.insert_copy(r, anchors, read_copies)
    x.redirect_readers(recompute)
    x.drop_unread_getitems()
    x.refresh_views_of_copies(g2)
    rng = _rng_with_replays(traced, recompute)
    gm = _GraphView(traced.gm, x.fx)
    return replace(traced, gm=gm, graph=g2, values=x.values, rng=rng)


class _Expansion:
    """A copy of the traced FX graph being expanded, and the value map that goes with it."""

    def __init__(self, traced: TracedStep) -> None:
        self.g0 = traced.graph
        self.fx = torch.fx.Graph()
        env: dict[Any, Any] = {}
        out_val = self.fx.graph_copy(traced.gm.graph, env)
        self.fx.output(out_val)
        self.nodes = {n.name: n for n in self.fx.nodes}
        self.values = dict(traced.values)
        self.fx_of: dict[str, Any] = {}  # value id -> the FX node whose value it is
        #: positions before any insertion: where each copy goes is decided on these
        self.index = {n.name: i for i, n in enumerate(self.fx.nodes)}
        self.anchor_of = {i: n for n, i in self.index.items()}

    def node_of_value(self, v: str) -> Any:
        """The FX node whose value is graph value ``v`` (a copy's node once inserted)."""
        if v in self.fx_of:
            return self.fx_of[v]
        ref = self.values.get(v)
        if ref is None or ref.fx_node is None or ref.fx_node not in self.nodes:
            raise ExecutorError(f"recompute: value {v!r} has no FX node in the traced step")
        return self.nodes[ref.fx_node]

    def insert_copy(self, r: RecomputeOp, anchors: dict[str, int],
                    read_copies: set[str]) -> None:
        """Insert the copy of ``r``'s source (and the getitems read of it) before its first
        reader, reading the original inputs or their copies."""
        g0, fx, values, nodes = self.g0, self.fx, self.values, self.nodes
        src = g0.op(r.source)
        if r.source not in nodes:
            raise ExecutorError(f"recompute op {r.id!r}: the traced step has no op "
                                f"{r.source!r}")
        arg_map: dict[torch.fx.Node, torch.fx.Node] = {}
        for u, u0 in zip(r.inputs, src.inputs, strict=True):
            if u != u0:
                arg_map[self.node_of_value(u0)] = self.node_of_value(u)
        n_nodes = len(self.index)
        first = anchors.get(r.id, n_nodes)
        anchor = nodes[self.anchor_of.get(first, "output")] if first < n_nodes else next(
            n for n in fx.nodes if n.op == "output")
        def through(n: torch.fx.Node, m: dict[torch.fx.Node, torch.fx.Node] = arg_map,
                    ) -> torch.fx.Node:
            return m.get(n, n)

        with fx.inserting_before(anchor):
            new = fx.node_copy(nodes[r.source], through)
            new.name = r.id
            if running_stats_writes(g0, src):
                _without_running_stats(new)
            _rerun_meta(new)
            for v, v0 in zip(r.outputs, src.outputs, strict=True):
                ref = values[v0]
                if ref.index is None:
                    self.fx_of[v] = new
                    values[v] = replace(ref, op=r.id, fx_node=r.id)
                elif v not in read_copies:  # nobody reads it: no getitem, like the trace
                    values[v] = replace(ref, op=r.id, fx_node=None)
                else:
                    gi = fx.call_function(operator.getitem, (new, ref.index))
                    gi.name = v
                    _rerun_meta(gi)
                    self.fx_of[v] = gi
                    values[v] = replace(ref, op=r.id, fx_node=v)

    def redirect_readers(self, recompute: Sequence[RecomputeOp]) -> None:
        """Every listed reader reads the copies instead of the originals."""
        for r in recompute:
            src = self.g0.op(r.source)
            for reader in r.readers:
                rn = self.nodes[reader]
                reads = set(self.g0.op(reader).inputs)
                for v, v0 in zip(r.outputs, src.outputs, strict=True):
                    if v0 in reads:
                        rn.replace_input_with(self.node_of_value(v0), self.node_of_value(v))

    def drop_unread_getitems(self) -> None:
        """Drop the getitems whose readers all moved to the copies, as the tracer drops unread
        ones (the runner runs getitems on demand, so an unread one would never run)."""
        for n in list(self.fx.nodes):
            if n.op == "call_function" and n.target is operator.getitem and not n.users:
                ref_ids = [v for v, ref in self.values.items() if ref.fx_node == n.name]
                self.fx.erase_node(n)
                for v in ref_ids:
                    self.values[v] = replace(self.values[v], fx_node=None)

    def refresh_views_of_copies(self, g2: Graph) -> None:
        """Views of the copies (made by late readers) get fake values on the copies'
        storages."""
        g0 = self.g0
        copy_storages = {t for t in g2.tensors if t not in g0.tensors}
        stale = {a.producer for a in g2.aliases
                 if a.storage in copy_storages and a.producer is not None
                 and a.producer in g0.op_ids}
        if not stale:
            return
        for n in self.fx.nodes:
            if n.name in stale:
                _rerun_meta(n)
                for u in n.users:
                    if u.target is operator.getitem:
                        _rerun_meta(u)


def _anchors(x: _Expansion, recompute: Sequence[RecomputeOp]) -> dict[str, int]:
    """Recompute op id -> index (in the copied FX graph) of the node it goes before: its
    first reader, or earlier when a later recompute op reads it."""
    index = x.index
    made_by = {v: r for r in recompute for v in r.outputs}
    first: dict[str, int] = {}
    for r in recompute:
        for reader in r.readers:
            first[r.id] = min(first.get(r.id, len(index)), index[reader])
    for r in reversed(recompute):
        for u in r.inputs:
            if u in made_by:
                p = made_by[u].id
                first[p] = min(first.get(p, len(index)), first.get(r.id, len(index)))
    return first


def _read_copies(g0: Graph, recompute: Sequence[RecomputeOp]) -> set[str]:
    """Values of the copies that something reads (another copy or a listed reader)."""
    made_by = {v for r in recompute for v in r.outputs}
    read = {u for r in recompute for u in r.inputs if u in made_by}
    for r in recompute:
        src = g0.op(r.source)
        for reader in r.readers:
            reads = set(g0.op(reader).inputs)
            read.update(v for v, v0 in zip(r.outputs, src.outputs) if v0 in reads)
    return read


def _rng_with_replays(traced: TracedStep, recompute: Sequence[RecomputeOp]) -> RngTimeline:
    """The step's RNG timeline with each re-run of a random op as a replay of its source."""
    rng = traced.rng
    random_ops = rng.by_op
    for r in recompute:
        if r.source in random_ops:
            rng = rng.with_replay(r.id, r.source)
        elif traced.graph.op(r.source).random:
            raise ExecutorError(f"recompute op {r.id!r}: the traced step records no RNG draw "
                                f"for the random op {r.source!r}, so its re-run cannot "
                                "reproduce it")
    return rng
