"""The graph file's fields, checked one record at a time: :class:`GraphReader`.

The loader (:mod:`roam_core.formats.graph_io`) hands the reader each element of the file's
``ops``, ``tensors``, ``aliases`` and ``control_edges`` arrays as it is decoded; the reader
checks every field (type, range, Unicode, size limits), keeps the record and drops the dict,
and :meth:`GraphReader.finish` checks the top-level fields and builds the
:class:`~roam_core.model.graph.Graph` (which checks the structure: dangling ids, cycles).
Every problem is a :class:`~roam_core.base.errors.GraphError` naming the record and field.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from roam_core.base.errors import GraphError
from roam_core.formats.fields import check_int, check_str, short
from roam_core.formats.json_scan import STREAMED, json_depth_ok
from roam_core.formats.limits import FileLimits
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
    "GRAPH_FORMAT",
    "GRAPH_SCHEMA_VERSION",
    "READABLE_SCHEMA_VERSIONS",
    "STREAMED",
    "GraphReader",
]

GRAPH_SCHEMA_VERSION = 2
#: Versions the reader reads (1: without ``module`` / ``name``).
READABLE_SCHEMA_VERSIONS = (1, 2)
GRAPH_FORMAT = "roam-graph"
#: ``origin`` nests at most this deep and takes at most this much JSON.
_ORIGIN_DEPTH = 16
_ORIGIN_CHARS = 1 << 16
#: A storage's shape has at most this many dimensions.
_MAX_DIMS = 64
_LISTS = ("ops", "tensors", "aliases", "control_edges")


class GraphReader:
    """Turns a graph file's records into ops, storages, aliases and edges, checking each.

    Parameters
    ----------
    limits : FileLimits
        The size limits (ops, storages, bytes, id length).
    """

    def __init__(self, limits: FileLimits) -> None:
        self.limits = limits
        self.ops: list[Op] = []
        self.tensors: list[Tensor] = []
        self.aliases: list[Alias] = []
        self.edges: list[ControlEdge] = []
        self.listed_consumers: dict[str, tuple[str, ...]] = {}
        self.total_bytes = 0
        self._tensor_ids: set[str] = set()

    def handlers(self) -> dict[str, Callable[[Any, int], None]]:
        """The callback of each streamed array."""
        return {"ops": self.op, "tensors": self.tensor, "aliases": self.alias,
                "control_edges": self.edge}

    # ------------------------------------------------------------------ fields
    def _id(self, d: Any, key: str, where: str) -> str:
        if not isinstance(d, Mapping):
            raise GraphError(f"{where} must be an object, not {short(d)}")
        v = d.get(key)
        if type(v) is str and v.isascii() and 0 < len(v) <= self.limits.max_id_chars:
            return sys.intern(v)  # the common case, checked at once
        if v is None:
            raise GraphError(f"{where}: field {key!r} is missing")
        return sys.intern(check_str(v, f"{where}: field {key!r}", GraphError,
                                    max_chars=self.limits.max_id_chars))

    def _opt_id(self, d: Mapping[str, Any], key: str, where: str) -> str | None:
        v = d.get(key)
        if v is None:
            return None
        return sys.intern(check_str(v, f"{where}: field {key!r}", GraphError,
                                    max_chars=self.limits.max_id_chars))

    def _ids(self, d: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
        v = d.get(key, [])
        if not isinstance(v, list):
            raise GraphError(f"{where}: field {key!r} must be a list of strings, not "
                             f"{short(v)}")
        n = self.limits.max_id_chars
        try:  # the common case, checked at once (a non-string has no isascii)
            if all(x.isascii() and 0 < len(x) <= n for x in v) and \
                    all(type(x) is str for x in v):
                return tuple(map(sys.intern, v))
        except AttributeError:
            pass
        return tuple(sys.intern(check_str(x, f"{where}: field {key!r} entry #{i}", GraphError,
                                          max_chars=n)) for i, x in enumerate(v))

    @staticmethod
    def _enum(cls: Any, d: Mapping[str, Any], key: str, where: str) -> Any:
        v = d.get(key)
        if isinstance(v, str):
            try:
                return cls(v)
            except ValueError:
                pass
        allowed = ", ".join(m.value for m in cls)
        raise GraphError(f"{where}: field {key!r} is {short(v)}, not one of {allowed}")

    @staticmethod
    def _flag(d: Mapping[str, Any], key: str, where: str, default: bool | None) -> bool | None:
        v = d.get(key, default)
        if v is None and default is None:
            return None
        if not isinstance(v, bool):
            raise GraphError(f"{where}: field {key!r} must be true or false, not {short(v)}")
        return v

    # ------------------------------------------------------------------ records
    def op(self, d: Any, i: int) -> None:
        """Check and keep op record ``#i``."""
        if i >= self.limits.max_ops:
            raise GraphError(f"graph has more than {self.limits.max_ops:,} ops (the limit; "
                             f"raise it with {FileLimits.env_name('max_ops')})")
        oid = self._id(d, "id", f"op #{i}")
        where = f"op {short(oid)}"
        costs: list[int | None] = []
        for key in ("flops", "bytes_read", "bytes_written"):
            v = d.get(key)
            costs.append(None if v is None else check_int(v, f"{where}: field {key!r}",
                                                          GraphError))
        module = d.get("module", "")
        module = "" if module is None else sys.intern(check_str(
            module, f"{where}: field 'module'", GraphError,
            max_chars=self.limits.max_id_chars, empty=True))
        source = d.get("source", "")
        source = "" if source is None else check_str(
            source, f"{where}: field 'source'", GraphError,
            max_chars=self.limits.max_id_chars, empty=True)
        self.ops.append(Op(
            OpId(oid), self._id(d, "target", where), self._enum(Phase, d, "phase", where),
            self._ids(d, "inputs", where), self._ids(d, "outputs", where),
            tuple(TensorId(s) for s in self._ids(d, "mutates", where)),
            bool(self._flag(d, "random", where, False)), module,
            flops=costs[0], bytes_read=costs[1], bytes_written=costs[2],
            recomputable=self._flag(d, "recomputable", where, None), source=source))

    def tensor(self, d: Any, i: int) -> None:
        """Check and keep storage record ``#i``."""
        lim = self.limits
        if i >= lim.max_storages:
            raise GraphError(f"graph has more than {lim.max_storages:,} storages (the limit; "
                             f"raise it with {FileLimits.env_name('max_storages')})")
        tid = self._id(d, "id", f"tensor #{i}")
        where = f"tensor {short(tid)}"
        if tid in self._tensor_ids:
            raise GraphError(f"duplicate tensor id {short(tid)}")
        self._tensor_ids.add(tid)
        if "size_bytes" not in d:
            raise GraphError(f"{where}: field 'size_bytes' is missing")
        size = check_int(d["size_bytes"], f"{where}: field 'size_bytes'", GraphError)
        if size > lim.max_storage_bytes:
            raise GraphError(f"{where}: size_bytes {size:,} is over the limit of "
                             f"{lim.max_storage_bytes:,} bytes per storage (raise it with "
                             f"{FileLimits.env_name('max_storage_bytes')})")
        self.total_bytes += size
        if self.total_bytes > lim.max_total_bytes:
            raise GraphError(f"graph storages add up to more than {lim.max_total_bytes:,} "
                             f"bytes (the limit; raise it with "
                             f"{FileLimits.env_name('max_total_bytes')})")
        shape = d.get("shape", [])
        if not isinstance(shape, list) or len(shape) > _MAX_DIMS:
            raise GraphError(f"{where}: field 'shape' must be a list of at most {_MAX_DIMS} "
                             f"integers, not {short(shape)}")
        dims = tuple(check_int(x, f"{where}: field 'shape' entry #{k}", GraphError)
                     for k, x in enumerate(shape))
        dtype = sys.intern(check_str(d.get("dtype", "float32"), f"{where}: field 'dtype'",
                                     GraphError, max_chars=64))
        if "consumers" in d:
            self.listed_consumers[tid] = self._ids(d, "consumers", where)
        self.tensors.append(Tensor(
            TensorId(tid), size, dtype, dims, self._enum(TensorKind, d, "kind", where),
            self._opt_op(d, "producer", where), name=self._opt_id(d, "name", where)))

    def alias(self, d: Any, i: int) -> None:
        """Check and keep alias record ``#i``."""
        where = f"alias #{i}"
        self.aliases.append(Alias(self._id(d, "id", where),
                                  TensorId(self._id(d, "storage", where)),
                                  self._opt_op(d, "producer", where)))

    def _opt_op(self, d: Mapping[str, Any], key: str, where: str) -> OpId | None:
        v = self._opt_id(d, key, where)
        return None if v is None else OpId(v)

    def edge(self, d: Any, i: int) -> None:
        """Check and keep control-edge record ``#i``."""
        where = f"control edge #{i}"
        self.edges.append(ControlEdge(OpId(self._id(d, "src", where)),
                                      OpId(self._id(d, "dst", where)),
                                      self._enum(EdgeReason, d, "reason", where)))

    # ------------------------------------------------------------------ the graph
    def finish(self, top: Mapping[str, Any]) -> Graph:
        """Check the top-level fields (``top``: the members not streamed, ``STREAMED`` for
        the arrays that were) and build the graph."""
        fmt = top.get("format", GRAPH_FORMAT)
        if fmt != GRAPH_FORMAT:
            raise GraphError(f"not a roam graph file (format {short(fmt)})")
        version = top.get("schema_version")
        if isinstance(version, bool) or version not in READABLE_SCHEMA_VERSIONS:
            raise GraphError(
                f"unsupported graph schema_version {short(version)} (this roam reads "
                f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))})")
        for key in _LISTS:
            v = top.get(key, STREAMED if key in ("aliases", "control_edges") else None)
            if v is None and key not in top:
                raise GraphError(f"graph file has no {key!r} list")
            if v is not STREAMED and v != []:
                raise GraphError(f"graph {key!r} must be a list, not {short(v)}")
        outputs = top.get("outputs", [])
        if not isinstance(outputs, list):
            raise GraphError(f"graph 'outputs' must be a list of storage ids, not "
                             f"{short(outputs)}")
        outs = tuple(TensorId(sys.intern(check_str(
            x, f"graph 'outputs' entry #{i}", GraphError, max_chars=self.limits.max_id_chars)))
            for i, x in enumerate(outputs))
        name = check_str(top.get("name", "graph"), "graph 'name'", GraphError,
                         max_chars=self.limits.max_id_chars, empty=True)
        g = Graph.build(self.ops, self.tensors, self.aliases, self.edges, outs,
                        name=name, origin=_origin(top.get("origin", {"source": "custom"})))
        for tid, listed in self.listed_consumers.items():
            if listed != g.tensors[TensorId(tid)].consumers:
                raise GraphError(f"tensor {short(tid)}: listed consumers disagree with the ops")
        return g


def _origin(origin: Any) -> dict[str, Any]:
    """The ``origin`` member: a small JSON object with string keys."""
    if not isinstance(origin, dict):
        raise GraphError(f"graph 'origin' must be an object, not {short(origin)}")
    if not json_depth_ok(origin, _ORIGIN_DEPTH):
        raise GraphError(f"graph 'origin' nests deeper than {_ORIGIN_DEPTH} levels")
    try:
        text = json.dumps(origin, ensure_ascii=False)
        text.encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        raise GraphError("graph 'origin' is not valid JSON text") from None
    if len(text) > _ORIGIN_CHARS:
        raise GraphError(f"graph 'origin' takes {len(text):,} characters of JSON (the limit "
                         f"is {_ORIGIN_CHARS:,})")
    return origin
