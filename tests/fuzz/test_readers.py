"""Every reader over the fuzz corpus: a one-line error of the reader's type for every bad
input, the validator's violations for every false plan, never another exception, never a
blocked read, never a pickle's code run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from roam_core.base.errors import GraphError, PlanFormatError, RoamError, SnapshotError
from roam_core.formats.limits import FileLimits
from tests.fuzz.corpus import BASE_GRAPH, Case, cases, false_plan, write_case

LIMITS = FileLimits(max_json_bytes=16 << 20)
_ERRORS = {"graph": GraphError, "plan": PlanFormatError, "csv": PlanFormatError,
           "snapshot": SnapshotError}
PWNED = Path("/tmp/roam-fuzz-pwned")


def read(case: Case, path: str) -> object:
    """The reader of the case's kind, on the file at ``path``."""
    from roam_core.formats.dsa_csv import load_problem
    from roam_core.formats.graph_io import load_graph
    from roam_core.formats.plan_io import load_plan
    from roam_core.formats.snapshot_analysis import analyze_snapshot

    if case.kind == "graph":
        return load_graph(path, limits=LIMITS)
    if case.kind == "plan":
        return load_plan(path, load_graph(BASE_GRAPH), limits=LIMITS)
    if case.kind == "csv":
        return load_problem(path, limits=LIMITS)
    return analyze_snapshot(path, max_bytes=16 << 20)


def _sampled(selected: list[Case], every: int = 6) -> list[object]:
    """The cases as parameters: one in ``every`` in the fast tier, the others ``slow``."""
    return [pytest.param(c, id=c.name, marks=() if i % every == 0 else pytest.mark.slow)
            for i, c in enumerate(selected)]


@pytest.mark.parametrize("case", _sampled([c for c in cases() if c.expect == "refuse"]))
def test_every_bad_input_is_refused_in_one_line(case: Case, tmp_path: Path) -> None:
    PWNED.unlink(missing_ok=True)
    path = write_case(case, tmp_path)
    with pytest.raises(RoamError) as e:
        read(case, path)
    assert isinstance(e.value, _ERRORS[case.kind]), type(e.value)
    msg = str(e.value)
    assert msg
    assert "\n" not in msg
    assert len(msg) < 1000
    assert not PWNED.exists()


@pytest.mark.parametrize("case", [c for c in cases() if c.expect == "accept"],
                         ids=lambda c: c.name)
def test_odd_but_harmless_inputs_are_read(case: Case, tmp_path: Path) -> None:
    assert read(case, write_case(case, tmp_path)) is not None


@pytest.mark.parametrize("case", _sampled([c for c in cases(("plan",))
                                           if c.expect == "false"], 3))
def test_every_false_plan_is_caught_by_the_validator(case: Case) -> None:
    from roam_core.formats.graph_io import load_graph
    from roam_core.oracle.validate import check_plan

    graph = load_graph(BASE_GRAPH)
    bad = check_plan(graph, false_plan(case))
    assert bad, "a false plan passed the validator"


def test_the_base_plan_is_valid_and_every_figure_true() -> None:
    from roam_core.formats.graph_io import load_graph
    from roam_core.oracle.validate import check_plan
    from tests.fuzz.corpus import base_plan

    assert check_plan(load_graph(BASE_GRAPH), base_plan()) == []


def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    from roam_core.formats.graph_io import load_graph

    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(GraphError, match="not a regular file"):
        load_graph(fifo)
