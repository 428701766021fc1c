"""Every failed callback shows its message in the page; the app sends security headers and a
session cookie."""

from __future__ import annotations

import json
from pathlib import Path

import dash
import pytest
from dash import Input, Output, html

from app.core import ids, sessions
from app.views.callback_tools import error_message, guarded, show_error
from roam_core.base.errors import GraphError


def _post(app: dash.Dash, output: str, inp: str) -> dict:
    client = app.server.test_client()
    client.get("/")
    body = {"output": output, "outputs": {"id": output.split(".")[0], "property": "children"},
            "inputs": [{"id": inp, "property": "n_clicks", "value": 1}],
            "changedPropIds": [f"{inp}.n_clicks"], "state": []}
    r = client.post("/_dash-update-component", json=body)
    assert r.status_code == 200, r.data
    return json.loads(r.data)


def _tiny_app(fail: Exception, *, on_error: bool = True) -> dash.Dash:
    app = dash.Dash(__name__, on_error=show_error if on_error else None)
    app.layout = html.Div([html.Div(id=ids.CALLBACK_ERROR, hidden=True),
                           html.Button(id="go"), html.Div("old text", id="status")])

    def fire(_n: int) -> str:
        raise fail

    app.callback(Output("status", "children"), Input("go", "n_clicks"))(
        fire if on_error else guarded(fire))
    return app


def test_a_failed_callback_shows_its_message_and_keeps_its_outputs() -> None:
    resp = _post(_tiny_app(GraphError("graph file is not valid JSON: line 1")),
                 "status.children", "go")
    banner = resp["sideUpdate"][ids.CALLBACK_ERROR]
    assert banner == {"children": "graph file is not valid JSON: line 1", "hidden": False}
    assert resp["response"] == {}  # the old status text stays


def test_an_unexpected_error_is_named_not_hidden() -> None:
    resp = _post(_tiny_app(KeyError("tensors")), "status.children", "go")
    text = resp["sideUpdate"][ids.CALLBACK_ERROR]["children"]
    assert text.startswith("internal error (KeyError")
    assert "server log" in text


def test_guarded_does_the_same_without_the_app_handler() -> None:
    resp = _post(_tiny_app(GraphError("bad"), on_error=False), "status.children", "go")
    assert resp["sideUpdate"][ids.CALLBACK_ERROR]["children"] == "bad"


def test_messages_are_one_line_and_bounded() -> None:
    assert error_message(GraphError("a\nb")) == "a b"
    assert len(error_message(GraphError("x" * 10_000))) == 500


@pytest.mark.slow
def test_the_app_uses_the_handler_and_sends_headers(cache_dir: Path) -> None:
    from app import create_app

    app = create_app(cache_dir=str(cache_dir), plan_on_start=False)
    assert app._on_error is show_error or getattr(app._on_error, "__wrapped__", None) \
        is show_error or "show_error" in repr(app._on_error)
    r = app.server.test_client().get("/")
    h = r.headers
    assert "frame-ancestors 'none'" in h["Content-Security-Policy"]
    assert "script-src 'self'" in h["Content-Security-Policy"]
    assert h["X-Content-Type-Options"] == "nosniff"
    assert h["X-Frame-Options"] == "DENY"
    assert h["Referrer-Policy"] == "same-origin"
    assert sessions.COOKIE in h["Set-Cookie"]
    assert ids.CALLBACK_ERROR in r.get_data(as_text=True) or ids.CALLBACK_ERROR in str(
        app.layout())
