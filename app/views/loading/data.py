"""Graphs into the cache: the samples, an uploaded file, a zoo model traced server-side."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from app.core import state
from app.core.paths import SAMPLE_DIR
from roam_core.base import catalog
from roam_core.base.errors import GraphError
from roam_core.formats.graph_io import load_graph, loads_graph
from roam_core.model.samples import SAMPLES

__all__ = ["ZOO_NAMES", "graph_from_upload", "load_choice", "sample_options", "trace_zoo_graph",
           "zoo_models"]


def sample_options(sample_dir: Path = SAMPLE_DIR) -> list[dict[str, str]]:
    """Dropdown options: committed sample graph files, then the hand-built samples."""
    files = sorted(sample_dir.glob("*.json.gz")) + sorted(sample_dir.glob("*.json"))
    opts = [{"label": f"{p.name.split('.')[0]} (sample_graphs)", "value": f"file:{p.name}"}
            for p in files]
    opts += [{"label": f"{n} (hand-built)", "value": f"hand:{n}"} for n in SAMPLES]
    return opts


def load_choice(value: str, sample_dir: Path = SAMPLE_DIR) -> str:
    """Load a dropdown choice into the cache; returns the graph key."""
    kind, _, name = value.partition(":")
    if kind == "hand" and name in SAMPLES:
        return state.put_graph(SAMPLES[name]())
    path = (sample_dir / name).resolve()
    if kind != "file" or path.parent != sample_dir.resolve() or not path.is_file():
        raise GraphError(f"unknown sample {value!r}")
    return state.put_graph(load_graph(path))


def graph_from_upload(raw: bytes, filename: str | None) -> str:
    """Parse an uploaded graph file's bytes (JSON or gzip JSON), store it, return its key.

    Raises
    ------
    GraphError
        With the parser's message, prefixed by the file name.
    """
    try:
        graph = loads_graph(raw)
    except GraphError as e:
        raise GraphError(f"{filename or 'upload'}: {e}") from e
    return state.put_graph(graph)


def trace_zoo_graph(model: str, batch_size: int, seq_len: int | None, optimizer: str | None,
                    setting: str) -> str:
    """Trace a zoo model (torch imported here, in the job process); returns the graph key."""
    from roam_core.zoo import trace_zoo  # torch: never in the web server's process

    traced = trace_zoo(model, int(batch_size), seq_len or None, setting, optimizer or None)
    return state.put_graph(traced.graph)


#: Zoo names offered by the app (teaching models first; torch-free, so that the web server
#: never imports torch).
ZOO_NAMES = catalog.ZOO_NAMES


def zoo_models() -> list[str]:
    """Zoo model names (empty when torch is not installed)."""
    return list(ZOO_NAMES) if importlib.util.find_spec("torch") is not None else []
