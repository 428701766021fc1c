"""The registry of checkpointing baselines (roam_core.recompute.baselines)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from roam_core.formats.graph_io import load_graph
from roam_core.planner.budget import BudgetPlanner
from roam_core.planner.config import PlannerConfig
from roam_core.recompute.baselines import (
    BASELINES,
    baseline_drop_set,
    block_baseline,
    find_blocks,
    register_baseline,
)
from tests.paths import SAMPLE_DIR

SAMPLES = SAMPLE_DIR


@pytest.fixture
def registry() -> Iterator[None]:
    """Registrations made by a test are undone after it."""
    before = dict(BASELINES)
    yield
    BASELINES.clear()
    BASELINES.update(before)


def test_the_registry_holds_the_policies_in_report_order() -> None:
    assert tuple(BASELINES) == ("none", "checkpoint_blocks", "checkpoint_every_2",
                                "sqrt_segments", "checkpoint_sequential",
                                "selective_attention")
    for name, b in BASELINES.items():
        assert b.name == name
        assert b.description
        assert "\n" not in b.description


@pytest.mark.slow
def test_a_block_policy_is_one_function_and_one_registration(registry: None) -> None:
    """Checkpoint every 3rd block, registered here: every consumer of the registry sees it
    (the drop sets, roam's portfolio), and it drops a part of what every block drops."""
    @block_baseline("checkpoint_every_3", "checkpoint every 3rd block")
    def _every_3rd(blocks: tuple[str, ...]) -> list[list[str]]:
        return [[b] for i, b in enumerate(blocks) if i % 3 == 0]

    g = load_graph(SAMPLES / "resnet50-b8-steady.json.gz")
    assert len(find_blocks(g)) >= 6
    third = set(baseline_drop_set(g, "checkpoint_every_3") or ())
    every = set(baseline_drop_set(g, "checkpoint_blocks") or ())
    assert third
    assert third < every
    assert list(BASELINES)[-1] == "checkpoint_every_3"
    bp = BudgetPlanner(g, PlannerConfig(workers=1, solve_layout=False), portfolio=True)
    assert dict(bp.other_candidates())["checkpoint_every_3"] == tuple(sorted(third))


def test_a_policy_applies_only_where_it_can(registry: None) -> None:
    register_baseline("never", "never applies", lambda graph, why: None)
    g = load_graph(SAMPLES / "mlp-b8-steady.json.gz")
    assert baseline_drop_set(g, "never") is None
    assert baseline_drop_set(g, "none") == ()


def test_names_are_checked(registry: None) -> None:
    g = load_graph(SAMPLES / "mlp-b8-steady.json.gz")
    with pytest.raises(ValueError, match="unknown baseline 'nope'"):
        baseline_drop_set(g, "nope")
    with pytest.raises(ValueError, match="already registered"):
        register_baseline("none", "again", lambda graph, why: ())
