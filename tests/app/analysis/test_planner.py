"""The planner door: every baseline is a valid order with a layout."""

from __future__ import annotations

import pytest

from app.analysis import planner, settings
from roam_core.model.samples import tiny_train_step
from roam_core.oracle.simulate import lifetimes


@pytest.mark.parametrize("method", [m for m, _ in settings.BASELINE_METHODS])
def test_baselines_are_valid_orders_with_a_layout(method: str) -> None:
    from roam_core.oracle.validate import check_order

    g = tiny_train_step()
    order, label = planner.baseline_order(g, method)
    assert check_order(g, order) == []
    assert "unknown" not in label
    blocks, _, how = planner.baseline_layout(g, order)
    assert how
    assert {b.tensor_id for b in blocks} >= set(lifetimes(g, order))
