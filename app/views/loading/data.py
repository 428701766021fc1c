"""Graphs into the cache: the samples, an uploaded file, a zoo model traced server-side."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from app.core import state
from app.core.paths import SAMPLE_DIR
from app.services.uploads import decode_upload
from roam_core.base import catalog
from roam_core.base.errors import GraphError
from roam_core.formats.graph_io import load_graph, loads_graph
from roam_core.model.samples import SAMPLES

__all__ = ["HF_CHOICE", "HF_TASKS", "PRECISIONS", "ZOO_NAMES", "graph_from_upload",
           "hf_config_from_upload", "load_choice", "sample_options", "trace_hf_graph",
           "trace_zoo_graph", "zoo_models"]

#: The model dropdown's entry for a dropped Hugging Face config.
HF_CHOICE = "hf:config"
#: Precisions and HF tasks offered (torch-free copies; a test checks them against roam_core).
PRECISIONS = ("fp32", "bf16-mixed", "bf16", "fp16-mixed")
HF_TASKS = ("causal-lm", "masked-lm", "seq2seq", "speech-seq2seq", "image-classification",
            "sequence-classification", "base")


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
                    setting: str, precision: str = "fp32", attention: str | None = None,
                    merge_casts: bool = False) -> str:
    """Trace a zoo model (torch imported here, in the job process); returns the graph key
    (``merge_casts``: autocast's repeated casts made once, recorded in ``Graph.origin``)."""
    from roam_core.zoo import trace_zoo  # torch: never in the web server's process

    traced = trace_zoo(model, int(batch_size), seq_len or None, setting, optimizer or None,
                       precision=precision, attention=attention or None,
                       merge_casts=merge_casts)
    return state.put_graph(traced.graph)


def trace_hf_graph(config: dict[str, Any], task: str, batch_size: int, seq_len: int | None,
                   optimizer: str | None, setting: str, precision: str = "fp32",
                   attention: str | None = None, merge_casts: bool = False) -> str:
    """Trace a Hugging Face model from a dropped config (no weights, offline); returns the
    graph key (``merge_casts`` as :func:`trace_zoo_graph`)."""
    from roam_core.zoo.hf import trace_hf  # torch and transformers: in the job process only

    traced = trace_hf(config, int(batch_size), seq_len or 128, head=task, setting=setting,
                      optimizer=optimizer or None, precision=precision,
                      attention=attention or "sdpa", merge_casts=merge_casts)
    return state.put_graph(traced.graph)


def hf_config_from_upload(contents: str, filename: str | None, max_bytes: int
                          ) -> dict[str, Any]:
    """A dropped ``config.json`` as a dict (it needs a ``model_type``).

    Raises
    ------
    GraphError
        Not JSON, not an object, or no ``model_type``; the message names the file.
    """
    name = filename or "config.json"
    try:
        config = json.loads(decode_upload(contents, max_bytes))
    except ValueError as e:
        raise GraphError(f"{name} is not a JSON config: {e}") from e
    if not isinstance(config, dict) or not config.get("model_type"):
        raise GraphError(f"{name} is not a Hugging Face config (no 'model_type')")
    return config


#: Zoo names offered by the app (teaching models first; torch-free, so that the web server
#: never imports torch).
ZOO_NAMES = catalog.ZOO_NAMES


def zoo_models() -> list[str]:
    """Zoo model names (empty when torch is not installed)."""
    return list(ZOO_NAMES) if importlib.util.find_spec("torch") is not None else []
