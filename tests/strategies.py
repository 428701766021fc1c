"""Hypothesis strategies shared by the test suite: random valid training-step-like graphs.

``random_graphs()`` draws a :class:`~roam_core.model.graph.Graph` whose program order is a valid
(topological) order, with

* resident storages (parameters, buffers, inputs, optimizer state) of random sizes;
* ops of random phases that read earlier values (storages or aliases), allocate 0–2 new
  storages of random kinds and sizes (0 bytes included), return views (aliases) of what they
  read, mutate what they read in place, and draw random numbers;
* control edges: mutation hazards (every earlier reader of a mutated storage runs before the
  writer, as the tracer records them), RNG edges chaining the random ops, and a few arbitrary
  forward edges;
* graph outputs: a random subset of the produced storages.

Every knob can be switched off, so a test can ask for plain DAGs
(``random_graphs(aliases=False, mutations=False, control=False)``).

Examples
--------
>>> from hypothesis import given
>>> @given(random_graphs(max_ops=5))
... def test(g):
...     assert len(g.ops) <= 5
"""

from __future__ import annotations

from hypothesis import strategies as st

from roam_core.model.dsa import Buffer, Problem
from roam_core.model.graph import (
    Alias,
    ControlEdge,
    EdgeReason,
    Graph,
    Op,
    OpId,
    Phase,
    Tensor,
    TensorId,
    TensorKind,
)

__all__ = ["orders_of", "random_graphs"]

_RESIDENT_KINDS = (TensorKind.PARAMETER, TensorKind.BUFFER, TensorKind.INPUT,
                   TensorKind.OPTIMIZER_STATE)
_PLANNED_KINDS = (TensorKind.ACTIVATION, TensorKind.GRADIENT, TensorKind.TEMPORARY,
                  TensorKind.OUTPUT, TensorKind.OPTIMIZER_STATE)


@st.composite
def random_graphs(
    draw: st.DrawFn,
    max_ops: int = 12,
    *,
    min_ops: int = 1,
    max_residents: int = 3,
    max_size_bytes: int = 4096,
    max_inputs: int = 3,
    max_new_storages: int = 2,
    aliases: bool = True,
    mutations: bool = True,
    control: bool = True,
    random_ops: bool = True,
    outputs: bool = True,
) -> Graph:
    """Draw a random valid graph (program order is topological).

    Parameters
    ----------
    max_ops, min_ops : int
        Bounds on the number of ops.
    max_residents : int
        At most this many resident storages (no producer).
    max_size_bytes : int
        Storage sizes are drawn from ``0..max_size_bytes``.
    max_inputs : int
        At most this many values read per op.
    max_new_storages : int
        At most this many storages allocated per op.
    aliases, mutations, control, random_ops, outputs : bool
        Enable views, in-place writes (with their mutation control edges), extra control
        edges, random ops (with RNG edges) and graph outputs.
    """
    n_ops = draw(st.integers(min_ops, max_ops))
    sizes = st.integers(0, max_size_bytes)
    tensors: list[Tensor] = []
    alias_list: list[Alias] = []
    values: list[str] = []  # every value produced so far (or resident)
    storage_of: dict[str, str] = {}
    for r in range(draw(st.integers(0, max_residents))):
        tid = TensorId(f"r{r}")
        kind = draw(st.sampled_from(_RESIDENT_KINDS))
        tensors.append(Tensor(tid, draw(sizes), "float32", (1,), kind, None))
        values.append(tid)
        storage_of[tid] = tid
    ops: list[Op] = []
    readers: dict[str, list[OpId]] = {}  # storage -> ops that touched it so far
    edges: list[ControlEdge] = []
    rng_ops: list[OpId] = []
    phases = st.sampled_from(list(Phase))
    for i in range(n_ops):
        oid = OpId(f"op{i}")
        ins: list[str] = []
        if values:
            ins = draw(st.lists(st.sampled_from(values), max_size=max_inputs, unique=True))
        outs: list[str] = []
        for k in range(draw(st.integers(0, max_new_storages))):
            tid = TensorId(f"v{i}_{k}")
            tensors.append(Tensor(tid, draw(sizes), "float32", (1,),
                                  draw(st.sampled_from(_PLANNED_KINDS)), oid))
            outs.append(tid)
            storage_of[tid] = tid
        if aliases and ins and draw(st.booleans()):
            src = draw(st.sampled_from(ins))
            aid = f"a{i}"
            alias_list.append(Alias(aid, TensorId(storage_of[src]), oid))
            outs.append(aid)
            storage_of[aid] = storage_of[src]
        mut: list[TensorId] = []
        if mutations and ins and draw(st.integers(0, 3)) == 0:
            mut = [TensorId(storage_of[draw(st.sampled_from(ins))])]
            for prev in readers.get(mut[0], []):
                edges.append(ControlEdge(prev, oid, EdgeReason.MUTATION))
        rnd = random_ops and draw(st.integers(0, 4)) == 0
        if rnd:
            if rng_ops:
                edges.append(ControlEdge(rng_ops[-1], oid, EdgeReason.RNG))
            rng_ops.append(oid)
        ops.append(Op(oid, draw(st.sampled_from(["aten.mm.default", "aten.relu.default",
                                                  "aten.add.Tensor"])),
                      draw(phases), tuple(ins), tuple(outs), tuple(mut), rnd))
        for v in ins:
            readers.setdefault(storage_of[v], []).append(oid)
        values.extend(outs)
    if control and n_ops >= 2:
        for _ in range(draw(st.integers(0, 3))):
            a = draw(st.integers(0, n_ops - 2))
            b = draw(st.integers(a + 1, n_ops - 1))
            edges.append(ControlEdge(OpId(f"op{a}"), OpId(f"op{b}"),
                                     draw(st.sampled_from(list(EdgeReason)))))
    # deduplicate edges (same src, dst, reason) while keeping their order
    edges = list(dict.fromkeys(edges))
    outs_sel: list[TensorId] = []
    planned = [t.id for t in tensors if t.producer is not None]
    if outputs and planned:
        outs_sel = draw(st.lists(st.sampled_from(planned), max_size=2, unique=True))
    return Graph.build(ops, tensors, alias_list, edges, outs_sel, name="random")


@st.composite
def orders_of(draw: st.DrawFn, graph: Graph) -> tuple[OpId, ...]:
    """Draw a random valid (topological) order of ``graph``'s ops."""
    indeg = {op: len(graph.predecessors(op)) for op in graph.op_ids}
    ready = [op for op in graph.op_ids if indeg[op] == 0]
    out: list[OpId] = []
    while ready:
        op = ready.pop(draw(st.integers(0, len(ready) - 1)))
        out.append(op)
        for s in graph.successors(op):
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return tuple(out)


@st.composite
def problems(draw: st.DrawFn, max_buffers: int = 8, max_time: int = 8, max_size: int = 8,
             ) -> Problem:
    n = draw(st.integers(0, max_buffers))
    bufs = []
    for i in range(n):
        lo = draw(st.integers(0, max_time - 1))
        hi = draw(st.integers(lo + 1, max_time))
        bufs.append(Buffer(f"b{i}", lo, hi, draw(st.integers(0, max_size))))
    return Problem(tuple(bufs))
