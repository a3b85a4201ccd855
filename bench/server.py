"""``streamlit run app.py`` on a free 127.0.0.1 port with its own store, and Debian's Chromium
driven by Playwright: shared by the browser tests, ``python -m bench app`` and
``python -m docs.screenshot``."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from runs.pool import stop_supervisor
from runs.store import Store

ROOT = Path(__file__).resolve().parents[1]  # the repository: bench/ is at its top
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(home: Path, log: Path, timeout: float = 60):
    """The app's URL; the server and the worker pool it started stop afterwards."""
    port = free_port()
    env = {**os.environ, "BASIN_HOME": str(home)}  # from ROOT, streamlit finds every package
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    command += ["--server.address", "127.0.0.1", "--server.headless", "true"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout
            while not _healthy(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"streamlit did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.25)
            yield url
        finally:
            process.terminate()
            process.wait(10)
            stop_supervisor(Store(home))


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 1000):
    """A headless Chromium page; console errors collect in ``page.console_errors``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.console_errors = []
        page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
        page.on("pageerror", lambda e: page.console_errors.append(str(e)))
        page.failed_requests = []
        page.on("requestfailed", lambda r: page.failed_requests.append(r.url))
        page.on("response", lambda r: r.status >= 400 and page.failed_requests.append(r.url))
        try:
            yield page
        finally:
            browser.close()
