"""Versioned JSON format for graphs (gzip accepted), with a strict loader.

Format (``schema_version`` 2; version 1 files load too: without ``module``, ``name``
and the per-op cost fields)::

    {
      "format": "roam-graph", "schema_version": 2, "name": "mlp", "origin": {...},
      "ops": [{"id": "mm", "target": "aten.mm.default", "phase": "forward",
               "inputs": ["x", "w"], "outputs": ["mm"], "mutates": [], "random": false,
               "module": "blocks.0.fc", "flops": 65536, "bytes_read": 8192,
               "bytes_written": 4096, "recomputable": true}],
      "tensors": [{"id": "mm", "size_bytes": 4096, "dtype": "float32", "shape": [32, 32],
                   "kind": "activation", "producer": "mm", "name": null}],
      "aliases": [{"id": "t", "storage": "w", "producer": "t"}],
      "control_edges": [{"src": "a", "dst": "b", "reason": "mutation"}],
      "outputs": ["loss"]
    }

``module`` (the ``nn.Module`` path an op ran in, ``""`` at the top level) and ``name`` (a
storage's parameter / buffer / gradient / optimizer-state name, or ``null``) are new in
version 2; version 1 files (without them) still load, with ``""`` and ``null``.  Neither
enters the graph fingerprint, so a plan made for a version 1 file fits its version 2 re-trace.

Storage ``consumers`` are derived from the ops; a file may list them, and then they must
agree.  Every problem raises :class:`~roam_core.base.errors.GraphError` naming the offending id.
Nothing is ever unpickled.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

from roam_core.base.collector import gc_paused
from roam_core.base.errors import GraphError
from roam_core.base.safe_gzip import gunzip_bounded
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

__all__ = [
    "GRAPH_SCHEMA_VERSION",
    "dumps_graph",
    "graph_from_dict",
    "graph_to_dict",
    "load_graph",
    "loads_graph",
    "save_graph",
]

GRAPH_SCHEMA_VERSION = 2
#: Versions :func:`graph_from_dict` reads (1: without ``module`` / ``name``).
READABLE_SCHEMA_VERSIONS = (1, 2)
_FORMAT = "roam-graph"


def graph_to_dict(graph: Graph) -> dict[str, Any]:
    """Plain-JSON dict of a graph (the inverse of :func:`graph_from_dict`)."""
    return {
        "format": _FORMAT,
        "schema_version": GRAPH_SCHEMA_VERSION,
        "name": graph.name,
        "origin": dict(graph.origin),
        "ops": [
            {
                "id": o.id,
                "target": o.target,
                "phase": o.phase.value,
                "inputs": list(o.inputs),
                "outputs": list(o.outputs),
                "mutates": list(o.mutates),
                "random": o.random,
                "module": o.module,
                **_cost_fields(o),
            }
            for o in graph.ops
        ],
        "tensors": [
            {
                "id": t.id,
                "size_bytes": t.size_bytes,
                "dtype": t.dtype,
                "shape": list(t.shape),
                "kind": t.kind.value,
                "producer": t.producer,
                "name": t.name,
            }
            for t in graph.tensors.values()
        ],
        "aliases": [
            {"id": a.id, "storage": a.storage, "producer": a.producer} for a in graph.aliases
        ],
        "control_edges": [
            {"src": e.src, "dst": e.dst, "reason": e.reason.value} for e in graph.control_edges
        ],
        "outputs": list(graph.outputs),
    }


def _cost_fields(o: Op) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("flops", "bytes_read", "bytes_written", "recomputable"):
        v = getattr(o, key)
        if v is not None:
            out[key] = v
    return out


def dumps_graph(graph: Graph, *, compress: bool = False) -> bytes:
    """Serialise a graph to JSON bytes (gzip-compressed when ``compress``)."""
    raw = json.dumps(graph_to_dict(graph), separators=(",", ":")).encode()
    return gzip.compress(raw, compresslevel=6, mtime=0) if compress else raw


def save_graph(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write a graph file; a name ending in ``.gz`` is gzip-compressed.

    Examples
    --------
    >>> import tempfile, os
    >>> from roam_core.model.samples import diamond
    >>> p = os.path.join(tempfile.mkdtemp(), "g.json.gz")
    >>> save_graph(diamond(), p)
    >>> load_graph(p).fingerprint() == diamond().fingerprint()
    True
    """
    data = dumps_graph(graph, compress=os.fspath(path).endswith(".gz"))
    with open(path, "wb") as f:
        f.write(data)


def load_graph(path: str | os.PathLike[str]) -> Graph:
    """Read a graph file (JSON or gzip JSON).

    Raises
    ------
    GraphError
        If the file cannot be read or is not a valid graph; the message names the id.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise GraphError(f"cannot read graph file {os.fspath(path)!r}: {e.strerror}") from e
    return loads_graph(data)


def loads_graph(data: bytes | str) -> Graph:
    """Parse graph JSON (bytes may be gzip-compressed).

    Raises
    ------
    GraphError
        Bad JSON, wrong ``schema_version``, missing fields, duplicate or dangling ids,
        negative or non-integer sizes, cycles.
    """
    if isinstance(data, str):
        data = data.encode()
    if data[:2] == b"\x1f\x8b":
        data = gunzip_bounded(data, GraphError, "graph file")
    with gc_paused(promote_survivors=True):  # a large graph file: millions of objects, all kept
        try:
            obj = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise GraphError(f"graph file is not valid JSON: {e}") from e
        return graph_from_dict(obj)


def graph_from_dict(obj: Any) -> Graph:
    """Build a graph from its JSON dict, validating every field."""
    if not isinstance(obj, Mapping):
        raise GraphError("graph file must hold a JSON object")
    if obj.get("format", _FORMAT) != _FORMAT:
        raise GraphError(f"not a roam graph file (format {obj.get('format')!r})")
    version = obj.get("schema_version")
    if isinstance(version, bool) or version not in READABLE_SCHEMA_VERSIONS:
        raise GraphError(
            f"unsupported graph schema_version {version!r} (this roam reads "
            f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))})"
        )
    ops = [_op(o, i) for i, o in enumerate(_list(obj, "ops"))]
    tensors = [_tensor(t, i) for i, t in enumerate(_list(obj, "tensors"))]
    seen: set[str] = set()
    for t in tensors:
        if t.id in seen:
            raise GraphError(f"duplicate tensor id {t.id!r}")
        seen.add(t.id)
    aliases = [
        Alias(
            _str(a, "id", f"alias #{i}"),
            TensorId(_str(a, "storage", f"alias #{i}")),
            _opt_op_id(a, "producer", f"alias #{i}"),
        )
        for i, a in enumerate(_list(obj, "aliases", required=False))
    ]
    edges = []
    for i, e in enumerate(_list(obj, "control_edges", required=False)):
        where = f"control edge #{i}"
        edges.append(
            ControlEdge(
                OpId(_str(e, "src", where)),
                OpId(_str(e, "dst", where)),
                _enum(EdgeReason, e, "reason", where),
            )
        )
    outputs = [TensorId(sys.intern(str(x))) for x in _list(obj, "outputs", required=False)]
    origin = obj.get("origin", {"source": "custom"})
    if not isinstance(origin, Mapping):
        raise GraphError("graph 'origin' must be an object")
    g = Graph.build(
        ops, tensors, aliases, edges, outputs, name=str(obj.get("name", "graph")), origin=origin
    )
    # consumers listed in the file must agree with the derived ones
    for i, t in enumerate(_list(obj, "tensors")):
        if "consumers" in t and list(t["consumers"]) != list(g.tensors[t["id"]].consumers):
            raise GraphError(f"tensor {t['id']!r}: listed consumers disagree with the ops")
        del i
    return g


# ------------------------------------------------------------------ field parsing
def _list(obj: Mapping[str, Any], key: str, *, required: bool = True) -> list[Any]:
    if key not in obj:
        if required:
            raise GraphError(f"graph file has no {key!r} list")
        return []
    v = obj[key]
    if not isinstance(v, list):
        raise GraphError(f"graph {key!r} must be a list")
    return v


# The strings of a graph file are interned (``sys.intern``): every mention of an id (an op
# as producer, consumer, edge end; a storage as input, output) is then one object, so the
# planner's lookups by id compare pointers instead of bytes, and the file's repeated names
# are kept once.
def _str(d: Any, key: str, where: str) -> str:
    if not isinstance(d, Mapping):
        raise GraphError(f"{where} must be an object")
    v = d.get(key)
    if not isinstance(v, str) or not v:
        raise GraphError(f"{where}: field {key!r} must be a non-empty string")
    return sys.intern(v)


def _opt_str(d: Mapping[str, Any], key: str, where: str) -> str | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise GraphError(f"{where}: field {key!r} must be a string or null")
    return sys.intern(v)


def _opt_op_id(d: Mapping[str, Any], key: str, where: str) -> OpId | None:
    v = _opt_str(d, key, where)
    return None if v is None else OpId(v)


def _strs(d: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise GraphError(f"{where}: field {key!r} must be a list of strings")
    return tuple(map(sys.intern, v))


_E = TypeVar("_E", bound=Enum)


def _enum(cls: type[_E], d: Mapping[str, Any], key: str, where: str) -> _E:
    v = d.get(key)
    try:
        return cls(v)
    except ValueError:
        allowed = ", ".join(m.value for m in cls)
        raise GraphError(f"{where}: {key} {v!r} is not one of {allowed}") from None


def _op(d: Any, i: int) -> Op:
    oid = _str(d, "id", f"op #{i}")
    where = f"op {oid!r}"
    rnd = d.get("random", False)
    if not isinstance(rnd, bool):
        raise GraphError(f"{where}: field 'random' must be true or false")
    costs: list[int | None] = []
    for key in ("flops", "bytes_read", "bytes_written"):
        v = d.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise GraphError(f"{where}: field {key!r} must be a non-negative integer")
        costs.append(v)
    rec = d.get("recomputable")
    if rec is not None and not isinstance(rec, bool):
        raise GraphError(f"{where}: field 'recomputable' must be true or false")
    return Op(
        OpId(oid),
        _str(d, "target", where),
        _enum(Phase, d, "phase", where),
        _strs(d, "inputs", where),
        _strs(d, "outputs", where),
        tuple(TensorId(s) for s in _strs(d, "mutates", where)),
        rnd,
        _module(d, where),
        flops=costs[0],
        bytes_read=costs[1],
        bytes_written=costs[2],
        recomputable=rec,
    )


def _module(d: Mapping[str, Any], where: str) -> str:
    v = d.get("module", "")
    if v is None:
        return ""
    if not isinstance(v, str):
        raise GraphError(f"{where}: field 'module' must be a string")
    return v


def _tensor(d: Any, i: int) -> Tensor:
    tid = _str(d, "id", f"tensor #{i}")
    where = f"tensor {tid!r}"
    size = d.get("size_bytes")
    if isinstance(size, bool) or not isinstance(size, int):
        raise GraphError(f"{where}: size_bytes {size!r} is not an integer")
    if size < 0:
        raise GraphError(f"{where}: negative size_bytes {size}")
    shape = d.get("shape", [])
    if not isinstance(shape, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in shape
    ):
        raise GraphError(f"{where}: shape must be a list of integers")
    return Tensor(
        TensorId(tid),
        size,
        str(d.get("dtype", "float32")),
        tuple(shape),
        _enum(TensorKind, d, "kind", where),
        _opt_op_id(d, "producer", where),
        name=_opt_str(d, "name", where),
    )
