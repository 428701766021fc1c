"""Browser sessions: who is asking, so that a graph, plan or snapshot is seen only by the
session that made it.

Each browser gets a random session id in an ``HttpOnly``, ``SameSite=Strict`` cookie
(:data:`COOKIE`), set by the server on its first response (:func:`install`).  The cache
(:mod:`app.core.state`) records the owner of every graph and plan it stores and files small
records (snapshots, job results) under the owner's name; a key from another session is
refused as if it were not there.  What the server stores outside any request (the graph and
plan opened at start-up) is public (:data:`PUBLIC`).

:func:`current_owner` finds the session of the running code: the cookie of the Flask request
(callbacks in the server), else the cookies Dash hands a background job with its callback
context (a job runs in another process, without a request), else :data:`PUBLIC`.
:func:`acting_as` sets it explicitly (tests, tools).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import secrets
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask

__all__ = ["COOKIE", "PUBLIC", "acting_as", "current_owner", "install", "new_session_id"]

#: The cookie holding the browser's session id.
COOKIE = "roam_session"
#: The owner of what is stored outside any browser session (visible to every session).
PUBLIC = "*"
_VALID = re.compile(r"[0-9a-f]{32}")
_OVERRIDE: contextvars.ContextVar[str | None] = contextvars.ContextVar("roam_owner",
                                                                      default=None)


def new_session_id() -> str:
    """A fresh random session id (128 bits, hex)."""
    return secrets.token_hex(16)


def _valid(sid: Any) -> str | None:
    return sid if isinstance(sid, str) and _VALID.fullmatch(sid) else None


def _from_request() -> str | None:
    """The session of the Flask request being served, if any."""
    flask = sys.modules.get("flask")
    if flask is None or not flask.has_request_context():
        return None
    sid = getattr(flask.g, "roam_session", None)
    return _valid(sid) or _valid(flask.request.cookies.get(COOKIE))


def _from_dash_job() -> str | None:
    """The session whose callback started this background job (Dash copies the request's
    cookies into the job's callback context).  A request that came without a session
    cookie acts for a fresh session that owns nothing (never as the server)."""
    module = sys.modules.get("dash._callback_context")
    if module is None:
        return None
    try:
        ctx = module.context_value.get()
    except LookupError:
        return None
    if not hasattr(ctx, "get") or "cookies" not in ctx:
        return None
    cookies = ctx.get("cookies")
    sid = _valid(cookies.get(COOKIE)) if isinstance(cookies, dict) else None
    return sid or new_session_id()


def current_owner() -> str:
    """The session the running code acts for: :data:`PUBLIC` outside any session.

    Examples
    --------
    >>> current_owner()
    '*'
    >>> with acting_as("0" * 32):
    ...     current_owner() == "0" * 32
    True
    """
    return _OVERRIDE.get() or _from_request() or _from_dash_job() or PUBLIC


@contextlib.contextmanager
def acting_as(owner: str) -> Iterator[str]:
    """Act for ``owner`` (a session id or :data:`PUBLIC`) in this context."""
    if owner != PUBLIC and _valid(owner) is None:
        raise ValueError("a session id is 32 lowercase hex digits")
    token = _OVERRIDE.set(owner)
    try:
        yield owner
    finally:
        _OVERRIDE.reset(token)


def install(server: Flask, *, secure_cookie: bool = False) -> None:
    """Give every browser a session id: read from its cookie, or made and set on the
    response (``HttpOnly``, ``SameSite=Strict``; ``Secure`` with ``secure_cookie``)."""
    from flask import g, request

    @server.before_request
    def _session() -> None:
        sid = _valid(request.cookies.get(COOKIE))
        g.roam_session_new = sid is None
        g.roam_session = sid or new_session_id()

    @server.after_request
    def _cookie(response: Any) -> Any:
        if getattr(g, "roam_session_new", False):
            response.set_cookie(COOKIE, g.roam_session, httponly=True, samesite="Strict",
                                secure=secure_cookie, path="/")
        return response
