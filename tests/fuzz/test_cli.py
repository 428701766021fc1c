"""Every command over the fuzz corpus: exit status 2 with one error line for every bad input,
option and output path, 1 from ``roam check`` for a false plan, never a traceback, and at
most 512 MiB of memory.

The suite runs the sample of :func:`~tests.fuzz.runner.matrix` (one graph and one plan of
each kind of bad input through every command, every other case through its reader's command,
every option and output path) in this process through ``roam_core.cli.main``, and a few runs
as a user starts them (``python -m roam_core``, peak memory measured).  The full matrix, every
case through every command, is ``./dev.sh matrix`` (in-process here, marker ``full_matrix``)
and
``benchmarks/fuzz_bench.py`` (every run a child process, peak memory of each).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz.corpus import BASE_GRAPH, FUZZ_ENV, cases, write_case
from tests.fuzz.runner import (
    SAMPLE_GRAPHS,
    SAMPLE_PLANS,
    Result,
    Run,
    matrix,
    run_cli,
    run_in_process,
    verdict,
)


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> None:
    """The CLI's environment of the fuzz runs, and a ``roam serve`` that gets past its
    checks fails the run (it would otherwise serve for ever); the app cache that ``roam
    serve`` selects is private to the test and the previous one restored after it."""
    waitress = pytest.importorskip("waitress")
    for key, value in FUZZ_ENV.items():
        monkeypatch.setenv(key, value)

    def started(*_: object, **__: object) -> None:
        raise AssertionError("roam serve started a server")

    monkeypatch.setattr(waitress, "serve", started)


def run_matrix(directory: Path, *, full: bool) -> list[Result]:
    """The runs of the matrix (the suite's sample unless ``full``), in this process."""
    return [Result(run, *run_in_process(run.argv)) for run in matrix(directory, full=full)]


def _wrong(results: list[Result]) -> list[tuple[str, str, str, str]]:
    return [(r.run.case, " ".join(r.run.argv[:1]), verdict(r), r.stderr[-300:])
            for r in results if verdict(r)]


def test_the_sample_names_cases_of_the_corpus() -> None:
    """A renamed case would drop out of the sample unnoticed."""
    names = {c.name for c in cases()}
    assert set(SAMPLE_GRAPHS) <= names
    assert set(SAMPLE_PLANS) <= names


@pytest.mark.slow
def test_every_command_refuses_every_bad_input_in_one_line(tmp_path: Path,
                                                           in_process: None) -> None:
    results = run_matrix(tmp_path, full=False)
    commands = {r.run.argv[0] for r in results}
    assert commands >= {"info", "plan", "check", "report", "frontier", "execute", "bench",
                        "serve", "layout", "trace"}
    bad = _wrong(results)
    assert not bad, f"{len(bad)} of {len(results)} runs went wrong: {bad[:10]}"


@pytest.mark.full_matrix
def test_full_matrix_every_case_through_every_command(tmp_path: Path, in_process: None) -> None:
    results = run_matrix(tmp_path, full=True)
    bad = _wrong(results)
    assert not bad, f"{len(bad)} of {len(results)} runs went wrong: {bad[:10]}"


@pytest.mark.slow
def test_in_process_runs_report_a_traceback_and_argparse_exits(tmp_path: Path,
                                                               in_process: None) -> None:
    """The in-process runner sees what a user would: argparse's exit status, and an
    exception escaping ``main`` as a traceback (the verdict's first check)."""
    status, err, _, _ = run_in_process(("plan", str(BASE_GRAPH), "--time-limit", "nan"))
    assert status == 2
    assert "error:" in err
    status, err, _, _ = run_in_process(("serve", "--graph", str(BASE_GRAPH), "--startup-method",
                                        "eager", "--cache-dir", str(tmp_path), "--port", "1"))
    assert status != 0
    assert "Traceback" in err
    assert "roam serve started a server" in err


def _case_path(name: str, directory: Path) -> str:
    return write_case(next(c for c in cases() if c.name == name), directory)


#: Runs as a user starts them, peak memory measured: the inputs built to exhaust memory or
#: the stack (gzip bombs of each reader, nesting past the recursion limit) and a number past
#: int64, each through the command that reads it.
MEASURED = {
    "graph: size_bytes 2**63": lambda d: ("info", _case_path("graph: size_bytes 2**63", d)),
    "graph: gzip bomb": lambda d: ("info", _case_path("graph: gzip bomb (32 MiB of zeros)", d)),
    "graph: nested 100k deep": lambda d: ("plan", _case_path("graph: nested 100k deep", d),
                                          "-o", str(d / "p.json"), "--no-progress"),
    "plan: gzip bomb": lambda d: ("check", str(BASE_GRAPH), _case_path("plan: gzip bomb", d)),
    "csv: gzip bomb": lambda d: ("layout", _case_path("csv: gzip bomb", d), "-o",
                                 str(d / "l.csv")),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MEASURED))
def test_a_child_refuses_in_one_line_and_small_memory(name: str, tmp_path: Path) -> None:
    argv = MEASURED[name](tmp_path)
    status, err, rss, secs = run_cli(argv)
    result = Result(Run(name, argv, (2,)), status, err, rss, secs)
    assert verdict(result) == "", (verdict(result), err[-300:])
    if name == "graph: size_bytes 2**63":
        assert "size_bytes" in err
