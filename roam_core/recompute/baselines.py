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

Blocks are the children of the graph's largest module list (module paths ``<prefix>.<i>``
from the tracer, ``Op.module``).  What a policy may drop follows roam's rules
(:func:`~roam_core.model.recompute_ops.recompute_blocker`): dropout masks are dropped and
re-drawn from the replayed generator state, as ``torch.utils.checkpoint`` does, when the
tracer recorded their draws (graphs traced before that keep them).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from roam_core.model.graph import Graph, Phase, TensorId
from roam_core.model.recompute_ops import LATE_PHASES, droppable_storages, recompute_blockers

__all__ = ["BASELINES", "baseline_drop_set", "find_blocks"]

#: Names of the baseline policies, in report order.
BASELINES = ("none", "checkpoint_blocks", "checkpoint_every_2", "sqrt_segments",
             "checkpoint_sequential", "selective_attention")

_INDEXED = re.compile(r"^(.*?)(\d+)(?:\.|$)")


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


def _segment_drops(graph: Graph, roots: Sequence[str], why: dict) -> set[TensorId]:
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
    if name == "none":
        return ()
    ok = set(droppable_storages(graph, why)) | {
        t.id for t in graph.tensors.values()
        if not any(graph.op(c).phase in LATE_PHASES for c in t.consumers)}
    found = _policy(graph, name, why)
    return None if found is None else tuple(s for s in found if s in ok)


def _policy(graph: Graph, name: str, why: dict) -> tuple[TensorId, ...] | None:
    if name == "selective_attention":
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
    blocks = find_blocks(graph)
    if not blocks:
        return None
    n = len(blocks)
    if name == "checkpoint_blocks":
        groups = [[b] for b in blocks]
    elif name == "checkpoint_every_2":
        groups = [[b] for i, b in enumerate(blocks) if i % 2 == 0]
    elif name == "sqrt_segments":
        k = max(1, math.ceil(math.sqrt(n)))
        groups = [list(blocks[i:i + k]) for i in range(0, n, k)]
    else:  # checkpoint_sequential, 4 segments, the last one not checkpointed
        k = max(1, math.ceil(n / 4))
        groups = [list(blocks[i:i + k]) for i in range(0, n, k)][:-1]
    drop: set[TensorId] = set()
    for grp in groups:
        drop |= _segment_drops(graph, grp, why)
    return tuple(sorted(drop))
