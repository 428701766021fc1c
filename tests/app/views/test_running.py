"""The jobs running in a page and the buttons they switch."""

from __future__ import annotations

from app.views import running


def test_buttons_derive_from_the_running_store() -> None:
    idle = {"plan": False, "trace": False, "verify": False}
    assert running.buttons(idle, False, ["mlp"]) == (False, True, False, True, False, True)
    assert running.buttons({**idle, "plan": True}, False, ["mlp"])[:2] == (True, False)
    assert running.buttons({**idle, "trace": True}, False, ["mlp"])[2:4] == (True, False)
    assert running.buttons({**idle, "verify": True}, False, [])[2:] == (
        True, True, True, False)
    assert running.buttons(None, None, None)[4] is True  # verify off until known
