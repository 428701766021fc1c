"""The roam Dash app: load a graph, plan it in a background job, explore the plan.

``create_app()`` builds the app (:mod:`app.factory`); ``roam serve`` and ``python -m app`` run
it.  With ``REDIS_URL`` set, background jobs go to Celery workers:

    pip install -e ".[celery]"
    REDIS_URL=redis://localhost:6379/0 roam serve            # the web server
    REDIS_URL=redis://localhost:6379/0 celery -A app.worker worker   # the job workers

Every process must see the same cache directory (``--cache-dir`` / ``ROAM_CACHE_DIR``).

The package, top to bottom (``pyproject.toml``'s import-linter contracts keep the order):
``factory``, ``report`` and ``worker`` (entry points) > ``views`` (one module or package per
view, and the page built from :mod:`app.views.registry`) > ``services`` (cache-backed data
several views share) > ``analysis`` | ``figures`` (pure) > ``core`` (cache, memos, jobs,
ids, units).
"""

from app.core.paths import ASSETS, data_dir
from app.factory import DEFAULT_SAMPLE, create_app

__all__ = ["ASSETS", "DEFAULT_SAMPLE", "create_app", "data_dir"]
