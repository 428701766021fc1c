"""Where ops and storages sit in an order, as the checkers read it.

Defined here from the graph alone (not imported from the simulator), so that the checkers
stay independent of what they check.  Unlike the simulator these never raise: an op missing
from the order, or named twice, is reported by
:func:`~roam_core.oracle.validate.order_rules.check_order`, and read here as leniently as
the rules need.
"""

from __future__ import annotations

from collections.abc import Sequence

from roam_core.model.graph import Graph, OpId, TensorId

__all__ = ["first_steps", "live_spans"]


def first_steps(order: Sequence[OpId]) -> dict[OpId, int]:
    """The first step of each op named in ``order``.

    Examples
    --------
    >>> first_steps(["a", "b", "a"])
    {'a': 0, 'b': 1}
    """
    pos: dict[OpId, int] = {}
    for i, op in enumerate(order):
        pos.setdefault(op, i)
    return pos


def live_spans(graph: Graph, order: Sequence[OpId]) -> dict[TensorId, tuple[int, int]]:
    """Live steps ``[start, end)`` of every storage; resident ones span the whole step.

    A storage is live from its producer's step to past its last consumer's (at least one
    step; a graph output to the end).  A storage whose producer is missing from the order
    (reported by :func:`~roam_core.oracle.validate.order_rules.check_order`) is treated as
    live throughout, and a missing consumer as running at the end.

    Examples
    --------
    >>> from roam_core.model.samples import chain3
    >>> g = chain3()
    >>> live_spans(g, g.op_ids)
    {'a': (0, 2), 'b': (1, 3), 'c': (2, 3)}
    """
    pos = first_steps(order)
    n = len(order)
    outputs = set(graph.outputs)
    out: dict[TensorId, tuple[int, int]] = {}
    for t in graph.tensors.values():
        if t.producer is None or t.producer not in pos:
            out[t.id] = (-1, n + 1)
            continue
        s = pos[t.producer]
        if t.id in outputs:
            e = n
        else:
            e = max((pos.get(c, n) + 1 for c in t.consumers), default=s + 1)
        out[t.id] = (s, max(e, s + 1))
    return out
