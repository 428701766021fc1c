"""Eager FSDP2's per-rank peak from the graph of one rank: FSDP2 holds what it gathered.

The traced rank step (:mod:`roam_core.trace.parallel.fsdp`) frees every storage after its
last reader, so its program-order peak (:func:`~roam_core.oracle.baseline.eager_report`) is
what roam's own program needs.  Eager FSDP2 holds more: a unit that does not reshard after
its forward (the root always; every unit with ``reshard_after_forward=False``) keeps its
gathered parameters from its pre-forward until its post-backward reduce-scatter, even where
the step no longer reads them.  The gathered embedding table is the large case: its last
reader is the forward's lookup (the embedding's backward reads only the indices), so
roam's program frees it at once, while FSDP2 keeps it through the whole backward.  With an
untied LM head (Llama) this is the whole gap between roam's eager peak and torch's
``FSDPMemTracker`` (``docs/parallel.md``, "Against the peer").

:func:`fsdp2_eager_peak_bytes` is the program-order peak with those holds: the forward
gathers (the copy-out ops ``split_with_sizes_copy`` of the forward, one per unit, in unit
forward order) are paired with the reduce-scatters in reverse (FSDP2's post-backward order),
and the buffers of a unit that does not reshard live until its reduce-scatter's copy-in
(FSDP2's post-backward frees them just before it).  When the
counts differ (a unit without gradients) only the root's are held, until the last
reduce-scatter.
"""

from __future__ import annotations

from roam_core.model.graph import Graph, Phase, TensorId
from roam_core.model.parallel import parallel_of
from roam_core.oracle.simulate import Lifetime, lifetimes, simulate

__all__ = ["fsdp2_eager_peak_bytes", "fsdp2_held_storages"]


def fsdp2_held_storages(graph: Graph) -> dict[TensorId, int]:
    """The gathered storages eager FSDP2 holds, each with the program position (index in
    ``graph.op_ids``) of the op it lives until (its unit's reduce-scatter copy-in, where
    FSDP2 reshards); empty unless ``graph`` is the step of an FSDP rank."""
    par = parallel_of(graph)
    if par.kind != "fsdp":
        return {}
    order = list(graph.op_ids)
    ops = [graph.op(o) for o in order]
    gathers = [i for i, op in enumerate(ops)
               if op.phase is Phase.FORWARD and "split_with_sizes_copy" in str(op.target)]
    scatters = [i for i, op in enumerate(ops) if "reduce_scatter" in str(op.target)]
    if not gathers or not scatters:
        return {}
    if len(gathers) == len(scatters):
        # the root first in the forward, last in the post-backward order
        pairs = list(zip(gathers, reversed(scatters), strict=True))
        if par.reshard_after_forward:
            pairs = pairs[:1]  # the others free their buffers after their forward
    else:
        pairs = [(gathers[0], scatters[-1])]
    # FSDP2's post-backward reshards (frees the buffers) before its reduce-scatter's copy-in
    # (``_chunk_cat`` into the staging buffer): a buffer is held until that op
    copy_in = [i for i, op in enumerate(ops) if "_chunk_cat" in str(op.target)]
    held: dict[TensorId, int] = {}
    for g, s in pairs:
        until = max((c for c in copy_in if c < s), default=s)
        for v in ops[g].outputs:
            held[graph.storage_of(v)] = until
    return held


def fsdp2_eager_peak_bytes(graph: Graph) -> int:
    """Program-order peak of ``graph`` (unrounded bytes, resident storages included) with
    eager FSDP2's holds (see the module notes); the plain program-order peak for a graph
    that is not an FSDP rank's.

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> fsdp2_eager_peak_bytes(chain3()) > 0
    True
    """
    order = list(graph.op_ids)
    life = lifetimes(graph, order)
    held = fsdp2_held_storages(graph)
    # lifetimes are [start, end): a held buffer is freed as its unit's copy-in runs
    longer = {tid: Lifetime(lt.start, max(lt.end, held[tid])) if tid in held else lt
              for tid, lt in life.items()}
    return simulate(graph, order, alignment_bytes=1, lifetimes_override=longer).peak_bytes
