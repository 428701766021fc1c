"""Every command over the fuzz corpus, as a user runs it (``python -m roam_core``): exit
status 2 with one error line for every bad input, option and output path, 1 from ``roam
check`` for a false plan, never a traceback, and at most 512 MiB of memory."""

from __future__ import annotations

import concurrent.futures as cf
from pathlib import Path

import pytest

from tests.fuzz.runner import Result, matrix, run_cli, verdict


def run_all(directory: Path, workers: int = 2, *, full: bool = False) -> list[Result]:
    """The runs of the matrix (``workers`` children at a time; a sample unless ``full``)."""
    runs = matrix(directory, full=full)

    def one(run: object) -> Result:
        status, err, rss, secs = run_cli(run.argv)  # type: ignore[attr-defined]
        return Result(run, status, err, rss, secs)  # type: ignore[arg-type]

    with cf.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, runs))


@pytest.mark.slow
def test_every_command_refuses_every_bad_input_in_one_line(tmp_path: Path) -> None:
    results = run_all(tmp_path)
    bad = [(r.run.case, " ".join(r.run.argv[:1]), verdict(r), r.stderr[-300:])
           for r in results if verdict(r)]
    assert not bad, f"{len(bad)} of {len(results)} runs went wrong: {bad[:10]}"


@pytest.mark.slow
def test_one_bad_graph_through_info(tmp_path: Path) -> None:
    """The fast tier's sample of the matrix: one input, one command."""
    p = tmp_path / "g.json"
    p.write_text('{"format": "roam-graph", "schema_version": 2, "ops": [], "tensors": [{"id"'
                 ': "x", "size_bytes": 9223372036854775808, "kind": "input"}]}')
    status, err, rss, _ = run_cli(("info", str(p)))
    assert status == 2
    assert "Traceback" not in err
    assert "size_bytes" in err
    assert rss < 512
