"""Fixtures shared by every test file."""

import sys

import pytest
from apptest import home  # noqa: F401  (a fixture: a temporary store for the app tests)


@pytest.fixture(autouse=True)
def _keep_main_module():
    """AppTest runs a page as ``__main__`` and leaves it there; a later test that spawns a
    process would then make the child run that page (and start a worker pool) on import."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main
