"""``create_app``: the Dash app, opened on a graph (planned at start-up), with its background
job manager.

Graphs and plans live server-side in a disk cache keyed by content hash and browser
session (:mod:`app.core.state`, :mod:`app.core.sessions`); the browser holds only keys, and a
session reads only its own (and the public start-up graph and plan).  Every failed callback
shows its message in the page (:func:`app.views.callback_tools.show_error`), and every
response carries standard security headers (:func:`security_headers`).

Background jobs (planning, zoo tracing, verifying) use Dash's ``DiskcacheManager`` (one
process per job, cancel kills it), forked from a clean fork server (:mod:`app.core.jobs`).
With ``REDIS_URL`` set they go to Celery instead (``celery -A app.worker worker``).

Dash and the views are imported inside :func:`create_app`: ``import app`` stays light.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery import Celery
    from dash import Dash
    from dash.background_callback.managers import BaseBackgroundCallbackManager

__all__ = ["DEFAULT_SAMPLE", "STARTUP_TIME_LIMIT_S", "create_app", "security_headers"]

#: Preferred start-up graphs (prefixes of dropdown values), first available wins.
DEFAULT_SAMPLE = ("file:alexnet-b1-roam", "file:tiny_gpt-", "file:mlp-", "hand:tiny_train_step")
#: The start-up plan uses these settings (and the UI starts with them, so it hits the cache).
STARTUP_TIME_LIMIT_S = 5.0


def _manager(cache_dir: Path, job_hooks: Sequence[str] = ()
             ) -> tuple[BaseBackgroundCallbackManager, Celery | None]:
    """The background job manager: Celery with ``REDIS_URL``, else a clean fork server."""
    from dash import CeleryManager

    url = os.environ.get("REDIS_URL")
    if url:
        from celery import Celery  # only a Celery deployment needs it

        celery_app = Celery(__name__, broker=url, backend=url)
        return CeleryManager(celery_app), celery_app
    import diskcache

    from app.core.jobs import CleanJobManager

    manager = CleanJobManager(diskcache.Cache(str(cache_dir / "jobs")), hooks=job_hooks)
    manager.start()
    return manager, None


def security_headers(app: Dash) -> dict[str, str]:
    """The headers every response gets: a Content-Security-Policy that lets Dash run (its
    inline scripts by hash, plotly.js's ``eval``, React's inline styles) and nothing from
    elsewhere, no framing, no MIME sniffing, no referrer."""
    script = " ".join(["'self'", "'unsafe-eval'", *app.csp_hashes()])
    csp = "; ".join([
        "default-src 'self'", f"script-src {script}", "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:", "font-src 'self' data:", "connect-src 'self'",
        "worker-src 'self' blob:", "object-src 'none'", "base-uri 'self'",
        "form-action 'self'", "frame-ancestors 'none'"])
    return {"Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
            "Cross-Origin-Opener-Policy": "same-origin"}


def _install_headers(app: Dash) -> None:
    """Add :func:`security_headers` to every response (worked out on the first one, when
    every inline script is known)."""
    made: dict[str, str] = {}

    @app.server.after_request
    def _headers(response: Any) -> Any:
        if not made:
            made.update(security_headers(app))
        for k, v in made.items():
            response.headers.setdefault(k, v)
        return response


def create_app(
    graph_path: str | os.PathLike[str] | None = None, *, cache_dir: str | None = None,
    max_upload_mb: float = 200, plan_on_start: bool = True,
    startup_time_limit_s: float = STARTUP_TIME_LIMIT_S, startup_method: str = "roam",
    job_hooks: Sequence[str] = (),
) -> Dash:
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

    from app.analysis.settings import PlanSettings
    from app.core import sessions, state
    from app.core.config import AppConfig
    from app.core.paths import ASSETS
    from app.services.planning import plan_graph
    from app.views import page
    from app.views.callback_tools import show_error
    from app.views.loading.data import load_choice, sample_options, zoo_models
    from app.views.spec import PageDefaults
    from roam_core.formats.graph_io import load_graph

    cdir = state.configure(cache_dir)
    settings = PlanSettings(method=startup_method, time_limit_s=startup_time_limit_s)
    options = sample_options()
    values = [o["value"] for o in options]
    if graph_path is not None:
        graph_key, pick = state.put_graph(load_graph(graph_path)), None
    else:
        pick = next((v for p in DEFAULT_SAMPLE for v in values if v.startswith(p)), values[0])
        graph_key = load_choice(pick)
    plan_key = plan_graph(graph_key, settings) if plan_on_start else None
    page.warm(graph_key, plan_key)  # the first page load finds its views computed
    manager, celery_app = _manager(cdir, job_hooks)
    # assets/vendor holds what is loaded on demand (plotly.js: assets/plotly_bundle.js)
    app = Dash(__name__, assets_folder=str(ASSETS), assets_path_ignore=["^vendor$"],
               title="roam",
               background_callback_manager=manager, suppress_callback_exceptions=True,
               on_error=show_error)
    sessions.install(app.server)
    _install_headers(app)
    max_bytes = int(max_upload_mb * 2**20)
    # the upload cap is checked server-side (a visible, specific error); the request limit
    # leaves room for base64 so files up to ~1.5x the cap still get that message
    app.server.config["MAX_CONTENT_LENGTH"] = 2 * max_bytes + 2**20
    name = state.get_graph(graph_key).name
    defaults = PageDefaults(
        settings=settings, sample_options=options, sample_value=pick,
        graph={"key": graph_key, "name": name}, plan_key=plan_key, max_upload_bytes=max_bytes,
        zoo_models=zoo_models(),
        load_message=f"opened {name}" + (" (planned)" if plan_key else ""))
    app.layout = lambda: page.build_layout(defaults)
    page.register_views(app, AppConfig(max_upload_bytes=max_bytes))
    # Dash has no slot for it: app.worker hands it to ``celery -A app.worker``
    app.roam_celery = celery_app  # type: ignore[attr-defined]  # a new attribute on Dash
    return app
