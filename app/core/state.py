"""Server-side state: graphs and plans in a disk cache keyed by content hash.

``dcc.Store`` components hold only the keys made here.  The cache directory is shared by
the server and the background-job processes (they find it through ``ROAM_CACHE_DIR``), so
a plan written by a job is visible to every request.  Parsed objects are memoised per
process (small LRU) because parsing a GPT-2-XL graph takes a while.

:func:`private_cache` points one thread (one context) at another directory, for work such as
an HTML report that must not touch the shared cache; other threads of a serving app keep
theirs.
"""

from __future__ import annotations

import contextlib
import contextvars
import gzip
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import diskcache

from app.core.memo import clear_caches, memoised
from roam_core.base.errors import GraphError, PlanFormatError
from roam_core.formats.graph_io import dumps_graph, loads_graph
from roam_core.formats.plan_io import dumps_plan, loads_plan
from roam_core.model.graph import Graph
from roam_core.model.plan import Plan

__all__ = [
    "cache",
    "cache_dir",
    "configure",
    "get_graph",
    "get_json",
    "get_plan",
    "graph_key_of",
    "has_plan",
    "plan_key",
    "private_cache",
    "put_graph",
    "put_json",
    "put_plan",
]

_logger = logging.getLogger(__name__)
_ENV = "ROAM_CACHE_DIR"


class _Handles:
    """This process's open caches by directory (``pid``: whose handles they are)."""

    def __init__(self) -> None:
        self.pid = -1
        self.caches: dict[str, diskcache.Cache] = {}

    def clear(self) -> None:
        self.pid, self.caches = -1, {}


_OPEN = _Handles()
_OPEN_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked job process gets a free lock and opens its own SQLite connections."""
    global _OPEN_LOCK
    _OPEN_LOCK = threading.Lock()
    _OPEN.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
#: A directory that overrides the configured one in this context only (see private_cache).
_PRIVATE: contextvars.ContextVar[str | None] = contextvars.ContextVar("roam_private_cache",
                                                                     default=None)
#: Entries are evicted least-recently-used beyond this size.
CACHE_SIZE_LIMIT_BYTES = 8 * 1024**3


def configure(directory: str | os.PathLike[str] | None = None) -> Path:
    """Choose the cache directory (default: ``$ROAM_CACHE_DIR`` or ``<tmp>/roam-cache``)."""
    d = Path(directory or os.environ.get(_ENV) or Path(tempfile.gettempdir()) / "roam-cache")
    d.mkdir(parents=True, exist_ok=True)
    os.environ[_ENV] = str(d)
    with _OPEN_LOCK:
        _OPEN.clear()
    clear_caches()  # memos are keyed by cache key: another directory, other data
    return d


def cache_dir() -> Path:
    """The cache directory in use (configured on first use; a :func:`private_cache` wins)."""
    private = _PRIVATE.get()
    if private is not None:
        return Path(private)
    return Path(os.environ[_ENV]) if _ENV in os.environ else configure()


def cache() -> diskcache.Cache:
    """This process's handle on the cache in use (re-opened after a fork)."""
    d = str(cache_dir())
    with _OPEN_LOCK:
        if _OPEN.pid != os.getpid():
            _OPEN.clear()  # a forked child never uses its parent's SQLite connections
            _OPEN.pid = os.getpid()
        caches = _OPEN.caches
        if d not in caches:
            caches[d] = diskcache.Cache(d, size_limit=CACHE_SIZE_LIMIT_BYTES)
        return caches[d]


@contextlib.contextmanager
def private_cache(directory: str | os.PathLike[str]) -> Iterator[Path]:
    """Use ``directory`` as the cache in this context (thread) only, then close it.

    Keys are content hashes, so the per-process memos stay valid across directories and
    are not cleared; other threads, such as a serving app's, keep the shared cache.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    token = _PRIVATE.set(str(d))
    try:
        yield d
    finally:
        _PRIVATE.reset(token)
        with _OPEN_LOCK:
            opened = _OPEN.caches.pop(str(d), None)
        if opened is not None:
            opened.close()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def graph_key_of(graph: Graph) -> str:
    """Content hash of a graph (its JSON, name included)."""
    return "g-" + _sha(dumps_graph(graph))


def put_graph(graph: Graph) -> str:
    """Store a graph; returns its key (idempotent)."""
    raw = dumps_graph(graph)
    key = "g-" + _sha(raw)
    c = cache()
    if key not in c:
        c.set(key, gzip.compress(raw, compresslevel=3, mtime=0))
    return key


@memoised(8)
def get_graph(key: str) -> Graph:
    """The graph stored under ``key``.

    Raises
    ------
    GraphError
        If the key is not in the cache (evicted, or another cache directory).
    """
    data = cache().get(key)
    if data is None:
        raise GraphError(f"graph {key} is no longer in the cache; load it again")
    return loads_graph(data)


def plan_key(graph_key: str, settings: Mapping[str, object]) -> str:
    """Cache key of a plan: graph hash plus the planner settings."""
    blob = json.dumps([graph_key, settings], sort_keys=True).encode()
    return "p-" + _sha(blob)


def put_plan(plan: Plan, key: str | None = None) -> str:
    """Store a plan (JSON via ``plan_io``); returns its key (a content hash by default)."""
    text = dumps_plan(plan)
    key = key or "p-" + _sha(text.encode())
    cache().set(key, gzip.compress(text.encode(), compresslevel=3, mtime=0))
    _get_plan.cache_clear()
    return key


def has_plan(key: str) -> bool:
    """True when a plan is stored under ``key``."""
    return key in cache()


def get_plan(key: str) -> Plan:
    """The plan stored under ``key`` (raises ``PlanFormatError`` if it is gone)."""
    return _get_plan(key)


@memoised(16)
def _get_plan(key: str) -> Plan:
    data = cache().get(key)
    if data is None:
        raise PlanFormatError(f"plan {key} is no longer in the cache; plan again")
    return loads_plan(gzip.decompress(data).decode())


def put_json(key: str, value: object) -> None:
    """Store a small JSON-able value."""
    cache().set(key, json.dumps(value))


def get_json(key: str, default: Any = None) -> Any:
    """A value stored with :func:`put_json` (``default`` when absent).

    ``Any``: it is whatever JSON the caller stored under ``key``, read back as such.
    """
    raw = cache().get(key)
    return default if raw is None else json.loads(raw)
