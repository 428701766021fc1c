"""Imported by every job of the tests' app server: installs the test doubles there."""

from tests.app.job_doubles import install

install()
