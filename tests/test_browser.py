"""The app in a real browser: ``streamlit run app.py`` on a free 127.0.0.1 port with its own
store, driven through Debian's Chromium (Playwright); screenshots land in tests/artifacts/."""

from __future__ import annotations

import re
import time

import pytest
from browser import browser_page, screenshot, server  # noqa: F401  (fixtures)
from playwright.sync_api import Error as PlaywrightError

LOAD_MS = 90_000  # the first page load imports torch in the server
RUN_MS = 180_000
pytestmark = pytest.mark.browser


def choose(page, label: str, option: str) -> None:
    """Pick ``option`` in the Streamlit selectbox labelled ``label``, and wait until the box
    shows it: on a loaded machine a rerun can redraw the list under the click, which is then
    lost and the list left open (seen in CI), so the pick is made again."""
    box = page.locator('[data-testid="stSelectbox"]').filter(has_text=label).first
    for _ in range(3):
        box.click()
        page.get_by_role("option", name=option, exact=True).click()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if option in _shown(box):
                return
            page.wait_for_timeout(200)
        page.keyboard.press("Escape")  # close the list left open
    raise AssertionError(f"{label}: {option} not taken ({_shown(box)!r})")


def _shown(box) -> str:
    """A selectbox's label and its shown value (the value sits in its input)."""
    values = box.locator("input").evaluate_all("(xs) => xs.map((x) => x.value)")
    return box.inner_text() + " " + " ".join(values)


def fill_number(page, label: str, value: int) -> None:
    field = page.get_by_role("spinbutton", name=label, exact=True)
    field.fill(str(value))
    field.press("Enter")


def settle(page) -> None:
    """Wait until the script run that the last interaction started has finished."""
    page.wait_for_timeout(300)
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=LOAD_MS)


def assert_clean(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0
    errors = page.locator('[data-testid="stAlertContentError"]')
    assert errors.filter(has_not_text="verdict").count() == 0  # a red verdict is a result
    assert page.console_errors == [], (page.console_errors, page.failed_requests)


def test_playground_runs_mala_on_the_funnel_and_shows_its_histogram(server, browser_page):  # noqa: F811
    page = browser_page
    page.goto(server, timeout=LOAD_MS)
    page.get_by_text("Potential").first.wait_for(timeout=LOAD_MS)
    settle(page)
    choose(page, "Potential", "funnel")
    settle(page)
    choose(page, "Sampler", "mala")
    settle(page)
    page.get_by_role("textbox", name="steps", exact=True).fill("500")
    page.get_by_role("textbox", name="steps", exact=True).press("Enter")
    settle(page)
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("Completed · verdict").first.wait_for(timeout=RUN_MS)
    settle(page)
    # the marginal histogram of v against its exact N(0, 9), among the run's figures
    histogram = page.locator(".js-plotly-plot").filter(has_text=re.compile("exact")).first
    histogram.wait_for()
    histogram.scroll_into_view_if_needed()
    shown = _shown(page.locator('[data-testid="stSelectbox"]').filter(has_text="Run shown"))
    assert "funnel" in shown and "mala" in shown, shown
    screenshot(page, "playground-funnel-mala")
    assert_clean(page)


def test_networks_page_shows_a_live_llc_for_a_tiny_dln(server, browser_page):  # noqa: F811
    page = browser_page
    page.goto(server, timeout=LOAD_MS)  # as a user arrives; a deep link makes Streamlit probe
    page.get_by_text("Potential").first.wait_for(timeout=LOAD_MS)  # its base path with 404s
    settle(page)
    page.locator('[data-testid="stSidebarNav"]').get_by_text("Networks & LLC").click()
    page.get_by_text("Network", exact=True).first.wait_for(timeout=LOAD_MS)
    settle(page)
    choose(page, "Network", "dln")
    settle(page)
    choose(page, "w0", "truth")  # the generating point: no training before the chains start
    settle(page)
    fill_number(page, "chains", 2)
    fill_number(page, "steps", 20_000)
    fill_number(page, "burn-in", 0)
    settle(page)
    page.get_by_role("button", name="Run", exact=True).click()
    # a live value: the estimate's figure, drawn from the flushes while the run goes on
    estimate = page.locator(".js-plotly-plot").filter(has_text="LLC estimate").first
    estimate.wait_for(timeout=RUN_MS)
    settle(page)
    for attempt in range(3):  # the live fragment redraws the figure: it may be swapped mid-scroll
        try:
            estimate.scroll_into_view_if_needed()
            break
        except PlaywrightError:
            if attempt == 2:
                raise
            settle(page)
    screenshot(page, "networks-dln-llc")
    assert_clean(page)


def test_a_bookmarked_page_opened_first_runs_inside_the_app(server, browser_page):  # noqa: F811
    """A page's URL opened on a fresh server (a bookmark after a restart) still goes through
    app.py: its navigation, its sidebar and the worker pool that resumes the queue. (Streamlit
    runs a ``pages/`` directory beside the entry script as v1 pages, bypassing app.py, until
    app.py has called st.navigation once: without ``ui.legacy_guard`` at the top of each page,
    this session got "app, compare, ..." and no pool. The deep link makes Streamlit probe its
    base path with 404s: the console is not checked.)"""
    page = browser_page
    page.goto(f"{server}/runs", timeout=LOAD_MS)
    page.get_by_text("Every run in the store").wait_for(timeout=LOAD_MS)
    settle(page)
    nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
    assert "Networks & LLC" in nav and "app" not in nav.split(), nav
    page.locator('[data-testid="stSidebar"]').get_by_text("Workers").wait_for()
    assert page.locator('[data-testid="stException"]').count() == 0


def test_a_run_opened_on_the_runs_page_stays_open_when_its_status_changes(
    server,  # noqa: F811
    browser_page,  # noqa: F811
    tmp_path,
):
    """The browser matches a multiselect's selection on its labels: with the status in the
    label, a run that finished or was cancelled closed under the user's eyes."""
    from runs.spec import parse_spec
    from runs.store import Store

    store = Store(tmp_path / "store")  # the server's (browser.server)
    spec = {"target": {"name": "banana"}, "sampler": {"name": "mala"}, "steps": 20_000_000}
    run_id = store.create(parse_spec({**spec, "chains": 4, "thin": 1000}).model_dump(mode="json"))
    page = browser_page
    page.goto(f"{server}/runs", timeout=LOAD_MS)
    page.get_by_text("Every run in the store").wait_for(timeout=LOAD_MS)
    settle(page)
    page.locator('[data-testid="stMultiSelect"]').filter(has_text="Open runs").click()
    page.get_by_role("option", name=re.compile(run_id)).click()
    page.keyboard.press("Escape")
    heading = page.get_by_text(f"{run_id}: banana / mala")
    heading.wait_for(timeout=LOAD_MS)
    deadline = time.monotonic() + 120
    while store.get(run_id).status != "running" and time.monotonic() < deadline:
        time.sleep(0.2)  # the app's worker pool takes it
    store.request_cancel(run_id)
    while store.get(run_id).status != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert store.get(run_id).status == "cancelled"
    page.wait_for_timeout(5000)  # two of the page's 2-s refreshes
    assert heading.is_visible()
    screenshot(page, "runs-open-after-cancel")
