"""``roam serve``: safe defaults, options reach ``create_app`` and ``app.run``."""

from __future__ import annotations

from typing import Any

import pytest

from roam_core.cli import build_parser, main


class _FakeApp:
    def __init__(self) -> None:
        self.ran: dict[str, Any] = {}

    def run(self, **kwargs: Any) -> None:
        self.ran = kwargs


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import app

    seen: dict[str, Any] = {"app": _FakeApp()}

    def create_app(graph_path: Any = None, **kwargs: Any) -> _FakeApp:
        seen.update(graph=graph_path, **kwargs)
        return seen["app"]

    monkeypatch.setattr(app, "create_app", create_app)
    return seen


def test_defaults_bind_localhost_without_debug(fake: dict[str, Any]) -> None:
    assert main(["serve"]) == 0
    assert fake["app"].ran == {"host": "127.0.0.1", "port": 8050, "debug": False}
    assert fake["graph"] is None
    assert fake["max_upload_mb"] == 200.0
    assert fake["cache_dir"] is None
    assert fake["startup_method"] == "roam"


def test_options_are_passed(fake: dict[str, Any]) -> None:
    argv = ["serve", "--host", "0.0.0.0", "--port", "9000", "--graph", "g.json.gz", "--debug",
            "--cache-dir", "/tmp/c", "--max-upload-mb", "5", "--startup-method", "lescea",
            "--startup-time-limit", "1.5"]
    assert main(argv) == 0
    assert fake["app"].ran == {"host": "0.0.0.0", "port": 9000, "debug": True}
    assert fake["graph"] == "g.json.gz"
    assert fake["cache_dir"] == "/tmp/c"
    assert fake["max_upload_mb"] == 5.0
    assert fake["startup_time_limit_s"] == 1.5
    assert fake["startup_method"] == "lescea"


def test_serve_is_registered() -> None:
    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert "serve" in sub
    help_text = sub["serve"].format_help()
    assert "--max-upload-mb" in help_text
    assert "127.0.0.1" in help_text
