"""Fixtures and settings shared by every test file."""

import os
import shutil
import sys
import tempfile

import pytest
from apptest import home  # noqa: F401  (a fixture: a temporary store for the app tests)


def pytest_configure(config):
    """Under pytest-xdist, each worker's torch gets its share of the cores: two workers with two
    threads each on a 2-core machine would only contend (a small model's eager step gains
    nothing from a second thread). Compiled chunks go to a cache of the session's own
    (samplers.cache), never the user's ~/.cache/basin; processes the tests start inherit it."""
    if "BASIN_CACHE" not in os.environ:
        os.environ["BASIN_CACHE"] = config._basin_cache = tempfile.mkdtemp(prefix="basin-cache-")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def pytest_unconfigure(config):
    """The session's cache goes with it (xdist's workers share their controller's)."""
    made = getattr(config, "_basin_cache", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """The slow files first: with ``--dist loadfile`` a long file that starts last leaves the
    other worker idle at the end. Within a file, the order stays as written."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: files keep their order


@pytest.fixture(autouse=True)
def _keep_main_module():
    """AppTest runs a page as ``__main__`` and leaves it there; a later test that spawns a
    process would then make the child run that page (and start a worker pool) on import."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main
