"""The app modules' docstring examples run (``app/`` is outside pytest's doctest paths)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["app.analysis", "app.figures", "app.lazy", "app.memo",
                                  "app.planning", "app.raster"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0
    assert result.failed == 0
