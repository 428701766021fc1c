"""``roam serve``: safe defaults (waitress on 127.0.0.1; Flask's development server only with
``--debug``), options reach ``create_app``, and bad options are one-line errors."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from roam_core.cli import build_parser, main


class _FakeServer:
    config: ClassVar[dict[str, int]] = {"MAX_CONTENT_LENGTH": 1234}


class _FakeApp:
    def __init__(self) -> None:
        self.ran: dict[str, Any] = {}
        self.server = _FakeServer()

    def run(self, **kwargs: Any) -> None:
        self.ran = kwargs


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    import waitress

    import app

    seen: dict[str, Any] = {"app": _FakeApp(), "waitress": {}}

    def create_app(graph_path: Any = None, **kwargs: Any) -> _FakeApp:
        seen.update(graph=graph_path, **kwargs)
        return seen["app"]

    def serve(wsgi: Any, **kwargs: Any) -> None:
        seen["waitress"] = {"app": wsgi, **kwargs}

    monkeypatch.setattr(app, "create_app", create_app)
    monkeypatch.setattr(waitress, "serve", serve)
    return seen


def test_defaults_bind_localhost_on_waitress(fake: dict[str, Any]) -> None:
    assert main(["serve"]) == 0
    assert fake["app"].ran == {}  # never Flask's development server
    w = fake["waitress"]
    assert w["app"] is fake["app"].server
    assert (w["host"], w["port"], w["max_request_body_size"]) == ("127.0.0.1", 8050, 1234)
    assert fake["graph"] is None
    assert fake["max_upload_mb"] == 200.0
    assert fake["cache_dir"] is None
    assert fake["startup_method"] == "roam"


def test_options_are_passed(fake: dict[str, Any], tmp_path: Any) -> None:
    argv = ["serve", "--host", "0.0.0.0", "--port", "9000", "--graph", "g.json.gz", "--debug",
            "--cache-dir", str(tmp_path / "c"), "--max-upload-mb", "5", "--startup-method",
            "lescea", "--startup-time-limit", "1.5"]
    assert main(argv) == 0
    assert fake["app"].ran == {"host": "0.0.0.0", "port": 9000, "debug": True}
    assert fake["waitress"] == {}
    assert fake["graph"] == "g.json.gz"
    assert fake["cache_dir"] == str(tmp_path / "c")
    assert fake["max_upload_mb"] == 5.0
    assert fake["startup_time_limit_s"] == 1.5
    assert fake["startup_method"] == "lescea"


def test_serve_is_registered() -> None:
    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert "serve" in sub
    help_text = sub["serve"].format_help()
    assert "--max-upload-mb" in help_text
    assert "127.0.0.1" in help_text


@pytest.mark.parametrize("argv", [
    ["--port", "70000"], ["--port", "0"], ["--port", "x"], ["--max-upload-mb", "nan"],
    ["--max-upload-mb", "-1"], ["--max-upload-mb", "inf"], ["--startup-time-limit", "inf"],
    ["--startup-time-limit", "-1"],
])
def test_bad_options_are_one_line_errors(fake: dict[str, Any], argv: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["serve", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "error:" in err
    assert "graph" not in fake  # refused before the app is built


def test_unwritable_cache_dir_is_refused_first(fake: dict[str, Any], tmp_path: Any,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["serve", "--cache-dir", str(f)]) == 2
    assert "--cache-dir" in capsys.readouterr().err
    assert "graph" not in fake
