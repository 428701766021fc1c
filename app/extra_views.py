"""The Budget, What-fits and Measured-memory views: their cards, stores and callbacks.

Kept apart from :mod:`app.layout` / :mod:`app.callbacks` (one line each hooks them in).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app import budget, fit, snapshot_view

__all__ = ["cards", "register"]


def cards(defaults: Mapping[str, Any]) -> list[Any]:
    """Stores and cards of the three views (appended to the main column)."""
    return [*budget.stores(), *fit.stores(), *snapshot_view.stores(), budget.card(),
            fit.card(), snapshot_view.card()]


def register(app: Any) -> None:
    """Register the three views' callbacks."""
    budget.register(app)
    fit.register(app)
    snapshot_view.register(app)
