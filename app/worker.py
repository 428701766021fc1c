"""Celery entry point (only with ``REDIS_URL``): ``celery -A app.worker worker``."""

from app.factory import create_app

dash_app = create_app(plan_on_start=False)
# set by create_app when REDIS_URL is set (Dash has no typed slot for it)
celery_app = dash_app.roam_celery
