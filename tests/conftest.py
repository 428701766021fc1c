"""Shared pytest set-up: the hypothesis profile used by every property test, and the
``minimalloc`` fixture (the MiniMalloc CSVs of the shared DSA data, or a skip).

``deadline=None`` (CI machines are slow and shared); ``max_examples`` comes from the
environment variable ``HYPOTHESIS_MAX_EXAMPLES`` (default 30) so a long soak run is one
``HYPOTHESIS_MAX_EXAMPLES=1000 pytest ...`` away.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.builders import shared_data_dir

settings.register_profile(
    "roam",
    deadline=None,
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "30")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("roam")


@pytest.fixture(scope="session")
def minimalloc() -> Path:
    """The folder of MiniMalloc's CSV instances (``<repo>/../shared/dsa/minimalloc``, see
    :func:`tests.builders.shared_data_dir`); the test is skipped when it is absent."""
    found = shared_data_dir("dsa/minimalloc")
    if found is None:
        pytest.skip("MiniMalloc CSVs not found: put the shared data at <repo>/../shared/dsa "
                    "(or set ROAM_SHARED_DIR)")
    return found
