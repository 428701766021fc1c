"""Celery entry point (only with ``REDIS_URL``): ``celery -A app.worker worker``."""

from app import create_app

dash_app = create_app(plan_on_start=False)
celery_app = dash_app.roam_celery  # type: ignore[attr-defined]
