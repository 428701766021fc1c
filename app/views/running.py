"""The jobs running in this page (the ``RUNNING`` store) and the buttons they switch.

One store says which background jobs run (plan, trace, verify); each job's buttons are
derived from it by a callback of that job's view, so that Dash never holds the Plan buttons
back while another job's inputs may still change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dash
from dash.exceptions import PreventUpdate

__all__ = ["buttons", "cancelled", "running_patch"]


def buttons(running: Mapping[str, bool] | None, verify_off: bool | None,
            zoo: Sequence[str] | None) -> tuple[bool, bool, bool, bool, bool, bool]:
    """Every job button from the one ``RUNNING`` store: ``disabled`` of (Plan, Cancel, Trace,
    Cancel trace, Verify, Cancel verify)."""
    r = running or {}
    plan, trace, ver = bool(r.get("plan")), bool(r.get("trace")), bool(r.get("verify"))
    return (plan, not plan, trace or not zoo, not trace, ver or verify_off is not False,
            not ver)


def running_patch(job: str, on: bool) -> dash.Patch:
    """The ``RUNNING`` store's change when ``job`` starts (``on``) or ends."""
    patch = dash.Patch()
    patch[job] = on
    return patch


def cancelled(n: int | None) -> str:
    """Cancel of a job that has no partial result (trace, verify): it is stopped."""
    if not n:
        raise PreventUpdate
    return "cancelled"
