"""The server-side cache: graphs by content hash, a thread's private cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core import state
from roam_core.base.errors import GraphError
from roam_core.model.samples import chain3, diamond


def test_graph_cache_round_trip(cache_dir: Path) -> None:
    key = state.put_graph(diamond())
    assert key == state.put_graph(diamond()) == state.graph_key_of(diamond())
    assert state.get_graph(key).fingerprint() == diamond().fingerprint()
    with pytest.raises(GraphError, match="no longer in the cache"):
        state.get_graph("g-missing")


def test_private_cache_is_this_threads_only(cache_dir: Path, tmp_path: Path) -> None:
    """A report's private cache never moves another thread (a serving app's requests) off
    the shared cache, and the private one is closed afterwards."""
    import threading

    shared = state.put_graph(chain3())
    seen: list[Path] = []
    inside, leave = threading.Event(), threading.Event()

    def report_thread() -> None:
        with state.private_cache(tmp_path / "private") as d:
            assert state.cache_dir() == d
            state.put_graph(diamond())
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=report_thread)
    t.start()
    assert inside.wait(10)
    seen.append(state.cache_dir())  # this thread, while the other is inside
    assert state.get_json("absent", "default") == "default"
    assert shared in state.cache()
    assert state.graph_key_of(diamond()) not in state.cache()
    leave.set()
    t.join(10)
    assert seen == [cache_dir]
    assert state.cache_dir() == cache_dir
