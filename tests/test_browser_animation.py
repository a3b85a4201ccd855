"""The animated view and runs side by side, in a real browser (Chromium through Playwright): the
player advances on its own at its speed and answers Pause, Step and Back at once (client-side,
its frame counter read from the page), and Compare's two runs execute at the same time."""

from __future__ import annotations

import re
import time

import pytest
from browser import browser_page, screenshot, server  # noqa: F401  (fixtures)
from playwright.sync_api import expect
from test_browser import LOAD_MS, RUN_MS, assert_clean, choose, settle

from runs.store import Store

pytestmark = pytest.mark.browser


def frame_of(player) -> int:
    return int(player.locator("#frame").get_attribute("data-frame"))


def test_the_playground_plays_the_first_steps_with_every_proposal(server, browser_page):  # noqa: F811
    page = browser_page
    page.goto(server, timeout=LOAD_MS)
    page.get_by_text("Potential").first.wait_for(timeout=LOAD_MS)
    settle(page)
    choose(page, "Potential", "donut")
    settle(page)
    choose(page, "Sampler", "hmc")
    settle(page)
    page.get_by_role("button", name="Run", exact=True).click()
    player = page.frame_locator("iframe").first
    player.locator("#frame").wait_for(timeout=RUN_MS)  # drawn from the first traced steps
    # drawn again as the trace doubles, then whole: the run's first 1000 steps
    expect(player.locator("#frame")).to_have_text(re.compile(r"of 1000$"), timeout=RUN_MS)
    player.locator("#restart").click()
    # it plays at 30 steps a second by default: in 2 s it advances ~60 steps (a loaded CI
    # machine may draw fewer frames, but the steps follow the clock, not the frames)
    # the page's clock runs on while each read crosses to the browser, so the steps between two
    # reads lie between 30/s over the time between the reads and 30/s over both reads' span
    before = time.perf_counter()
    first = frame_of(player)
    after_first = time.perf_counter()
    time.sleep(2.0)
    before_last = time.perf_counter()
    advanced = frame_of(player) - first
    span = time.perf_counter() - before
    assert 0.5 * 30 * (before_last - after_first) <= advanced <= 1.5 * 30 * span, (advanced, span)
    player.locator("#play").click()  # pause
    paused = frame_of(player)
    time.sleep(0.5)
    assert frame_of(player) == paused
    player.locator("#step").click()
    # read at once after the click: a server round trip (a rerun) could not have redrawn it yet
    assert frame_of(player) == paused + 1
    player.locator("#back").click()
    player.locator("#back").click()
    assert frame_of(player) == paused - 1
    assert "of 1000" in player.locator("#frame").inner_text()  # the steps traced by default
    screenshot(page, "animation")
    assert_clean(page)


def test_compares_runs_execute_side_by_side(server, browser_page, tmp_path):  # noqa: F811
    page = browser_page
    page.goto(server + "/compare", timeout=LOAD_MS)
    page.get_by_text("Samplers").first.wait_for(timeout=LOAD_MS)
    settle(page)
    steps = page.get_by_role("textbox", name="steps", exact=True)
    steps.fill("20000")  # long enough to overlap: ~20 s each here
    steps.press("Enter")
    settle(page)
    page.get_by_text("Run anyway").first.click()  # over the 60 s budget in all: confirmed
    settle(page)
    page.get_by_role("button", name="Run all", exact=True).click()
    store, both, deadline = Store(tmp_path / "store"), False, time.monotonic() + RUN_MS / 1000
    while not both and time.monotonic() < deadline:
        running = store.list("running")
        both = len(running) >= 2
        if not running and len(store.list()) >= 2 and not store.list("queued"):
            break  # both ended before they were seen together
        time.sleep(0.05)
    assert both, [(r.id, r.status) for r in store.list()]
