"""The torch-free name lists agree with the torch-only packages that own the names."""

from __future__ import annotations

import subprocess
import sys

import pytest

from roam_core.base.catalog import ZOO_NAMES


def test_zoo_names_are_the_zoo() -> None:
    zoo = pytest.importorskip("roam_core.zoo")
    assert sorted(ZOO_NAMES) == sorted(zoo.ZOO)
    assert len(set(ZOO_NAMES)) == len(ZOO_NAMES)


def test_catalog_never_imports_torch() -> None:
    code = "import sys, roam_core.base.catalog; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
