"""Cancel requests of background jobs: written by the page, polled by the job.

A request lives in the shared cache under a key of the job (``"plan"``, ``"frontier"``,
``"fit"``), the page (``SESSION``) and the run (the start button's click count), so a Cancel
stops this page's run of that job and no other.  Cancelling is cooperative: the job stops at
its next check and keeps what it has finished (the planner its best plan so far, the
frontier and the What-fits sweep the points they made), where Dash's own cancel kills the
job's process and everything it made with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from app.core import state
from roam_core.base.cancel import CancelFlag

__all__ = ["cancel_flag", "cancel_key", "request_cancel"]


def cancel_key(session: str, run: int, job: str = "plan") -> str:
    """Cache key of the cancel request of run ``run`` (start clicks) of ``job`` in page
    ``session``.

    >>> cancel_key("s1", 3), cancel_key("s1", 3, "frontier")
    ('cancel-s1-3', 'cancel-frontier-s1-3')
    """
    return f"cancel-{session}-{int(run)}" if job == "plan" else \
        f"cancel-{job}-{session}-{int(run)}"


def request_cancel(session: str, run: int, job: str = "plan") -> None:
    """Ask that run of ``job`` to stop (it keeps what it has finished)."""
    state.put_json(cancel_key(session, run, job), True)


def cancel_flag(session: str, run: int, job: str = "plan", every_s: float = 0.25,
                clock: Callable[[], float] = time.monotonic) -> CancelFlag:
    """A ``cancel()`` callable for the job that reads the request at most every
    ``every_s`` seconds (the planner's solver threads poll it)."""
    key = cancel_key(session, run, job)
    last = {"t": -1e9, "v": False}

    def flag() -> bool:
        if not last["v"] and clock() - last["t"] >= every_s:
            last["t"], last["v"] = clock(), bool(state.get_json(key, False))
        return bool(last["v"])

    return flag
