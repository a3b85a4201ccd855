"""Fixtures shared by every test file."""

from apptest import home  # noqa: F401  (a fixture: a temporary store for the app tests)
