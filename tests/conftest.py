"""Shared pytest set-up: the hypothesis profile used by every property test.

``deadline=None`` (CI machines are slow and shared); ``max_examples`` comes from the
environment variable ``HYPOTHESIS_MAX_EXAMPLES`` (default 30) so a long soak run is one
``HYPOTHESIS_MAX_EXAMPLES=1000 pytest ...`` away.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "roam",
    deadline=None,
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "30")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("roam")
