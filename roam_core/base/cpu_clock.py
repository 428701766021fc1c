"""The CPU-time clock of the layout's safety limits.

A wall-clock safety limit makes a result depend on the machine's load: on a loaded machine
the same work takes longer, the limit cuts it sooner, and the arena changes (GPT2-XL's
15,000-op expanded graphs: tens of MiB).  The layout's stages therefore measure their safety
limits (``ArenaConfig.time_limit_s`` and the deadlines the stages pass on) in CPU seconds of
the calling **thread**, not of the process: the planner may lay out several drop sets at
once in threads of one process, and process CPU time would count their work too, so a
layout would stop sooner when it had company.  CP-SAT with one worker solves in the calling
thread, so its solves are counted; more workers run in threads of their own, bounded by
CP-SAT's deterministic time anyway.  Time spent waiting (for the GIL, for a CPU the machine
gives to another process, in ``sleep``) is not counted.

Examples
--------
>>> t = cpu_now()
>>> cpu_now() >= t
True
"""

from __future__ import annotations

import time

__all__ = ["cpu_now"]


def cpu_now() -> float:
    """CPU seconds the calling thread has spent so far (``time.thread_time()``).

    Deadlines of the layout are ``cpu_now() + limit``; a deadline is only meaningful in
    the thread that made it.

    Returns
    -------
    float
        Seconds of CPU time of this thread (user and system).
    """
    return time.thread_time()
