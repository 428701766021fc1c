"""The app modules' docstring examples run (``app/`` is outside pytest's doctest paths)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", [
    "app.analysis.planner", "app.analysis.settings", "app.core.formatting", "app.core.memo",
    "app.figures.axes", "app.figures.raster", "app.services.figure_cache",
    "app.services.selection", "app.views.curves.figure", "app.views.lazy",
    "app.views.linking.data", "app.views.live.data", "app.views.planning.model",
    "app.views.search.model", "app.views.tree.model", "app.views.verify.data",
    "app.views.walkthrough.model", "app.analysis.modules", "app.analysis.layout_view",
    "app.views.explain.model", "app.views.use_plan.model", "app.views.casts"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0
    assert result.failed == 0
