"""Shared by the browser tests: ``streamlit run app.py`` on a free 127.0.0.1 port with its own
store, and Debian's Chromium driven by Playwright (never ``playwright install``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from jobs.pool import stop_supervisor
from jobs.store import Store

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
ARTIFACTS = ROOT / "tests" / "artifacts"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    """The app's URL; the server, its worker pool and its store go away afterwards."""
    need_browser()
    port = _free_port()
    env = {**os.environ, "BASIN_HOME": str(tmp_path / "store"), "PYTHONPATH": str(ROOT)}
    log = open(tmp_path / "streamlit.log", "wb")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app.py",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.headless",
            "true",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
                if reply.status == 200:
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            log.close()
            raise AssertionError((tmp_path / "streamlit.log").read_text()[-3000:])
        time.sleep(0.25)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(10)
        log.close()
        stop_supervisor(Store(tmp_path / "store"))


@pytest.fixture
def browser_page():
    """A headless Chromium page; console errors are collected in ``page.console_errors``."""
    need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.console_errors = []
        page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
        page.on("pageerror", lambda e: page.console_errors.append(str(e)))
        try:
            yield page
        finally:
            browser.close()


def screenshot(page, name: str) -> Path:
    """Saved under tests/artifacts/ (kept by CI as the test's artifact)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
