"""Helpers of every view's callbacks: what fired one, and the app's config bound to one."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import dash

from app.core.config import AppConfig

__all__ = ["bind_config", "triggered_value"]


def triggered_value() -> Any:
    """The new value of the input that fired the running callback (``None`` if none did).

    ``Any``: it is whatever that input's property holds (a click count, a figure's
    ``clickData``, a store's data).
    """
    trig = dash.ctx.triggered
    return trig[0].get("value") if trig else None


def bind_config(fn: Callable[..., Any], config: AppConfig) -> Callable[..., Any]:
    """``fn`` with this app's ``config`` (Dash passes only the dependencies)."""
    @functools.wraps(fn)
    def bound(*args: Any) -> Any:
        return fn(*args, config=config)

    return bound
