"""Refactoring guard: every committed graph plans to the same order, offsets and peaks.

``tests/data/plan_golden.json`` holds the fingerprints :mod:`tests.plan_golden` wrote
(hashes of the order, the offsets and the recomputed ops; peak, arena and bound in bytes) for
every sample graph, the GPT2-XL graphs, and budget plans on the steady graphs.  A change that
is meant to change plans regenerates it (``python -m tests.plan_golden --write --xl``) and
says why in its commit.
"""

from __future__ import annotations

import json

import pytest

from tests import plan_golden

pytestmark = pytest.mark.slow


def _check(xl: bool) -> None:
    pytest.importorskip("torch")
    want = json.loads(plan_golden.GOLDEN.read_text())
    got = plan_golden.compute(xl=xl)
    if not xl:
        want = {k: v for k, v in want.items() if not k.startswith("gpt2-xl")}
    assert set(got) == set(want)
    different = {k: (want[k], got[k]) for k in got if got[k] != want[k]}
    assert different == {}


def test_every_committed_graph_plans_exactly_as_recorded() -> None:
    """The sample graphs and budget plans (the planner's every path, in the suite)."""
    _check(xl=False)


@pytest.mark.full_matrix
def test_the_gpt2_xl_graphs_plan_exactly_as_recorded() -> None:
    """The same paths on GPT2-XL's graphs (100 s): ``./dev.sh matrix``, and ``python -m
    tests.plan_golden --check --xl`` after a change to planning code."""
    _check(xl=True)
