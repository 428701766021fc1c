"""Cancel requests of the Plan job: written by the page, polled by the planner's job.

A request lives in the shared cache under a key of the page (``SESSION``) and of the run
(the Plan button's click count), so a Cancel stops this page's run and no other.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from app.core import state
from roam_core.base.cancel import CancelFlag

__all__ = ["cancel_flag", "cancel_key", "request_cancel"]


def cancel_key(session: str, run: int) -> str:
    """Cache key of the cancel request of run ``run`` (Plan clicks) in page ``session``."""
    return f"cancel-{session}-{int(run)}"


def request_cancel(session: str, run: int) -> None:
    """Ask the planner job of that run to stop (it keeps the best plan found so far)."""
    state.put_json(cancel_key(session, run), True)


def cancel_flag(session: str, run: int, every_s: float = 0.25,
                clock: Callable[[], float] = time.monotonic) -> CancelFlag:
    """A ``cancel()`` callable for the planner that reads the request at most every
    ``every_s`` seconds (it is polled by solver threads)."""
    key = cancel_key(session, run)
    last = {"t": -1e9, "v": False}

    def flag() -> bool:
        if not last["v"] and clock() - last["t"] >= every_s:
            last["t"], last["v"] = clock(), bool(state.get_json(key, False))
        return bool(last["v"])

    return flag
