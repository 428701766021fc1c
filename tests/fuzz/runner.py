"""Running ``python -m roam_core`` on fuzz inputs: exit status, stderr, peak memory.

:func:`run_cli` starts one child and waits for it with ``os.wait4``, whose resource usage
gives the child's peak resident memory (``ru_maxrss``).  :func:`matrix` lists every
(command, input) run of the corpus; :func:`verdict` says what is wrong with a result (a
traceback, a message on several lines, an unexpected exit status, too much memory).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.corpus import BASE_GRAPH, FUZZ_ENV, Case, cases, write_case
from tests.paths import REPO

__all__ = ["MAX_RSS_MIB", "SAMPLE_GRAPHS", "SAMPLE_PLANS", "Result", "Run", "matrix", "run_cli",
           "run_in_process", "verdict"]

#: Peak memory allowed to a run that refuses its input.
MAX_RSS_MIB = 512


@dataclass(frozen=True)
class Run:
    """One command line over one case, and the exit statuses it may end with."""

    case: str
    argv: tuple[str, ...]
    ok_status: tuple[int, ...]


@dataclass(frozen=True)
class Result:
    """What a run did."""

    run: Run
    status: int
    stderr: str
    rss_mib: float
    seconds: float


#: ``/usr/bin/time`` starts the child from a small process: a child forked from a big one
#: (pytest) starts with that process's peak as its own (Linux keeps ``maxrss`` across
#: fork and exec), so ``wait4`` alone would over-state a small child's peak.
_TIME = "/usr/bin/time"


def run_cli(argv: tuple[str, ...], timeout_s: float = 300.0) -> tuple[int, str, float, float]:
    """``(exit status, stderr, peak RSS MiB, seconds)`` of ``python -m roam_core *argv``."""
    env = {**os.environ, **FUZZ_ENV, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "roam_core", *argv]
    return run_measured(cmd, env, timeout_s)


def run_in_process(argv: tuple[str, ...]) -> tuple[int, str, float, float]:
    """``(exit status, stderr, 0.0, seconds)`` of ``roam_core.cli.main(argv)`` in this process.

    What ``python -m roam_core`` does less the interpreter's start: argparse's ``SystemExit``
    gives the status, and an exception that escapes ``main`` is written to the stderr text as
    the traceback a user would see.  The environment must hold :data:`FUZZ_ENV`, and a
    ``serve`` that gets past its checks must be stopped by the caller (peak memory is not
    measured: :func:`run_cli` does that)."""
    import contextlib
    import io
    import traceback

    from roam_core.cli import main

    err, out = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            status = main(list(argv))
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
        except Exception:  # what a user would see: a traceback
            traceback.print_exc(file=err)
            status = 1
    return status, err.getvalue(), 0.0, time.monotonic() - t0


def run_measured(cmd: list[str], env: dict[str, str], timeout_s: float
                 ) -> tuple[int, str, float, float]:
    """``(exit status, stderr, peak RSS MiB, seconds)`` of ``cmd`` (through ``/usr/bin/time``
    when there is one, else ``wait4``'s figure, an upper bound)."""
    import tempfile

    t0 = time.monotonic()
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file, \
            open(os.devnull, "wb") as null:
        timed = os.path.exists(_TIME)
        full = [_TIME, "-f", "%M", "-o", rss_file.name, *cmd] if timed else cmd
        p = subprocess.Popen(full, stdout=null, stderr=subprocess.PIPE, env=env, cwd=REPO,
                             start_new_session=True)  # a timeout kills the whole group
        assert p.stderr is not None
        try:
            err = _read_with_timeout(p, timeout_s)
        finally:
            p.stderr.close()
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        rss = usage.ru_maxrss / 1024
        if timed:
            text = rss_file.read().strip().splitlines()
            rss = int(text[-1]) / 1024 if text and text[-1].isdigit() else rss
            err = "\n".join(ln for ln in err.splitlines()
                            if not ln.startswith("Command exited with non-zero status"))
    return p.returncode, err, rss, time.monotonic() - t0


def _read_with_timeout(p: subprocess.Popen[bytes], timeout_s: float) -> str:
    import signal
    import threading

    def kill() -> None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    try:
        assert p.stderr is not None
        return p.stderr.read().decode("utf-8", "replace")
    finally:
        timer.cancel()


def _graph_runs(case: Case, path: str, plan: str, out: Path) -> Iterator[Run]:
    name = case.name
    yield Run(name, ("info", path), (2,))
    yield Run(name, ("info", path, "--json"), (2,))
    yield Run(name, ("plan", path, "-o", str(out / "p.json"), "--no-progress"), (2,))
    yield Run(name, ("plan", path, "-o", str(out / "p.json"), "--no-progress",
                     "--budget", "auto"), (2,))
    yield Run(name, ("check", path, plan), (2,))
    yield Run(name, ("report", path, plan, "-o", str(out / "r.html")), (2,))
    yield Run(name, ("frontier", path, "--budgets", "2", "--no-min-cut"), (2,))
    yield Run(name, ("execute", path, plan, "-o", str(out / "x.json")), (2,))
    yield Run(name, ("bench", "--graphs", path, "--out", str(out / "bench"),
                     "--methods", "eager"), (2,))
    yield Run(name, ("serve", "--graph", path, "--port", "1"), (2,))


def _plan_runs(case: Case, path: str, graph: str, out: Path) -> Iterator[Run]:
    # roam check lists what it can (a plan for another graph: a FINGERPRINT violation, exit
    # 1) and refuses what it cannot read (exit 2); never exit 0
    yield Run(case.name, ("check", graph, path), (1, 2))
    yield Run(case.name, ("report", graph, path, "-o", str(out / "r.html")), (2,))
    yield Run(case.name, ("execute", graph, path, "-o", str(out / "x.json")), (2,))


#: The graphs that go through every command in the suite's sample, one of each kind of bad
#: input: bytes that are no JSON, a gzip bomb, nesting past the recursion limit, a number
#: past int64, text no terminal can print, a broken structure (a cycle), a path that is no
#: regular file.  Every other bad graph goes through ``info`` (the same reader).
SAMPLE_GRAPHS = ("graph: not JSON", "graph: gzip bomb (32 MiB of zeros)",
                 "graph: nested 100k deep", "graph: size_bytes 2**63",
                 "graph: lone surrogate in an op id", "graph: cycle", "graph: fifo",
                 "graph: directory")
#: The plans that go through every command in the sample: no JSON, a bomb, a plan for
#: another graph, an offset past int64, a false figure, a broken order, a missing file.
SAMPLE_PLANS = ("plan: not JSON", "plan: gzip bomb", "plan: another graph",
                "plan: offsets 2**63", "plan: planned_peak_bytes 1", "plan: order reversed",
                "plan: missing")


def matrix(directory: Path, *, full: bool = True) -> list[Run]:
    """Every run of the corpus (inputs written under ``directory``).

    ``full=False`` (the test suite's sample): every bad graph through ``info`` and the
    :data:`SAMPLE_GRAPHS` through every command; every plan through ``check`` and the
    :data:`SAMPLE_PLANS` through every command; CSVs, options and output paths all.
    ``full=True`` (``benchmarks/fuzz_bench.py``, ``./dev.sh matrix``): every case through
    every command."""
    from roam_core.formats.plan_io import save_plan
    from tests.fuzz.corpus import base_plan

    out = directory / "out"
    out.mkdir(exist_ok=True)
    plan = str(directory / "base.plan.json")
    save_plan(base_plan(), plan)
    graph = str(BASE_GRAPH)
    runs: list[Run] = []
    for case in cases(("graph", "plan", "csv")):
        if case.expect == "accept":
            continue
        path = write_case(case, directory)
        if case.kind == "graph":
            every = list(_graph_runs(case, path, plan, out))
            runs += every if full or case.name in SAMPLE_GRAPHS else every[:1]
        elif case.kind == "plan":
            every = list(_plan_runs(case, path, graph, out))
            runs += every if full or case.name in SAMPLE_PLANS else every[:1]
        else:
            runs.append(Run(case.name, ("layout", path, "-o", str(out / "l.csv"),
                                        "--time-limit", "2"), (2,)))
    return runs + option_runs(directory, graph, plan)


def option_runs(directory: Path, graph: str, plan: str) -> list[Run]:
    """Bad options and bad output paths: refused (exit 2) before any work."""
    out = str(directory / "out" / "o.json")
    runs = []
    for opt, val in [("--time-limit", "inf"), ("--time-limit", "nan"), ("--time-limit", "-1"),
                     ("--time-limit", "0"), ("--workers", "0"), ("--seed", "-1"),
                     ("--seed", "9" * 5000), ("--budget", "-5"), ("--budget", "lots"),
                     ("--node-limit", "0"), ("--total-time-limit", "1e400")]:
        runs.append(Run(f"option: plan {opt} {val[:12]}",
                        ("plan", graph, "-o", out, opt, val), (2,)))
    for opt, val in [("--port", "70000"), ("--port", "-3"), ("--max-upload-mb", "nan"),
                     ("--max-upload-mb", "-1"), ("--max-upload-mb", "inf"),
                     ("--startup-time-limit", "inf")]:
        runs.append(Run(f"option: serve {opt} {val}", ("serve", opt, val), (2,)))
    runs.append(Run("option: execute --steps 0",
                    ("execute", graph, plan, "-o", out, "--steps", "0"), (2,)))
    runs.append(Run("option: trace --batch-size 0", ("trace", "mlp", "-b", "0"), (2,)))
    runs.append(Run("option: layout --time-limit inf",
                    ("layout", "docs/examples/small_dsa.csv", "-o", out, "--time-limit", "inf"),
                    (2,)))
    f = directory / "a-file"
    f.write_text("x")
    for k, kind in enumerate(("/dev/full", "missing directory", "a directory",
                              "below a file")):
        for j, make in enumerate((
                lambda t: ("plan", graph, "-o", t, "--no-progress"),
                lambda t: ("report", graph, plan, "-o", t),
                lambda t: ("layout", "docs/examples/small_dsa.csv", "-o", t),
                lambda t: ("execute", graph, plan, "-o", t),
                lambda t: ("execute", graph, plan, "-o", out, "--snapshot", t))):
            target = {"/dev/full": "/dev/full", "a directory": str(directory),
                      "below a file": str(f / "x.json"),
                      "missing directory": str(directory / f"no-{k}-{j}" / "x.json")}[kind]
            argv = make(target)
            # roam execute makes its report's directory, as it always did
            opt = "--snapshot" if "--snapshot" in argv else "-o"
            ok = (0,) if kind == "missing directory" and opt == "-o" and \
                argv[0] == "execute" else (2,)
            runs.append(Run(f"output: {argv[0]} {opt} {kind}", argv, ok))
    runs.append(Run("output: frontier --plans a file",
                    ("frontier", graph, "--plans", str(f), "--budgets", "2"), (2,)))
    runs.append(Run("output: bench --out a file",
                    ("bench", "--graphs", graph, "--out", str(f)), (2,)))
    runs.append(Run("output: serve --cache-dir a file", ("serve", "--cache-dir", str(f)), (2,)))
    return runs


def verdict(r: Result) -> str:
    """What is wrong with a result (``""``: nothing)."""
    if "Traceback" in r.stderr:
        return "traceback"
    if r.status not in r.run.ok_status:
        return f"exit status {r.status}, expected {r.run.ok_status}"
    if r.status == 2:
        lines = [ln for ln in r.stderr.splitlines() if "error:" in ln]
        if len(lines) != 1:
            return f"{len(lines)} error lines"
    if r.rss_mib > MAX_RSS_MIB:
        return f"peak memory {r.rss_mib:.0f} MiB"
    return ""
