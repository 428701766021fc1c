"""Plans on disk, by what they were made for: :class:`PlanCache`.

A plan is valid for exactly one graph: the graph's fingerprint covers the model's structure,
the batch shapes and dtypes, the loss, the optimizer and its hyper-parameters as traced, the
precision (autocast casts are ops of the graph), clipping and accumulation.  The cache key
adds what made the plan (the planner's method and settings, ``planner_key``) and the roam
version, so that a newer roam plans again::

    <directory>/<graph name>-<sha256 of {graph fingerprint, planner, roam, schema}>.plan.json

Files are the JSON of :mod:`roam_core.formats.plan_io` (no pickle: a cache file is data, never
code), written atomically (a temporary file in the same directory, then ``os.replace``), so
a reader never sees half a plan and two processes writing the same key leave one whole file.
A file that does not parse, was made for another graph or fails the independent validator
(:func:`roam_core.oracle.validate.check_plan`) is ignored (logged) and planned again.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import re
import tempfile
from pathlib import Path

from roam_core.base.errors import PlanFormatError
from roam_core.formats.plan_io import PLAN_SCHEMA_VERSION, dumps_plan, load_plan
from roam_core.model.graph import Graph
from roam_core.model.plan import Plan
from roam_core.oracle.validate import check_plan

__all__ = ["CACHE_ENV", "PlanCache", "default_cache_dir"]

_logger = logging.getLogger(__name__)

#: Environment variable naming the plan cache directory.
CACHE_ENV = "ROAM_PLAN_CACHE"


def default_cache_dir() -> Path:
    """``$ROAM_PLAN_CACHE``, else ``$XDG_CACHE_HOME/roam/plans``, else ``~/.cache/roam/plans``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "roam" / "plans"


def _roam_version() -> str:
    """The installed roam's version (``"unknown"`` in a checkout that is not installed)."""
    try:
        return importlib.metadata.version("roam")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class PlanCache:
    """A directory of plan files keyed by graph fingerprint, planner and roam version.

    Parameters
    ----------
    directory : str or path-like
        Created on the first write.

    Examples
    --------
    >>> import tempfile
    >>> from roam_core.model.samples import chain3
    >>> from roam_core.model.plan import Plan
    >>> g = chain3()
    >>> cache = PlanCache(tempfile.mkdtemp())
    >>> cache.load(g, "eager") is None
    True
    >>> plan = Plan(g.fingerprint(), g.name, "eager", g.op_ids, {"a": 0, "b": 512, "c": 0},
    ...             512, 1024, 1024, 0, 1024, 1024)
    >>> cache.save(g, "eager", plan).name.endswith(".plan.json")
    True
    >>> cache.load(g, "eager") == plan
    True
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def key(self, graph: Graph, planner_key: str) -> str:
        """The cache key of ``graph`` planned by ``planner_key``."""
        text = json.dumps({"graph": graph.fingerprint(), "planner": planner_key,
                           "roam": _roam_version(), "schema": PLAN_SCHEMA_VERSION},
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def path(self, graph: Graph, planner_key: str) -> Path:
        """Where the plan of ``graph`` by ``planner_key`` is kept."""
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", graph.name or "graph")[:60]
        return self.directory / f"{name}-{self.key(graph, planner_key)}.plan.json"

    def load(self, graph: Graph, planner_key: str) -> Plan | None:
        """The cached plan, validated against ``graph``; ``None`` if absent or unusable."""
        path = self.path(graph, planner_key)
        if not path.exists():
            return None
        try:
            plan = load_plan(path, graph)
        except PlanFormatError as e:
            _logger.warning("ignoring plan cache file %s: %s", path, e)
            return None
        bad = check_plan(graph, plan)
        if bad:
            _logger.warning("ignoring plan cache file %s: %d violations (%s)", path, len(bad),
                            bad[0])
            return None
        return plan

    def save(self, graph: Graph, planner_key: str, plan: Plan) -> Path:
        """Write ``plan`` atomically; returns its path."""
        if plan.graph_fingerprint != graph.fingerprint():
            raise PlanFormatError(f"the plan was made for graph {plan.graph_fingerprint[:12]}, "
                                  f"not {graph.fingerprint()[:12]}: not cached")
        path = self.path(graph, planner_key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(dumps_plan(plan))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return path
