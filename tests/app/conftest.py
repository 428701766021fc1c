"""Fixtures for the app tests: a cache directory, a served app, a headless chromium.

Browser tests drive Debian's ``/usr/bin/chromium`` through Playwright (no browser download);
they are skipped, with the reason, when it or Playwright is missing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture
def cache_dir(tmp_path: Path) -> Iterator[Path]:
    """A private app cache for one test (restores the environment afterwards)."""
    from app.core import memo, state

    old = os.environ.get("ROAM_CACHE_DIR")
    d = state.configure(tmp_path / "cache")
    memo.clear_caches()
    yield d
    os.environ.pop("ROAM_CACHE_DIR", None)
    if old is not None:
        state.configure(old)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless chromium for the whole session."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium "
                    "(see docs/design/ui_notes.md)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def app_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The app served on a free port for the whole session: ``(url, cache_dir)``."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium "
                    "(see docs/design/ui_notes.md)")
    from werkzeug.serving import WSGIRequestHandler, make_server

    from app import create_app
    from tests.app.job_doubles import HOOK

    class Quiet(WSGIRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    cdir = str(tmp_path_factory.mktemp("appcache"))
    app = create_app(cache_dir=cdir, startup_time_limit_s=2.0, job_hooks=(HOOK,))
    srv = make_server("127.0.0.1", 0, app.server, threaded=True, request_handler=Quiet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_port}", cdir
    srv.shutdown()


@pytest.fixture
def app_url(app_server: tuple[str, str]) -> str:
    """URL of the shared app, its cache re-selected (unit tests may have switched it)."""
    from app.core import state

    state.configure(app_server[1])
    return app_server[0]


@pytest.fixture
def planned(cache_dir: Path) -> dict[str, Any]:
    """A stand-in plan with a task tree, stored: ``graph`` (the store's value), ``plan``
    (its key) and ``text`` (its JSON)."""
    from app.core import state
    from roam_core.formats import plan_io
    from tests.app.helpers import planned_with_tree

    graph, plan = planned_with_tree()
    return {"graph": {"key": state.put_graph(graph), "name": graph.name},
            "plan": state.put_plan(plan), "text": plan_io.dumps_plan(plan)}
