"""Checkpointing baselines applied to a traced graph by its module structure.

Each policy is a drop set over the *same* graph, expanded with
:func:`~roam_core.model.recompute_ops.recompute_ops_for` and scored by the same simulator and
planner as roam, so the comparison is like for like:

* ``none`` -- keep everything;
* ``checkpoint_blocks`` -- ``torch.utils.checkpoint`` around every block: keep each block's
  inputs, drop everything made inside, re-run the block in the backward;
* ``checkpoint_every_2`` -- the same around every 2nd block;
* ``sqrt_segments`` -- Chen et al. 2016 (arXiv 1604.06174): segments of ``ceil(sqrt(n))``
  blocks, only segment boundaries kept;
* ``checkpoint_sequential`` -- ``torch.utils.checkpoint.checkpoint_sequential`` with 4
  segments (the last segment is not checkpointed, as torch does);
* ``selective_attention`` -- Korthikanti et al. 2022 (arXiv 2205.05198): drop the attention
  core, the forward tensors whose last two dimensions are the attention length (the side of
  the square softmax outputs: scores, softmax, dropout output), and recompute them from Q and
  K.  Not applicable without such a softmax (CNNs, fused attention kernels).

The policies are a registry (:data:`BASELINES`, name -> :class:`Baseline`): a new policy is
one function and one registration in this module (:func:`register_baseline`, or
:func:`block_baseline` for a policy that checkpoints groups of blocks), and every consumer
(roam's portfolio and ``roam frontier``, the app's budget view, the benchmarks) reads the
registry.

Blocks are the children of the graph's largest module list (module paths ``<prefix>.<i>``
from the tracer, ``Op.module``).  What a policy may drop follows roam's rules
(:func:`~roam_core.model.recompute_ops.recompute_blocker`): dropout masks are dropped and
re-drawn from the replayed generator state, as ``torch.utils.checkpoint`` does, when the
tracer recorded their draws (graphs traced before that keep them).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from roam_core.model.graph import Graph, OpId, Phase, TensorId
from roam_core.model.recompute_ops import LATE_PHASES, droppable_storages, recompute_blockers

__all__ = ["BASELINES", "Baseline", "BaselinePolicy", "baseline_drop_set", "block_baseline",
           "find_blocks", "register_baseline"]

#: A policy: (graph, why each op may not be re-run) -> the storages it drops, or ``None``
#: when it does not apply to the graph (no repeated blocks, no attention).
BaselinePolicy = Callable[[Graph, Mapping[OpId, "str | None"]], "tuple[TensorId, ...] | None"]


@dataclass(frozen=True, slots=True)
class Baseline:
    """One checkpointing policy of the registry.

    Parameters
    ----------
    name : str
        Its method name in frontiers and plans.
    description : str
        One line in words (the app's legend).
    policy : BaselinePolicy
        The drop set it chooses (before :func:`baseline_drop_set` keeps only what roam may
        drop).
    """

    name: str
    description: str
    policy: BaselinePolicy


#: Every registered policy by name, in report order.
BASELINES: dict[str, Baseline] = {}


def register_baseline(name: str, description: str, policy: BaselinePolicy) -> Baseline:
    """Add a policy to :data:`BASELINES` (after the others in report order).

    Raises
    ------
    ValueError
        ``name`` is already registered.
    """
    if name in BASELINES:
        raise ValueError(f"baseline {name!r} is already registered")
    BASELINES[name] = b = Baseline(name, description, policy)
    return b


def block_baseline(name: str, description: str
                   ) -> Callable[[Callable[[tuple[str, ...]], list[list[str]]]],
                                 Callable[[tuple[str, ...]], list[list[str]]]]:
    """Register a policy that checkpoints groups of blocks (a decorator).

    The decorated function maps the graph's blocks (:func:`find_blocks`, in forward order)
    to the groups checkpointed together; the policy drops every droppable storage made inside
    a group and read only inside it (or late).  It does not apply to a graph without blocks.
    """
    def register(groups_of: Callable[[tuple[str, ...]], list[list[str]]]
                 ) -> Callable[[tuple[str, ...]], list[list[str]]]:
        def policy(graph: Graph, why: Mapping[OpId, str | None]
                   ) -> tuple[TensorId, ...] | None:
            blocks = find_blocks(graph)
            if not blocks:
                return None
            drop: set[TensorId] = set()
            for grp in groups_of(blocks):
                drop |= _segment_drops(graph, grp, why)
            return tuple(sorted(drop))

        register_baseline(name, description, policy)
        return groups_of

    return register




def find_blocks(graph: Graph) -> tuple[str, ...]:
    """Module paths of the repeated blocks (``("h.0", "h.1", ...)``), or ``()``.

    Blocks are the indexed children (``<prefix>.<i>``) of module lists: the list holding the
    most forward ops, together with every other list of at least 3 at the same depth
    (ResNet's ``layer1`` ... ``layer4``), in forward order.
    """
    count: Counter[tuple[str, int]] = Counter()
    first: dict[str, int] = {}
    for k, op in enumerate(graph.ops):
        if op.phase is not Phase.FORWARD or not op.module:
            continue
        parts = op.module.split(".")
        for i, part in enumerate(parts):
            if part.isdigit():
                key = (".".join(parts[:i]), int(part))
                count[key] += 1
                first.setdefault(f"{key[0]}.{key[1]}" if key[0] else part, k)
                break
    per_prefix: Counter[str] = Counter()
    idx: dict[str, set[int]] = {}
    for (prefix, i), n in count.items():
        per_prefix[prefix] += n
        idx.setdefault(prefix, set()).add(i)
    good = [p for p in per_prefix if len(idx[p]) >= 2]
    if not good:
        return ()
    best = max(good, key=lambda p: (per_prefix[p], p))
    depth = best.count(".") if best else -1
    lists = [p for p in good if p == best or (
        (p.count(".") if p else -1) == depth and len(idx[p]) >= 3)]
    blocks = [f"{p}.{i}" if p else str(i) for p in lists for i in idx[p]]
    return tuple(sorted(blocks, key=lambda b: first[b]))


def _inside(module: str, roots: Sequence[str]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in roots)


def _segment_drops(graph: Graph, roots: Sequence[str], why: Mapping[OpId, str | None]
                   ) -> set[TensorId]:
    """Droppable storages made inside ``roots`` and read only inside them (or late)."""
    out: set[TensorId] = set()
    for op in graph.ops:
        if op.phase is not Phase.FORWARD or not _inside(op.module, roots):
            continue
        if why[op.id] is not None:
            continue
        for s in graph.storages_created(op.id):
            t = graph.tensors[s]
            if not t.size_bytes:
                continue
            outside = [c for c in t.consumers if graph.op(c).phase in (Phase.FORWARD,
                                                                         Phase.LOSS)
                       and not _inside(graph.op(c).module, roots)]
            if not outside:
                out.add(s)
    return out


def _seq_len(graph: Graph) -> int | None:
    """The attention length: the square side of the forward softmax outputs, if any."""
    sq: Counter[int] = Counter()
    for op in graph.ops:
        if op.phase is not Phase.FORWARD or "softmax" not in op.target:
            continue
        for s in graph.storages_created(op.id):
            shape = graph.tensors[s].shape
            if len(shape) >= 3 and shape[-1] == shape[-2] > 1:
                sq[shape[-1]] += graph.tensors[s].size_bytes
    return sq.most_common(1)[0][0] if sq else None


def baseline_drop_set(graph: Graph, name: str) -> tuple[TensorId, ...] | None:
    """The storages policy ``name`` drops (``None``: the graph has no blocks / attention).

    Raises
    ------
    ValueError
        Unknown policy name.
    """
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; choose one of {', '.join(BASELINES)}")
    why = recompute_blockers(graph)
    found = BASELINES[name].policy(graph, why)
    if not found:  # None: not applicable; (): nothing to drop
        return found
    ok = set(droppable_storages(graph, why)) | {
        t.id for t in graph.tensors.values()
        if not any(graph.op(c).phase in LATE_PHASES for c in t.consumers)}
    return tuple(s for s in found if s in ok)


# ------------------------------------------------------------------ the policies
register_baseline("none", "no recomputation", lambda graph, why: ())


@block_baseline("checkpoint_blocks", "checkpoint every block")
def _every_block(blocks: tuple[str, ...]) -> list[list[str]]:
    return [[b] for b in blocks]


@block_baseline("checkpoint_every_2", "checkpoint every 2nd block")
def _every_2nd_block(blocks: tuple[str, ...]) -> list[list[str]]:
    return [[b] for i, b in enumerate(blocks) if i % 2 == 0]


@block_baseline("sqrt_segments", "sqrt(n) segments (Chen 2016)")
def _sqrt_segments(blocks: tuple[str, ...]) -> list[list[str]]:
    n = len(blocks)
    k = max(1, math.ceil(math.sqrt(n)))
    return [list(blocks[i:i + k]) for i in range(0, n, k)]


@block_baseline("checkpoint_sequential", "checkpoint_sequential (4 segments)")
def _checkpoint_sequential(blocks: tuple[str, ...]) -> list[list[str]]:
    """4 segments, the last one not checkpointed (as torch does)."""
    n = len(blocks)
    k = max(1, math.ceil(n / 4))
    return [list(blocks[i:i + k]) for i in range(0, n, k)][:-1]


def _selective_attention(graph: Graph, why: Mapping[OpId, str | None]
                         ) -> tuple[TensorId, ...] | None:
    t = _seq_len(graph)
    if t is None:
        return None
    out = []
    for ten in graph.tensors.values():
        p = ten.producer
        if (p is not None and len(ten.shape) >= 3 and ten.shape[-1] == t
                and ten.shape[-2] == t and graph.op(p).phase is Phase.FORWARD
                and why[p] is None and ten.size_bytes):
            out.append(ten.id)
    return tuple(out) or None


register_baseline("selective_attention", "selective attention core (Korthikanti 2022)",
                  _selective_attention)
