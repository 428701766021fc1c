"""Helpers of every view's callbacks: what fired one, the app's config bound to one, and
what the page shows when one fails.

:func:`show_error` is the app's error handler (``Dash(on_error=show_error)``,
:func:`app.create_app`): Dash calls it for every callback that raises, background jobs
included, and it writes the message into the page's error banner (``ids.CALLBACK_ERROR``)
with ``dash.set_props`` while the callback's own outputs keep their values.  A
:class:`~roam_core.base.errors.RoamError` shows its own one-line message; anything else is
logged with its traceback on the server and shown as "internal error" with its type.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import dash

from app.core import ids
from app.core.config import AppConfig
from roam_core.base.errors import RoamError

__all__ = ["bind_config", "error_message", "guarded", "show_error", "triggered_value"]

_logger = logging.getLogger(__name__)
#: Characters of a message shown in the banner.
_MAX_CHARS = 500


def error_message(err: BaseException) -> str:
    """The one line the page shows for a failed callback.

    >>> from roam_core.base.errors import GraphError
    >>> error_message(GraphError("graph file is not valid JSON"))
    'graph file is not valid JSON'
    >>> error_message(KeyError("x"))
    "internal error (KeyError: 'x'); the server log has the details"
    """
    if isinstance(err, RoamError):
        text = str(err)
    else:
        text = f"internal error ({type(err).__name__}: {err}); the server log has the details"
    text = " ".join(text.split())
    return text if len(text) <= _MAX_CHARS else text[:_MAX_CHARS - 3] + "..."


def show_error(err: Exception) -> None:
    """Dash's ``on_error`` for every callback: the message goes into the page's banner and
    the callback's outputs are left as they were (returns ``None``: no update)."""
    if not isinstance(err, RoamError):
        _logger.error("callback failed", exc_info=err)
    dash.set_props(ids.CALLBACK_ERROR, {"children": error_message(err), "hidden": False})


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with :func:`show_error` run on its failures (for a callback registered on an
    app that lacks the app-wide handler, such as a test app)."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except dash.exceptions.PreventUpdate:
            raise
        except Exception as e:
            show_error(e)
            return dash.no_update

    return run


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
