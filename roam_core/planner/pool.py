"""The sub-task pool: every ordering sub-task solved, in-process or through an executor.

Each sub-task is independent (sub-tasks own disjoint step ranges of the base order), so they
run in any order on any worker; results are handed back one by one as they finish.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import tempfile
import time
from collections.abc import Callable

from roam_core.base.cancel import CancelFlag, StopFile
from roam_core.ordering.order_hint_check import needs_solver
from roam_core.ordering.order_ilp import solve_order_problem
from roam_core.ordering.order_problem import OrderProblem, OrderResult
from roam_core.planner.config import PlannerConfig

__all__ = ["STOP_GRACE_S", "solve_subtasks"]

_logger = logging.getLogger(__name__)


#: Seconds the pool's running solves get to return after a stop (they poll every 0.05 s).
STOP_GRACE_S = 5.0


def solve_subtasks(problems: list[OrderProblem], cfg: PlannerConfig,
                   executor: cf.Executor | None, cancel: CancelFlag | None,
                   deadline: float | None, on_result: Callable[[OrderResult], None]
                   ) -> list[str]:
    """Solve every problem; returns the ids that were not solved (cancelled / out of time).

    Pool solves get a :class:`~roam_core.base.cancel.StopFile`: on a cancel (or when the
    deadline passes) it is set, sub-tasks not started are dropped, and the running CP-SAT
    solves stop at their next poll; what they found by then is kept (status ``CANCELLED``).
    The flag is a file in a local temporary folder: an executor whose workers run on other
    machines (a Dask cluster) does not see it, and its running solves go on to their limits.
    """
    def stop() -> bool:
        return bool((cancel is not None and cancel())
                    or (deadline is not None and time.monotonic() > deadline))

    pending = []
    for p in problems:  # answered without a model: no need to ship them to a worker
        if needs_solver(p):
            pending.append(p)
        else:
            on_result(solve_order_problem(p))
    workers = cfg.workers if cfg.workers is not None else (os.cpu_count() or 1)
    left: list[str] = []
    if executor is None and (workers <= 1 or len(pending) <= 1):
        for p in pending:
            if stop():
                left.append(p.task_id)
                continue
            on_result(solve_order_problem(p, stop))
        return left
    own = executor is None
    ex = executor if executor is not None else cf.ProcessPoolExecutor(
        max_workers=min(workers, len(pending)))
    stuck = 0
    with tempfile.TemporaryDirectory(prefix="roam-stop-") as tmp:
        flag = StopFile(os.path.join(tmp, "stop"))
        futures = {ex.submit(solve_order_problem, p, flag): p.task_id for p in pending}

        def collect(done: set[cf.Future[OrderResult]]) -> None:
            for f in sorted(done, key=lambda f: futures[f]):
                if f.cancelled():
                    left.append(futures[f])
                else:
                    on_result(f.result())

        try:
            waiting = set(futures)
            while waiting:
                done, waiting = cf.wait(waiting, timeout=0.1, return_when=cf.FIRST_COMPLETED)
                collect(done)
                if waiting and stop():
                    flag.set()  # running solves stop at their next poll
                    for f in waiting:
                        f.cancel()  # not started yet: never runs
                    done, not_done = cf.wait(waiting, timeout=STOP_GRACE_S)
                    collect(done)
                    left.extend(futures[f] for f in not_done)
                    stuck = len(not_done)
                    break
        finally:
            flag.set()
            if own:  # wait for the workers unless one ignored the stop (never expected)
                ex.shutdown(wait=not stuck, cancel_futures=True)
    if stuck:
        _logger.warning("%d sub-task solves did not stop within %.0f s of the cancel",
                        stuck, STOP_GRACE_S)
    return left
