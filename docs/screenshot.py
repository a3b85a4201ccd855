"""The README's screenshots, taken from the real app: ``python -m docs.screenshot``.

Serves the app on a free 127.0.0.1 port with a fresh store (``bench.server.serve``), opens the
Playground in Debian's Chromium, runs MALA at its default on the donut (the red verdict of the
first five minutes), then HMC, and saves the animated view mid-play and the run's verdict as
``docs/playground.png`` and ``docs/verdict.png``. Needs /usr/bin/chromium and Playwright
(requirements-dev.txt); takes about a minute.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.server import ROOT, chromium, serve

LOAD_MS = 90_000  # the first page load imports torch in the server
RUN_MS = 180_000


def settle(page) -> None:
    """Wait until the script run that the last interaction started has finished."""
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=LOAD_MS)


def choose(page, label: str, option: str) -> None:
    box = page.locator('[data-testid="stSelectbox"]').filter(has_text=label).first
    box.click()
    page.keyboard.type(option)  # the list shows only its first options: filter it
    page.get_by_role("option", name=option, exact=True).click()
    settle(page)


def run_and_wait(page) -> None:
    """Press Run and wait for the run's verdict."""
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("Completed · verdict").first.wait_for(timeout=RUN_MS)
    settle(page)


def take(out: Path) -> list[Path]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        serve(Path(tmp) / "store", Path(tmp) / "log") as url,
        chromium(width=1400, height=900) as page,
    ):
        page.goto(url, timeout=LOAD_MS)
        page.get_by_text("Potential").first.wait_for(timeout=LOAD_MS)
        settle(page)
        choose(page, "Potential", "donut")
        choose(page, "Sampler", "mala")
        run_and_wait(page)
        verdict = page.get_by_text("Completed · verdict").first
        verdict.scroll_into_view_if_needed()
        shots = [out / "verdict.png"]
        page.screenshot(path=str(shots[0]))
        choose(page, "Sampler", "hmc")
        run_and_wait(page)
        player = page.frame_locator("iframe").first
        player.locator("#frame").wait_for(timeout=RUN_MS)
        player.locator("#restart").click()
        page.wait_for_timeout(2500)  # about 75 steps in: paths and arrows on the donut
        page.locator("iframe").first.scroll_into_view_if_needed()
        shots.append(out / "playground.png")
        page.screenshot(path=str(shots[1]))
        return shots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="folder for the PNGs")
    for path in take(parser.parse_args().out):
        print(path)


if __name__ == "__main__":
    main()
