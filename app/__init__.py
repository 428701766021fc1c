"""The roam Dash app: load a graph, plan it in a background job, explore the plan.

``create_app()`` builds the app; ``roam serve`` and ``python -m app`` run it.  Graphs and
plans live server-side in a disk cache keyed by content hash (``app.state``); the browser
holds only keys.  Background jobs (planning, zoo tracing) use Dash's ``DiskcacheManager``
(one process per job, cancel kills it), forked from a clean fork server (``app.jobs``).
With ``REDIS_URL`` set they go to Celery instead:

    pip install -e ".[celery]"
    REDIS_URL=redis://localhost:6379/0 roam serve            # the web server
    REDIS_URL=redis://localhost:6379/0 celery -A app.worker worker   # the job workers

Every process must see the same cache directory (``--cache-dir`` / ``ROAM_CACHE_DIR``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_SAMPLE", "create_app", "data_dir"]

_logger = logging.getLogger(__name__)


def data_dir(name: str) -> Path:
    """The app's data folder ``name`` (``assets``, ``sample_graphs``): inside the installed
    package (a wheel carries copies under ``app/``), else the source checkout's top level."""
    here = Path(__file__).resolve().parent
    packaged = here / name
    return packaged if packaged.is_dir() else here.parent / name


ASSETS = data_dir("assets")
#: Preferred start-up graphs (prefixes of dropdown values), first available wins.
DEFAULT_SAMPLE = ("file:alexnet-b1-roam", "file:tiny_gpt-", "file:mlp-", "hand:tiny_train_step")
#: The start-up plan uses these settings (and the UI starts with them, so it hits the cache).
STARTUP_TIME_LIMIT_S = 5.0


def _manager(cache_dir: Path, job_hooks: Sequence[str] = ()) -> Any:
    from dash import CeleryManager

    url = os.environ.get("REDIS_URL")
    if url:
        from celery import Celery  # lazily: only a Celery deployment needs it

        celery_app = Celery(__name__, broker=url, backend=url)
        return CeleryManager(celery_app), celery_app
    import diskcache

    from app.jobs import CleanJobManager

    manager = CleanJobManager(diskcache.Cache(str(cache_dir / "jobs")), hooks=job_hooks)
    manager.start()
    return manager, None


def create_app(
    graph_path: str | os.PathLike[str] | None = None, *, cache_dir: str | None = None,
    max_upload_mb: float = 200, plan_on_start: bool = True,
    startup_time_limit_s: float = STARTUP_TIME_LIMIT_S, startup_method: str = "roam",
    job_hooks: Sequence[str] = (),
) -> Any:
    """Build the Dash app, opened on ``graph_path`` (or a sample), already planned.

    Parameters
    ----------
    graph_path : path, optional
        A graph file (JSON or gzip JSON) to open; a sample when omitted.
    cache_dir : str, optional
        Disk cache for graphs, plans and jobs (default ``$ROAM_CACHE_DIR`` or
        ``<tmp>/roam-cache``).
    max_upload_mb : float
        Largest accepted upload.
    plan_on_start : bool
        Plan the opening graph in-process before serving (cached by content hash).
    startup_time_limit_s : float
        Planner time limit of that start-up plan (also the UI's default).
    startup_method : str
        Planner method of that plan (``"roam"`` or a baseline such as ``"lescea"``).
    job_hooks : sequence of str
        Modules each background job imports before it runs (tests install doubles so).

    Returns
    -------
    dash.Dash
    """
    from dash import Dash

    from app import callbacks, layout, services, state
    from app.planning import PlanSettings
    from roam_core.formats.graph_io import load_graph

    cdir = state.configure(cache_dir)
    settings = PlanSettings(method=startup_method, time_limit_s=startup_time_limit_s)
    options = services.sample_options()
    values = [o["value"] for o in options]
    if graph_path is not None:
        graph_key, pick = state.put_graph(load_graph(graph_path)), None
    else:
        pick = next((v for p in DEFAULT_SAMPLE for v in values if v.startswith(p)), values[0])
        graph_key = services.load_choice(pick)
    plan_key = services.plan_graph(graph_key, settings) if plan_on_start else None
    services.warm(graph_key, plan_key)  # the first page load finds its views computed
    manager, celery_app = _manager(cdir, job_hooks)
    app = Dash(__name__, assets_folder=str(ASSETS), title="roam",
               background_callback_manager=manager, suppress_callback_exceptions=True)
    max_bytes = int(max_upload_mb * 2**20)
    # the upload cap is checked server-side (a visible, specific error); the request limit
    # leaves room for base64 so files up to ~1.5x the cap still get that message
    app.server.config["MAX_CONTENT_LENGTH"] = 2 * max_bytes + 2**20
    name = state.get_graph(graph_key).name
    defaults = {"settings": settings, "sample_options": options, "sample_value": pick,
                "graph_key": {"key": graph_key, "name": name}, "plan_key": plan_key,
                "max_upload_bytes": max_bytes, "zoo_models": services.zoo_models(),
                "load_message": f"opened {name}" + (" (planned)" if plan_key else "")}
    app.layout = lambda: layout.build_layout(defaults)
    callbacks.register(app, callbacks.AppConfig(max_upload_bytes=max_bytes))
    app.roam_celery = celery_app  # type: ignore[attr-defined]
    return app
