"""The order in which the test workers take the test files: the longest first.

``./dev.sh test`` hands whole files to its workers (``--dist loadfile``) in the order they
were collected (``--no-loadscope-reorder``; xdist would otherwise start with the files that
hold the most tests, which leaves the long files of few slow tests for the end, where one
of them decides when the suite ends).  Starting with the longest files lets the short ones
fill the workers' ends, so that they finish together.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

#: The longest files (12 CPU s or more), longest first: one run of the whole suite on 2
#: workers with one torch thread each (2 cores, 5 December 2026; docs/testing.md).  Every
#: other file follows, in collection order.  A stale entry only costs balance; a missing
#: file fails tests/test_harness.py.
LONGEST_FIRST: tuple[str, ...] = (
    "tests/app/test_browser_newcomer.py",
    "tests/app/test_browser.py",
    "tests/roam_core/runtime/test_ranks.py",
    "tests/roam_core/planner/test_feasibility.py",
    "tests/roam_core/commands/test_gpu_check.py",
    "tests/roam_core/zoo/test_fit_sweep.py",
    "tests/roam_core/runtime/test_checkpoint_policy.py",
    "tests/roam_core/planner/test_plan_golden.py",
    "tests/app/test_browser_budget.py",
    "tests/roam_core/oracle/test_proven_bounds.py",
    "tests/roam_core/runtime/test_replay_models.py",
    "tests/roam_core/runtime/test_execute_accumulation.py",
    "tests/roam_core/runtime/test_train_property.py",
    "tests/roam_core/recompute/test_recompute.py",
    "tests/roam_core/zoo/test_autosac.py",
    "tests/roam_core/base/test_executors.py",
    "tests/roam_core/runtime/test_fp16_loops.py",
    "tests/roam_core/planner/test_stage_budget.py",
    "tests/roam_core/runtime/test_merged_casts_runs.py",
    "tests/roam_core/recompute/test_recompute_windows.py",
    "tests/roam_core/runtime/test_replay.py",
    "tests/roam_core/zoo/test_hf_families.py",
    "tests/roam_core/runtime/test_recompute_rng.py",
    "tests/roam_core/zoo/test_min_cut.py",
)


def file_of(item: pytest.Item) -> str:
    """The test file of ``item`` as xdist's ``loadfile`` groups it (its node id's path)."""
    return item.nodeid.split("::", 1)[0]


def longest_first(items: Sequence[pytest.Item],
                  longest: Sequence[str] = LONGEST_FIRST) -> list[pytest.Item]:
    """``items`` with the files of ``longest`` first, in its order, then every other file in
    the order collected; the tests of one file keep their order."""
    rank = {f: i for i, f in enumerate(longest)}
    return sorted(items, key=lambda item: rank.get(file_of(item), len(rank)))
