"""Recompute rules: a recompute op re-runs its source on the same inputs, when they exist,
before any op reads the value it rebuilds.

``RECOMPUTE_MISMATCH``, ``RNG_ORDER``, ``RECOMPUTE_INPUT`` and ``READ_DROPPED``, as listed
in :func:`check_recompute`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from roam_core.base.errors import GraphError, Violation, ViolationKind
from roam_core.model.graph import Graph, Op, OpId, TensorId
from roam_core.model.recompute_ops import RecomputeOp, recompute_blockers, running_stats_writes
from roam_core.oracle.validate.steps import first_steps

__all__ = ["check_recompute"]


def check_recompute(graph: Graph, recompute: Sequence[RecomputeOp],
                    order: Sequence[OpId]) -> list[Violation]:
    """Check the recompute ops of a plan against ``graph`` and the plan's ``order``.

    Rules:

    * ``RECOMPUTE_MISMATCH``: the copy may differ from the original -- the source op is
      unknown or may not be re-run (in-place, random, optimizer, ...), an input is neither
      the value the source read nor a recomputed copy of it, the output count differs, a
      listed reader reads none of the source's values, an input storage was written in
      place between the source and the re-run (the re-run would read another version), or
      the re-run of an in-place op writes the original storage instead of a copy;
    * ``RNG_ORDER``: the re-run of a random op runs before its source (the generator state
      it replays is recorded when the source's stream reaches it);
    * ``RECOMPUTE_INPUT``: an input is not available at the recompute op's step (its
      producer, or the recompute op making the copy, runs later or not at all);
    * ``READ_DROPPED``: a reader of the copy runs before the recompute op (it would read the
      dropped value between its drop and its recomputation).

    Parameters
    ----------
    graph : Graph
        The graph the plan was made for (without the recompute ops).
    recompute : sequence of RecomputeOp
        The plan's recompute ops.
    order : sequence of OpId
        The plan's order (graph ops and recompute ops).

    Returns
    -------
    list of Violation
    """
    out: list[Violation] = []
    pos = first_steps(order)
    copy_of, made_by = _copies(graph, recompute)
    writers: dict[TensorId, list[OpId]] = {}
    for op in graph.ops:
        for s in op.mutates:
            writers.setdefault(s, []).append(op.id)
    ctx = _Context(graph, pos, len(order), copy_of, made_by, writers)
    blockers: dict[OpId, str | None] | None = None
    for r in recompute:
        try:
            src = graph.op(r.source)
        except GraphError:
            out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                 f"recompute op {r.id!r} copies unknown op {r.source!r}"))
            continue
        if blockers is None:
            blockers = recompute_blockers(graph)
        out.extend(_source_rules(r, src, blockers[src.id]))
        if len(r.inputs) != len(src.inputs) or len(r.outputs) != len(src.outputs):
            continue  # reported by _source_rules; the inputs cannot be paired
        here = pos.get(r.id)
        if here is None:
            out.append(Violation(ViolationKind.RECOMPUTE_INPUT, r.id,
                                 f"recompute op {r.id!r} is not in the order"))
        stats = running_stats_writes(graph, src)  # batch norm: the re-run skips them
        out.extend(_input_rules(ctx, r, src, here, stats))
        out.extend(_in_place_rules(graph, r, src, stats))
        if src.random and here is not None and pos.get(src.id, len(order)) > here:
            out.append(Violation(ViolationKind.RNG_ORDER, r.id,
                                 f"recompute op {r.id!r} replays the random draw of "
                                 f"{src.id!r} before {src.id!r} runs: the generator state it "
                                 "replays is not recorded yet"))
        out.extend(_reader_rules(graph, r, src, here, pos))
    return out


@dataclass(frozen=True, slots=True)
class _Context:
    """What the input rules read: the graph, each op's first step, the order's length, the
    recomputed copies (copy value -> original value, -> the recompute op making it) and
    each storage's in-place writers."""

    graph: Graph
    pos: Mapping[OpId, int]
    n_steps: int
    copy_of: Mapping[str, str]
    made_by: Mapping[str, OpId]
    writers: Mapping[TensorId, Sequence[OpId]]


def _copies(graph: Graph, recompute: Sequence[RecomputeOp],
            ) -> tuple[dict[str, str], dict[str, OpId]]:
    """``(copy value -> original value, copy value -> recompute op id)`` of every recompute
    op whose source is known."""
    copy_of: dict[str, str] = {}
    made_by: dict[str, OpId] = {}
    for r in recompute:
        try:
            src = graph.op(r.source)
        except GraphError:
            continue
        for v, v0 in zip(r.outputs, src.outputs):
            copy_of[v] = v0
            made_by[v] = r.id
    return copy_of, made_by


def _source_rules(r: RecomputeOp, src: Op, why: str | None) -> list[Violation]:
    """The source may be re-run, and the copy has its number of inputs and outputs."""
    out: list[Violation] = []
    if why is not None:
        out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                             f"recompute op {r.id!r} re-runs {src.id!r}, which may not be "
                             f"re-run ({why})"))
    if len(r.inputs) != len(src.inputs) or len(r.outputs) != len(src.outputs):
        out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                             f"recompute op {r.id!r} has {len(r.inputs)} inputs and "
                             f"{len(r.outputs)} outputs; {src.id!r} has "
                             f"{len(src.inputs)} and {len(src.outputs)}"))
    return out


def _input_rules(ctx: _Context, r: RecomputeOp, src: Op, here: int | None,
                 stats: Collection[TensorId]) -> list[Violation]:
    """Each input is the value the source read (or a copy of it), exists at the recompute
    op's step, and was not written in place between the source and the re-run."""
    graph, pos, n = ctx.graph, ctx.pos, ctx.n_steps
    out: list[Violation] = []
    for u, u0 in zip(r.inputs, src.inputs):
        if u == u0 and graph.storage_of(u0) in stats:
            continue
        if u != u0 and ctx.copy_of.get(u) != u0:
            out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                 f"recompute op {r.id!r} reads {u!r} where {src.id!r} "
                                 f"read {u0!r}"))
            continue
        if here is None:
            continue
        maker = ctx.made_by[u] if u != u0 else graph.value_producer(u0)
        if maker is not None and pos.get(maker, n) >= here:
            out.append(Violation(ViolationKind.RECOMPUTE_INPUT, r.id,
                                 f"recompute op {r.id!r} (step {here}) reads {u!r}, which "
                                 f"{maker!r} only makes at step {pos.get(maker, 'never')}"))
        if u == u0 and src.id in pos:
            s = graph.storage_of(u0)
            a = {w for w in ctx.writers.get(s, ()) if pos.get(w, n) < pos[src.id]}
            b = {w for w in ctx.writers.get(s, ()) if pos.get(w, n) < here}
            if a != b:
                w = sorted(a ^ b)[0]
                out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                     f"recompute op {r.id!r} reads {s!r} after {w!r} wrote "
                                     f"it in place, {src.id!r} read it before"))
    return out


def _in_place_rules(graph: Graph, r: RecomputeOp, src: Op,
                    stats: Collection[TensorId]) -> list[Violation]:
    """The re-run of an in-place op writes the copies it reads, never the original (the
    running statistics ``stats`` of a batch norm excepted: the re-run skips them)."""
    out: list[Violation] = []
    for u, u0 in zip(r.inputs, src.inputs):
        if u == u0 and graph.storage_of(u0) in src.mutates \
                and graph.storage_of(u0) not in stats:
            out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                 f"recompute op {r.id!r} writes {graph.storage_of(u0)!r} "
                                 f"in place, as {src.id!r} did: a re-run may only write "
                                 "the copies it reads"))
    return out


def _reader_rules(graph: Graph, r: RecomputeOp, src: Op, here: int | None,
                  pos: Mapping[OpId, int]) -> list[Violation]:
    """Each listed reader reads a value of the source, and runs after the recompute op."""
    out: list[Violation] = []
    outs0 = set(src.outputs)
    for reader in r.readers:
        if reader not in graph.op_ids:
            out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                 f"recompute op {r.id!r} lists unknown reader {reader!r}"))
            continue
        if not outs0 & set(graph.op(reader).inputs):
            out.append(Violation(ViolationKind.RECOMPUTE_MISMATCH, r.id,
                                 f"recompute op {r.id!r} lists reader {reader!r}, which "
                                 f"reads none of the values of {src.id!r}"))
            continue
        if here is not None and reader in pos and pos[reader] < here:
            out.append(Violation(ViolationKind.READ_DROPPED, reader,
                                 f"op {reader!r} (step {pos[reader]}) reads the value of "
                                 f"{src.id!r} after it was dropped, before recompute op "
                                 f"{r.id!r} rebuilds it (step {here})"))
    return out
