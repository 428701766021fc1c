"""The upload route: files stream to disk under a token, at most the kind's limit."""

from __future__ import annotations

from pathlib import Path

import dash
import pytest

from app.services.uploads import UploadError, read_upload, upload_dir
from app.views.uploads import register_upload, result_id, upload_zone


def _client(cap: int) -> object:
    app = dash.Dash(__name__)
    app.layout = dash.html.Div()
    register_upload(app, "graph", cap)
    register_upload(app, "snapshot", cap // 2)
    return app.server.test_client()


def test_route_streams_a_file_under_the_limit(cache_dir: Path) -> None:
    client = _client(1000)
    r = client.post("/_roam/upload/graph", data=b"x" * 1000,
                    headers={"X-Roam-Filename": "g%20one.json"})
    assert r.status_code == 200
    assert read_upload(r.json["token"]) == b"x" * 1000
    with pytest.raises(UploadError, match="no longer on the server"):
        read_upload(r.json["token"])  # read once


def test_route_refuses_over_the_limit_and_unknown_kinds(cache_dir: Path) -> None:
    client = _client(1000)
    r = client.post("/_roam/upload/snapshot", data=b"x" * 600,
                    headers={"X-Roam-Filename": "s%20one.pickle"})
    assert r.status_code == 413
    assert r.json["error"] == ("s one.pickle is 600 B: larger than the upload limit (500 B)")
    assert client.post("/_roam/upload/other", data=b"x").status_code == 404
    assert not list(upload_dir().iterdir())
    with pytest.raises(UploadError, match="damaged"):
        read_upload("../../etc/passwd")


def test_zone_carries_its_limit_and_targets() -> None:
    zone = upload_zone("graph-upload", "graph", 2048, "load-status", ["drop"])
    props = zone.to_plotly_json()["props"]
    assert props["data-max-bytes"] == "2048"
    assert props["data-url"] == "/_roam/upload/graph"
    assert props["data-status"] == "load-status"
    assert props["data-result"] == result_id("graph-upload") == "graph-upload-result"
