"""Shared by the browser tests: the app served on a free 127.0.0.1 port with its own store
(``bench.server``), Debian's Chromium through Playwright, and screenshots kept as artifacts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.server import CHROMIUM, ROOT, chromium, serve

ARTIFACTS = ROOT / "tests" / "artifacts"


def need_browser():
    """Skip without Chromium or Playwright, unless BASIN_REQUIRE_BROWSER=1 (CI): then fail."""
    missing = None
    if not Path(CHROMIUM).exists():
        missing = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "Playwright for Python is not installed"
    if missing:
        if os.environ.get("BASIN_REQUIRE_BROWSER") == "1":
            pytest.fail(missing)
        pytest.skip(missing)


@pytest.fixture
def server(tmp_path):
    need_browser()
    with serve(tmp_path / "store", tmp_path / "streamlit.log") as url:
        yield url


@pytest.fixture
def browser_page():
    need_browser()
    with chromium() as page:
        yield page


def screenshot(page, name: str) -> Path:
    """The viewport (Streamlit scrolls inside its own container), saved under tests/artifacts/
    (kept by CI as the test's artifact)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path
