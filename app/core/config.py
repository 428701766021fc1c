"""Per-app settings that the callbacks read."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_CONFIG", "AppConfig"]


@dataclass(frozen=True, slots=True)
class AppConfig:
    """Per-app settings the callbacks read (bound when the views register; also kept as
    ``app.server.config["ROAM"]``).  No module-level state: two apps in one process keep
    their own limits."""

    max_upload_bytes: int = 200 * 2**20
    auto_plan_max_ops: int = 1000


DEFAULT_CONFIG = AppConfig()
