"""The plan-settings form has one parser, used by the Plan card, Budget and What fits."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.analysis.settings import PlanSettings, settings_from_form
from app.core import state
from app.views.budget import view as budget_view
from app.views.fit import view as fit_view
from app.views.planning import view as planning_view
from roam_core.base.errors import ConfigError
from tests.builders import two_param_step

WORDS = "time limit must be more than 0 s (got -5 s)"


def test_empty_fields_take_one_and_bad_values_are_refused_in_words() -> None:
    assert settings_from_form(None, None, "", 3, 256.0) == PlanSettings("roam", 1.0, 1, 3, 256)
    with pytest.raises(ConfigError, match=r"workers must be at least 1 \(got 0\)"):
        settings_from_form("roam", 5, 60, 0, 512)


def test_the_plan_settings_form_is_read_one_way_everywhere(cache_dir: Path) -> None:
    """The Plan card, the Budget view and What fits read the form with one parser: the same
    words for a bad value, wherever it is typed."""
    assert planning_view.settings_message("roam", -5, 60, 1, 512) == f"Settings: {WORDS}"
    _, msg = fit_view.fit_job(print, 1, "mlp", "1", "", "auto", "none", 1, -5, 60, 1, 512)
    assert msg == f"Sweep failed: {WORDS}"
    gk = state.put_graph(two_param_step())
    _, msg = budget_view.frontier_job(print, 1, {"key": gk}, 8, [], "roam", -5, 60, 1, 512)
    assert msg == f"Frontier failed: {WORDS}"
    fig, rows, notes = budget_view.render_frontier(None, {"key": gk}, None, 8, [], "roam", -5,
                                                   60, 1, 512)
    assert (rows, notes) == ([], [])
    assert fig.layout.annotations[0].text.startswith("No frontier yet")


def test_no_view_parses_the_form_by_itself() -> None:
    """The views pass the form's values to settings_from_form, never to PlanSettings."""
    import inspect

    for view in (planning_view, budget_view, fit_view):
        assert "PlanSettings(" not in inspect.getsource(view), view.__name__
