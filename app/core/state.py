"""Server-side state: graphs and plans in a disk cache keyed by content hash and owner.

``dcc.Store`` components hold only the keys made here.  The cache directory is shared by
the server and the background-job processes (they find it through ``ROAM_CACHE_DIR``), so
a plan written by a job is visible to every request of its session.  Parsed objects are
memoised per process, bounded in bytes (:data:`GRAPH_MEMO_BYTES`, :data:`PLAN_MEMO_BYTES`),
because parsing a GPT-2-XL graph takes a while.

Sessions (:mod:`app.core.sessions`): a graph or plan stored in a browser session gets a key
made of its content *and* that session's id, and an owner record; every read checks that
the asking session is its owner (or that it is public: stored outside any session, as the
start-up graph and plan are).  Another session's key is refused as if it were missing,
memo hits included (:func:`app.core.memo.set_key_guard`).  Small JSON records
(:func:`put_json`) are filed under the session's name.

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

from app.core.memo import clear_caches, memoised, set_key_guard
from app.core.sessions import PUBLIC, current_owner
from roam_core.base.errors import GraphError, PlanFormatError, RoamError
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
    "public_plan_key",
    "put_graph",
    "put_json",
    "put_plan",
    "require_visible",
    "visible",
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
#: ``(owner, key) -> visible``, per process: a key's owner never changes once recorded.
_SEEN: dict[tuple[str, str], bool] = {}
#: Entries are evicted least-recently-used beyond this size.
CACHE_SIZE_LIMIT_BYTES = 8 * 1024**3


def _env_mib(name: str, default_mib: int) -> int:
    text = os.environ.get(name, "").strip()
    try:
        return int(float(text) * 2**20) if text else default_mib * 2**20
    except ValueError:
        return default_mib * 2**20


#: Parsed graphs kept per process, estimated bytes (``ROAM_APP_GRAPH_MEMO_MIB``, default
#: 1024): a graph takes about 1 KB per op, storage and alias once parsed.
GRAPH_MEMO_BYTES = _env_mib("ROAM_APP_GRAPH_MEMO_MIB", 1024)
#: Parsed plans kept per process (``ROAM_APP_PLAN_MEMO_MIB``, default 256).
PLAN_MEMO_BYTES = _env_mib("ROAM_APP_PLAN_MEMO_MIB", 256)
#: Each memo of what the views derive from a graph and plan (expanded graphs, curve and
#: layout arrays) keeps at most this much (``ROAM_APP_VIEW_MEMO_MIB``, default 512).
VIEW_MEMO_BYTES = _env_mib("ROAM_APP_VIEW_MEMO_MIB", 512)


def configure(directory: str | os.PathLike[str] | None = None) -> Path:
    """Choose the cache directory (default: ``$ROAM_CACHE_DIR`` or ``<tmp>/roam-cache``)."""
    d = Path(directory or os.environ.get(_ENV) or Path(tempfile.gettempdir()) / "roam-cache")
    d.mkdir(parents=True, exist_ok=True)
    os.environ[_ENV] = str(d)
    with _OPEN_LOCK:
        _OPEN.clear()
    clear_caches()  # memos are keyed by cache key: another directory, other data
    _SEEN.clear()
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


def _owned_sha(data: bytes, owner: str) -> str:
    """The content hash, salted with the owner's session id (public: the plain hash)."""
    return _sha(data) if owner == PUBLIC else _sha(owner.encode() + b"|" + data)


def graph_bytes(graph: Graph) -> int:
    """Estimated memory of a parsed graph (its weight in the memo)."""
    return 1024 * (len(graph.ops) + len(graph.tensors) + len(graph.aliases)) + 4096


def plan_bytes(plan: Plan) -> int:
    """Estimated memory of a parsed plan (its weight in the memo)."""
    return 256 * (len(plan.order) + len(plan.offsets) + len(plan.live_bytes)) + 4096


# ------------------------------------------------------------------ sessions


def visible(key: str) -> bool:
    """True when the session running this code may read ``key`` (its owner, or public).

    Outside any session (start-up, tools, tests) everything is visible.
    """
    owner = current_owner()
    if owner == PUBLIC:
        return True
    hit = _SEEN.get((owner, key))
    if hit is not None:
        return hit
    rec = cache().get(("own", key))
    ok = rec == PUBLIC or rec == owner
    if rec is not None:  # a missing record may still appear (a job storing it)
        if len(_SEEN) > 65536:
            _SEEN.clear()
        _SEEN[(owner, key)] = ok
    return ok


def require_visible(key: str) -> None:
    """Raise unless this session may read ``key`` (a graph or plan key): the same error as
    for a key that is gone, so another session's keys are not even confirmed to exist."""
    if not visible(key):
        if key.startswith("p-"):
            raise PlanFormatError(f"plan {key} is no longer in the cache; plan again")
        raise GraphError(f"graph {key} is no longer in the cache; load it again")


def _record_owner(key: str, owner: str) -> None:
    c = cache()
    if c.get(("own", key)) is None:
        c.set(("own", key), owner)


def graph_key_of(graph: Graph) -> str:
    """Key of a graph stored by this session (its JSON, name included, and the owner)."""
    return "g-" + _owned_sha(dumps_graph(graph), current_owner())


def put_graph(graph: Graph) -> str:
    """Store a graph for this session; returns its key (idempotent).

    Raises
    ------
    GraphError
        A graph without ops: the views draw a step's ops, and there are none.
    """
    if not graph.ops:
        raise GraphError(f"graph {graph.name!r} has no ops: there is no step to show")
    raw = dumps_graph(graph)
    owner = current_owner()
    key = "g-" + _owned_sha(raw, owner)
    c = cache()
    if key not in c:
        c.set(key, gzip.compress(raw, compresslevel=3, mtime=0))
    _record_owner(key, owner)
    return key


def get_graph(key: str) -> Graph:
    """The graph stored under ``key``.

    Raises
    ------
    GraphError
        If the key is not in the cache (evicted, another cache directory) or belongs to
        another browser session.
    """
    require_visible(key)
    return _get_graph(key)


@memoised(8, max_bytes=GRAPH_MEMO_BYTES, weigh=graph_bytes)
def _get_graph(key: str) -> Graph:
    data = cache().get(key)
    if data is None:
        raise GraphError(f"graph {key} is no longer in the cache; load it again")
    return loads_graph(data)


def plan_key(graph_key: str, settings: Mapping[str, object]) -> str:
    """Cache key of a plan: graph key, planner settings and (in a session) its owner."""
    owner = current_owner()
    parts: list[object] = [graph_key, settings]
    if owner != PUBLIC:
        parts.append(owner)
    blob = json.dumps(parts, sort_keys=True).encode()
    return "p-" + _sha(blob)


def public_plan_key(graph_key: str, settings: Mapping[str, object]) -> str:
    """The key :func:`plan_key` gives outside any session (the start-up plan's)."""
    return "p-" + _sha(json.dumps([graph_key, settings], sort_keys=True).encode())


def put_plan(plan: Plan, key: str | None = None) -> str:
    """Store a plan (JSON via ``plan_io``) for this session; returns its key (a content
    hash by default)."""
    text = dumps_plan(plan)
    owner = current_owner()
    key = key or "p-" + _owned_sha(text.encode(), owner)
    cache().set(key, gzip.compress(text.encode(), compresslevel=3, mtime=0))
    _record_owner(key, owner)
    _get_plan.cache_clear()
    return key


def has_plan(key: str) -> bool:
    """True when a plan is stored under ``key`` and this session may read it."""
    return key in cache() and visible(key)


def get_plan(key: str) -> Plan:
    """The plan stored under ``key`` (raises ``PlanFormatError`` if it is gone or belongs
    to another browser session)."""
    require_visible(key)
    return _get_plan(key)


@memoised(16, max_bytes=PLAN_MEMO_BYTES, weigh=plan_bytes)
def _get_plan(key: str) -> Plan:
    data = cache().get(key)
    if data is None:
        raise PlanFormatError(f"plan {key} is no longer in the cache; plan again")
    return loads_plan(gzip.decompress(data).decode())


def _json_key(key: str, owner: str) -> str:
    return key if owner == PUBLIC else f"{key}@{owner}"


def put_json(key: str, value: object) -> None:
    """Store a small JSON-able value, filed under this session's name."""
    cache().set(_json_key(key, current_owner()), json.dumps(value))


def get_json(key: str, default: Any = None) -> Any:
    """A value stored with :func:`put_json` by this session (else a public one; ``default``
    when absent).

    ``Any``: it is whatever JSON the caller stored under ``key``, read back as such.
    """
    owner = current_owner()
    c = cache()
    raw = c.get(_json_key(key, owner))
    if raw is None and owner != PUBLIC:
        raw = c.get(key)
    return default if raw is None else json.loads(raw)


def _guard_key(key: str) -> None:
    """The memo guard: a derived view of a key is visible only where the key is."""
    try:
        require_visible(key)
    except RoamError:
        raise
    except Exception:  # a cache that cannot be read: the memo's own call will say so
        pass


set_key_guard(_guard_key)
