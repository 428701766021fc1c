"""The app tests' private cache fixture, for the upload fuzz tests."""

from tests.app.conftest import cache_dir

__all__ = ["cache_dir"]
