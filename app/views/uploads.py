"""File drops that never go through the page: a drop zone checked in the browser, and the
plain Flask route the file streams to.

``dcc.Upload`` reads the whole file into the page as a base64 data URL and sends it inside a
callback request; a file near the cap (200 MiB) crashed the browser tab before the server
could refuse it.  Here the zone (:func:`upload_zone`) is plain HTML that ``assets/upload.js``
drives: it compares ``File.size`` with the zone's limit before reading a byte (a clear
message at once when it is over), otherwise posts the file as the request body to
``/_roam/upload/<kind>`` (the browser streams it from disk) and hands the token the route
returns to the zone's result store.  The view's callback listens to that store and reads the
bytes with :func:`app.services.uploads.read_upload`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any

import dash
import flask
from dash import dcc, html
from dash.development.base_component import Component

from app.core.formatting import fmt_bytes
from app.services.uploads import UploadError, save_upload
from app.views.lazy import store

__all__ = ["ROUTE", "UploadRef", "register_upload", "result_id", "upload_ref", "upload_store",
           "upload_zone"]

#: The upload route (``<kind>``: graph, plan, snapshot).
ROUTE = "/_roam/upload/<kind>"
_LIMITS = "ROAM_UPLOAD_LIMITS"
#: What a zone's result store holds: ``{"token", "filename", "size"}``.
UploadRef = dict[str, str | int]


def result_id(zone_id: str) -> str:
    """Id of the store a zone hands its upload to."""
    return f"{zone_id}-result"


def upload_zone(zone_id: str, kind: str, max_bytes: int, status_id: str,
                text: Sequence[Component | str], accept: str = "") -> html.Div:
    """A drop zone (click to browse) for ``kind`` files of at most ``max_bytes``.

    ``status_id`` is the element the browser writes its messages to (over the limit,
    uploading n %); the upload's token goes to :func:`result_id` ``(zone_id)``.
    """
    # the file input is added by upload.js (Dash has no file input component)
    data: dict[str, Any] = {  # data-* attributes: Dash's Div takes them as keywords
        "data-url": ROUTE.replace("<kind>", kind), "data-max-bytes": str(max_bytes),
        "data-status": status_id, "data-result": result_id(zone_id), "data-accept": accept}
    return html.Div(
        list(text), id=zone_id, className="upload roam-upload", role="button", tabIndex="0",
        title=f"at most {fmt_bytes(max_bytes)}", **data)


def upload_store(zone_id: str) -> dcc.Store:
    """The zone's result store (put it with the view's stores)."""
    return store(result_id(zone_id))


def _receive(kind: str) -> tuple[flask.Response, int]:
    """Stream one posted file to disk (at most the kind's limit); answer its token."""
    limits = flask.current_app.config.get(_LIMITS, {})
    if kind not in limits:
        return flask.jsonify(error=f"unknown upload kind {kind!r}"), 404
    cap = int(limits[kind])
    name = urllib.parse.unquote(flask.request.headers.get("X-Roam-Filename", "file"))[:200]
    size = flask.request.content_length
    if size is not None and size > cap:
        return flask.jsonify(error=f"{name} is {fmt_bytes(size)}: larger than the upload "
                                   f"limit ({fmt_bytes(cap)})"), 413
    try:
        token = save_upload(flask.request.stream, cap, name)
    except UploadError as e:
        return flask.jsonify(error=str(e)), 413
    return flask.jsonify(token=token), 200


def register_upload(app: dash.Dash, kind: str, max_bytes: int) -> None:
    """Accept ``kind`` uploads of at most ``max_bytes`` on :data:`ROUTE` (added once)."""
    server = app.server
    server.config.setdefault(_LIMITS, {})[kind] = int(max_bytes)
    if "roam_upload" not in server.view_functions:
        server.add_url_rule(ROUTE, "roam_upload", _receive, methods=["POST"])
    # the route reads at most the cap: Flask's request limit must leave room for it
    need = max(server.config[_LIMITS].values()) + 2**20
    if (server.config.get("MAX_CONTENT_LENGTH") or 0) < need:
        server.config["MAX_CONTENT_LENGTH"] = need


def upload_ref(data: UploadRef | None) -> tuple[str, str]:
    """``(token, file name)`` of a zone's result store (raises ``PreventUpdate`` if empty)."""
    if not data or not data.get("token"):
        raise dash.exceptions.PreventUpdate
    return str(data["token"]), str(data.get("filename") or "file")
