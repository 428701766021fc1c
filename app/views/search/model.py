"""Search a graph by name: modules by path, ops by id, target or module, storages by id or
parameter name."""

from __future__ import annotations

import re
from collections.abc import Callable

from app.core.formatting import fmt_bytes, kind_label
from roam_core.model.graph import Graph
from roam_core.oracle.attribution import module_ancestors

__all__ = ["regex_problem", "search"]


def regex_problem(query: str) -> str | None:
    """Why ``query`` is not a valid regular expression (``None`` when it is).

    >>> regex_problem("h.0.attn("), regex_problem("c_fc.weight$") is None
    ('missing ), unterminated subpattern at position 8', True)
    """
    try:
        re.compile(query.strip())
    except re.error as e:
        return str(e)
    return None


def search(graph: Graph, query: str, limit: int = 30) -> list[tuple[str, str, str]]:
    """Modules, ops and storages matching ``query`` (regex, case-insensitive; a plain
    substring when it is not a valid regex).

    A module matches by its path; an op by its id, target or module path; a storage by its
    id or name (``h.0.attn.c_attn.weight``, ``...weight.exp_avg``).  Returns
    ``[(kind, id, label)]`` with ``kind`` in ``{"module", "op", "tensor"}``.

    Examples
    --------
    >>> from roam_core.model.samples import tiny_train_step
    >>> [h[:2] for h in search(tiny_train_step(), "relu_bw")]
    [('op', 'relu_bw'), ('tensor', 'relu_bw')]
    """
    q = query.strip()
    if not q:
        return []
    match: Callable[[str], object]
    try:
        pat = re.compile(q, re.IGNORECASE)
        match = pat.search
    except re.error:
        low = q.lower()
        match = lambda s: low in s.lower()  # noqa: E731
    hits: list[tuple[str, str, str]] = []
    n_ops: dict[str, int] = {}
    for op in graph.ops:
        for m in module_ancestors(op.module):
            n_ops[m] = n_ops.get(m, 0) + 1
    for m, n in n_ops.items():
        if match(m):
            hits.append(("module", m, f"module {m} ({n} ops)"))
            if len(hits) >= limit:
                return hits
    for op in graph.ops:
        if match(op.id) or match(op.target) or (op.module and match(op.module)):
            where = f", in {op.module}" if op.module else ""
            hits.append(("op", op.id, f"op {op.id} ({op.target}{where})"))
            if len(hits) >= limit:
                return hits
    for t in graph.tensors.values():
        if match(t.id) or (t.name and match(t.name)):
            ident = f"{t.name} ({t.id}, " if t.name else f"{t.id} ("
            hits.append(("tensor", t.id, f"tensor {ident}{kind_label(t.kind)}, "
                                          f"{fmt_bytes(t.size_bytes)})"))
            if len(hits) >= limit:
                break
    return hits

