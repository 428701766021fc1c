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
An op may also carry ``source`` (``"path:line in function"``, the user-code line that made
it; written only when known, at most the id length limit, no absolute paths): an optional key
of version 2, not in the fingerprint; a reader that ignores it loses nothing else.

Storage ``consumers`` are derived from the ops; a file may list them, and then they must
agree.  Every problem raises :class:`~roam_core.base.errors.GraphError` naming the offending id.
Nothing is ever unpickled.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Mapping
from typing import Any

from roam_core.base.atomic import atomic_write
from roam_core.base.checks import require_type
from roam_core.base.collector import gc_paused
from roam_core.base.errors import GraphError
from roam_core.base.safe_gzip import gunzip_bounded, is_gzip
from roam_core.base.user_files import read_user_bytes
from roam_core.formats.graph_fields import (
    GRAPH_FORMAT,
    GRAPH_SCHEMA_VERSION,
    STREAMED,
    GraphReader,
)
from roam_core.formats.json_scan import decode_text, scan_object
from roam_core.formats.limits import FileLimits
from roam_core.model.graph import Graph, Op

__all__ = [
    "GRAPH_SCHEMA_VERSION",
    "dumps_graph",
    "graph_from_dict",
    "graph_to_dict",
    "load_graph",
    "loads_graph",
    "save_graph",
]



def graph_to_dict(graph: Graph) -> dict[str, Any]:
    """Plain-JSON dict of a graph (the inverse of :func:`graph_from_dict`)."""
    return {
        "format": GRAPH_FORMAT,
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
                **({"source": o.source} if o.source else {}),
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
    require_type(graph, Graph, "dumps_graph: graph", GraphError)
    raw = json.dumps(graph_to_dict(graph), separators=(",", ":")).encode()
    return gzip.compress(raw, compresslevel=6, mtime=0) if compress else raw


def save_graph(graph: Graph, path: str | os.PathLike[str]) -> None:
    """Write a graph file atomically; a name ending in ``.gz`` is gzip-compressed.

    Raises
    ------
    OutputError
        The file cannot be written (the previous file, if any, is kept).

    Examples
    --------
    >>> import tempfile, os
    >>> from roam_core.model.samples import diamond
    >>> p = os.path.join(tempfile.mkdtemp(), "g.json.gz")
    >>> save_graph(diamond(), p)
    >>> load_graph(p).fingerprint() == diamond().fingerprint()
    True
    """
    if not isinstance(graph, Graph):
        raise GraphError(f"save_graph needs a Graph, not {type(graph).__name__}")
    data = dumps_graph(graph, compress=os.fspath(path).endswith(".gz"))
    atomic_write(path, data, what="graph file")


def load_graph(path: str | os.PathLike[str], *, limits: FileLimits | None = None) -> Graph:
    """Read a graph file (JSON or gzip JSON).

    Parameters
    ----------
    path : path-like
        A regular file (a device, FIFO or directory is refused).
    limits : FileLimits, optional
        Size limits (default: :meth:`FileLimits.from_env`).

    Raises
    ------
    GraphError
        If the file cannot be read, is over a limit or is not a valid graph; the message
        names the field and the id.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise GraphError(f"load_graph needs a path, not {type(path).__name__}")
    lim = limits if limits is not None else FileLimits.from_env()
    box: list[bytes | bytearray | str] = [read_user_bytes(
        path, GraphError, "graph file", max_file_bytes=lim.max_file_bytes,
        max_decompressed_bytes=lim.max_json_bytes)]
    return _graph_from_box(box, lim)


def loads_graph(data: bytes | str, *, limits: FileLimits | None = None) -> Graph:
    """Parse graph JSON (bytes may be gzip-compressed).

    The top-level arrays are read one element at a time
    (:func:`~roam_core.formats.json_scan.scan_object`), each checked and turned into its
    record at once, so loading costs little more than the graph itself.

    Raises
    ------
    GraphError
        Bad JSON, wrong ``schema_version``, missing or mistyped fields, integers out of range,
        ids that are not valid Unicode, duplicate or dangling ids, cycles, or a size limit
        (:class:`~roam_core.formats.limits.FileLimits`) passed.
    """
    if not isinstance(data, (bytes, bytearray, str)):
        raise GraphError(f"loads_graph needs bytes or str, not {type(data).__name__}")
    lim = limits if limits is not None else FileLimits.from_env()
    if not isinstance(data, str) and is_gzip(data):
        data = gunzip_bounded(bytes(data), GraphError, "graph file", lim.max_json_bytes)
    return _graph_from_box([data], lim)


def _graph_from_box(box: list[bytes | bytearray | str], lim: FileLimits) -> Graph:
    """The graph in ``box[0]`` (JSON bytes or text), which is taken out of the box: once
    decoded, the bytes are freed before the graph is built."""
    if len(box[0]) > lim.max_json_bytes:
        raise GraphError(f"graph file has {len(box[0]):,} bytes of JSON, over the limit of "
                         f"{lim.max_json_bytes:,} ({FileLimits.env_name('max_json_bytes')})")
    text = decode_text(box.pop(), GraphError, "graph file")
    reader = GraphReader(lim)
    with gc_paused(promote_survivors=True):  # a large graph file: millions of objects, all kept
        top = scan_object(text, reader.handlers(), GraphError, "graph file")
        del text
        return reader.finish(top)


def graph_from_dict(obj: Any, *, limits: FileLimits | None = None) -> Graph:
    """Build a graph from its JSON dict, validating every field."""
    if not isinstance(obj, Mapping):
        raise GraphError("graph file must hold a JSON object")
    reader = GraphReader(limits if limits is not None else FileLimits.from_env())
    top = dict(obj)
    for key, each in reader.handlers().items():
        if isinstance(top.get(key), list):
            for i, item in enumerate(top[key]):
                each(item, i)
            top[key] = STREAMED
    return reader.finish(top)
