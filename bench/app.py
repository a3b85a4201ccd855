"""``python -m bench app``: how the app feels, measured.

(a) Click to first live point, end to end in a real browser: ``streamlit run app.py`` with an
    empty store, Debian's Chromium on the Playground, its default run (32 chains x 2000 steps);
    the clock runs from the click on Run until the density figure (drawn from the first
    recorded samples) is on screen. Between repeats the store is emptied and the page reloaded,
    so each measurement waits for a new run. The first repeat includes the worker's first
    compile of the kernel ("cold"); the rest reuse it, as every later run of a session does.
(b) A page rerun while a 4096-chain run streams: a banana MALA run of 4096 chains x 100000
    steps, submitted through the Playground (which thins it to at most 2e7 draws: every 21st
    step), is executing in a worker; the Playground script, showing that run, is rerun
    through streamlit.testing's AppTest (the server-side script time of a full rerun, fetching
    what is new from the store and building every figure; the browser's drawing is not in it),
    RERUN_GAP apart so that the reruns span several flushes of the run.
(c)-(f) The animated player (issue 40), in the same server and Chromium as (a), after it (the
    worker warm): (c) click Run -> the player's first frame drawn; (d) the frames a second it
    draws while playing at 30 and 60 steps a second; (e) a Step click, through Playwright and
    in the page; (f) a fresh tab on the Playground, with a completed run in the store, to its
    first figure (on a first visit, and in a browser that has shown the app before). Each
    function's docstring says what its clock measures.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from runs.pool import stop_supervisor
from runs.store import Store

ROOT = Path(__file__).resolve().parents[1]
DENSITY = "chains' last"  # the density figure's title: drawn once a run has records
STREAMING = 100  # records of the 4096-chain run before the reruns are timed
RERUN_GAP = 0.25  # s between reruns, so that they span several of the run's flushes
FPS_SPEEDS = (30, 60)  # the player's steps a second at which its frames a second are read
PAINTED = " of "  # in the player's #frame text once its first draw() ran ("step 0 of 1000")


def _empty(store: Store) -> None:
    for record in store.list():
        store.delete(record.id)


def first_point(page, store: Store, repeats: int) -> list[float]:
    """Click on Run -> the density figure (titled "chains' last ...", drawn from the run's first
    recorded samples) visible in the page, in seconds, ``repeats`` times; before each, the
    store is emptied and the page reloaded, so that each click starts a new run and the clock
    waits for its records. The first repeat on a fresh server includes the worker's first
    compile of the kernel."""
    seconds = []
    for _ in range(repeats):
        _fresh_playground(page, store)
        run = page.get_by_role("button", name="Run", exact=True)
        start = time.perf_counter()
        run.click()
        figure = page.locator(".js-plotly-plot").filter(has_text=DENSITY).first
        figure.wait_for(timeout=120_000)
        seconds.append(time.perf_counter() - start)
        _wait_end(store)
    return seconds


def _fresh_playground(page, store: Store) -> None:
    """An empty store and a reloaded Playground (a new session, default fields), read for 2 s:
    the warm worker is waiting by then."""
    _empty(store)
    page.reload()
    page.get_by_text("No playground runs yet").wait_for(timeout=60_000)
    time.sleep(2.0)


# Added to every document of the page (Playwright's init script): in the app's page, the time of
# each click on Run; in the player's iframe, the time its #frame label first reads "step k of T"
# (a MutationObserver, so right after the player's first draw() and before it is painted),
# posted to the page. Both on the browser's own clock (performance.timeOrigin + now()).
CLOCKS = """(() => {
  const now = () => performance.timeOrigin + performance.now();
  if (window.top === window) {
    window.__basin = {click: null, frame: null};
    document.addEventListener("click", e => {
      const button = e.target.closest && e.target.closest("button");
      if (button && button.innerText.trim() === "Run") window.__basin = {click: now(), frame: null};
    }, true);
    window.addEventListener("message", e => {
      if (e.data && e.data.basinFrame && window.__basin.frame === null) {
        window.__basin.frame = e.data.basinFrame;
      }
    });
  } else {
    const seen = new MutationObserver(() => {
      const label = document.getElementById("frame");
      if (label && label.textContent.includes(" of ")) {
        window.top.postMessage({basinFrame: now()}, "*");
        seen.disconnect();
      }
    });
    seen.observe(document, {subtree: true, childList: true, characterData: true});
  }
})();"""


def first_frame(page, store: Store, repeats: int) -> dict[str, list[float]]:
    """Click on Run -> the animated player's first frame drawn, in seconds, two clocks:
    "playwright": from before ``click()`` until Playwright finds the player's ``#frame`` label,
    inside its iframe, reading "step k of T" (written by the player's first draw, from the
    run's first traced steps; before it, the label reads "step 0"), which adds Playwright's
    polling of the iframe; "in_page": the browser's own clock (CLOCKS), from the click event on
    Run to that label written. Default Playground run (its first 1000 steps traced); one
    throwaway run first so that the worker and the server are warm; before each repeat the
    store is emptied and the page reloaded, as in ``first_point``."""
    page.add_init_script(CLOCKS)
    _fresh_playground(page, store)
    page.get_by_role("button", name="Run", exact=True).click()  # throwaway: warms up
    page.frame_locator("iframe").first.locator("#frame", has_text=PAINTED).wait_for(timeout=120_000)
    _wait_end(store)
    times = {"playwright": [], "in_page": []}
    for _ in range(repeats):
        _fresh_playground(page, store)
        run = page.get_by_role("button", name="Run", exact=True)
        start = time.perf_counter()
        run.click()
        player = page.frame_locator("iframe").first
        player.locator("#frame", has_text=PAINTED).wait_for(state="attached", timeout=120_000)
        times["playwright"].append(time.perf_counter() - start)
        page.wait_for_function("window.__basin.frame !== null", timeout=10_000)
        clocks = page.evaluate("window.__basin")
        times["in_page"].append((clocks["frame"] - clocks["click"]) / 1e3)
        _wait_end(store)
    return times


def _player(page, store: Store):
    """The shown run's player once the run has ended and the player shows its complete trace."""
    _wait_end(store)
    player = page.frame_locator("iframe").first
    frame = player.locator("#frame", has_text=PAINTED)
    deadline = time.monotonic() + 60
    while "more arriving" in frame.inner_text(timeout=60_000):
        if time.monotonic() > deadline:
            raise RuntimeError("the player never showed the run's complete trace")
        time.sleep(0.2)
    return player


def _playing(player, on: bool) -> None:
    button = player.locator("#play")
    if (button.inner_text() == "Pause") != on:  # it reads "Pause" while playing
        button.click()


def frames_per_second(page, store: Store, readings: int) -> dict[int, list[int]]:
    """The player's own count of frames drawn in its last whole second (``#fps``'s
    ``data-fps``: requestAnimationFrame callbacks that advanced the step, counted over windows
    of >= 1 s), read once a second ``readings`` times while it plays the shown run's 1000
    traced steps, at each speed of FPS_SPEEDS (steps a second; restarted from step 0, the
    first 1.5 s not read). Chromium is headless; its frames are not put on a screen."""
    player = _player(page, store)
    fps = {}
    for speed in FPS_SPEEDS:
        player.locator("#speed").select_option(str(speed))
        player.locator("#restart").click()
        _playing(player, True)
        time.sleep(1.5)
        fps[speed] = []
        for _ in range(readings):
            fps[speed].append(int(player.locator("#fps").get_attribute("data-fps")))
            time.sleep(1.0)
    _playing(player, False)
    return fps


def _frame_of(player) -> int:
    return int(player.locator("#frame").get_attribute("data-frame"))


def step_click(page, store: Store, clicks: int) -> dict[str, list[float]]:
    """A Step click on the paused player, ``clicks`` times each way, in seconds:
    "playwright": ``player.locator("#step").click()`` (with its actionability checks: attached,
    visible, stable over two animation frames, enabled) until ``data-frame`` reads one more,
    polled through Playwright; "noop": one such read of ``data-frame`` alone (Playwright's round
    trip to the page, in "playwright" at least once); "in_page": measured by the page's own
    clock (performance.now), from ``el.click()`` to the next requestAnimationFrame callback:
    the handler's draw of the new step and the wait for the frame that shows it."""
    player = _player(page, store)
    _playing(player, False)
    player.locator("#restart").click()
    step, times = player.locator("#step"), {"playwright": [], "noop": [], "in_page": []}
    for _ in range(clicks):
        before = _frame_of(player)
        start = time.perf_counter()
        step.click()
        while _frame_of(player) != before + 1:
            if time.perf_counter() - start > 10:
                raise RuntimeError("a Step click did not advance the player")
        times["playwright"].append(time.perf_counter() - start)
        start = time.perf_counter()
        _frame_of(player)
        times["noop"].append(time.perf_counter() - start)
        ms = step.evaluate(
            "el => new Promise(done => { const t = performance.now(); el.click(); "
            "requestAnimationFrame(() => done(performance.now() - t)); })"
        )
        times["in_page"].append(ms / 1e3)
    return times


def fresh_tab(page, url: str, repeats: int) -> dict[str, list[float]]:
    """New tabs opened on the Playground's URL, with the store as the page left it (a completed
    run, shown by default in a new session), in seconds from ``goto``: "first": to the first
    ``.js-plotly-plot`` visible (the density the chains sample, drawn above the run's views,
    before any run's data is read); "run": to the shown run's density figure ("chains' last
    ...") visible. The tabs are pages of the same Chromium in one browser context of their own
    (Playwright gives the context ``browser.new_page`` made no second page): its first tab
    ("cold", keys "cold_first", "cold_run") loads the app's scripts into an empty HTTP cache,
    as on a first visit; the ``repeats`` tabs after it (each closed before the next opens)
    find them cached, as a new tab of a browser that has shown the app before does."""
    times = {"first": [], "run": [], "cold_first": [], "cold_run": []}
    context = page.context.browser.new_context(viewport=page.viewport_size)
    try:
        for i in range(repeats + 1):
            tab = context.new_page()
            try:
                start = time.perf_counter()
                tab.goto(url, timeout=90_000)
                tab.locator(".js-plotly-plot").first.wait_for(state="visible", timeout=90_000)
                first = time.perf_counter() - start
                figure = tab.locator(".js-plotly-plot").filter(has_text=DENSITY).first
                figure.wait_for(state="visible", timeout=90_000)
                run = time.perf_counter() - start
            finally:
                tab.close()
            times["cold_first" if i == 0 else "first"].append(first)
            times["cold_run" if i == 0 else "run"].append(run)
    finally:
        context.close()
    return times


def browser(repeats: int, quick: bool) -> dict:
    """(a), (c)-(f): one ``streamlit run app.py`` with an empty store of its own, one Chromium
    page (1400 x 1000) on the Playground, the measures in this order; the server and its
    workers stop afterwards."""
    from bench.server import chromium, serve

    tmp = Path(tempfile.mkdtemp(prefix="basin-bench-app-"))
    home = tmp / "store"
    try:
        with serve(home, tmp / "streamlit.log") as url, chromium() as page:
            store = Store(home)
            page.goto(url, timeout=90_000)
            page.get_by_text("Potential").first.wait_for(timeout=90_000)
            first = first_point(page, store, 2 if quick else repeats + 1)
            frames = first_frame(page, store, 2 if quick else repeats)
            fps = frames_per_second(page, store, 3 if quick else 5)
            step = step_click(page, store, 3 if quick else 2 * repeats)
            runs = store.list()
            spec = runs[0].spec
            default = (
                f"{spec['target']['name']} + {spec['sampler']['name']}, {spec['chains']} chains "
                f"x {spec['steps']} steps"
            )
            tab = fresh_tab(page, url, 2 if quick else repeats)
            errors = list(page.console_errors)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "first_point": first,
        "first_frame": frames,
        "fps": fps,
        "step": step,
        "fresh_tab": tab,
        "runs_in_store": len(runs),
        "default_run": default,
        "console_errors": errors,
    }


def _wait_end(store: Store, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while any(r.status in ("queued", "running") for r in store.list()):
        if time.monotonic() > deadline:
            raise RuntimeError("the run did not end")
        time.sleep(0.1)


def rerun_while_streaming(repeats: int) -> dict:
    from streamlit.testing.v1 import AppTest

    tmp = Path(tempfile.mkdtemp(prefix="basin-bench-rerun-"))
    old = os.environ.get("BASIN_HOME")
    os.environ["BASIN_HOME"] = str(tmp)
    store = Store(tmp)
    try:
        # Submitted through the page, as a user would: 4096 chains x 100000 steps, no burn-in,
        # the page's own choice of thinning.
        at = AppTest.from_file(str(ROOT / "pages" / "playground.py"), default_timeout=120)
        at.run()
        at.selectbox(key="pg.target_name").set_value("banana").run()
        at.selectbox(key="pg.sampler_name").set_value("mala").run()
        at.text_input(key="pg.chains").input("4096")
        at.text_input(key="pg.steps").input("100000")
        at.text_input(key="pg.burn_pct").input("0").run()
        at.checkbox(key="pg.confirm_big").check()  # over the budget: "Run anyway"
        at.button(key="pg.run").click().run()
        (record,) = store.list()
        run_id = record.id
        deadline = time.monotonic() + 120
        while store.records(run_id) < STREAMING:  # past the compile: records arriving steadily
            if time.monotonic() > deadline:
                raise RuntimeError("the 4096-chain run did not start streaming")
            time.sleep(0.2)
        at.run()  # catch up with what was recorded while waiting
        times, records = [], []
        for _ in range(repeats):
            time.sleep(RERUN_GAP)
            start = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - start)
            records.append(store.records(run_id))
            if at.exception:
                raise RuntimeError(at.exception[0].value)
        store.request_cancel(run_id)
        status = store.get(run_id).status
        return {"seconds": times, "records": records, "thin": record.spec["thin"], "status": status}
    finally:
        stop_supervisor(store)
        if old is None:
            os.environ.pop("BASIN_HOME", None)
        else:
            os.environ["BASIN_HOME"] = old
        shutil.rmtree(tmp, ignore_errors=True)


def run(repeats: int, quick: bool) -> dict:
    shown = browser(repeats, quick)
    rerun = rerun_while_streaming(3 if quick else 4 * repeats)
    first = shown["first_point"]
    median = statistics.median
    return {
        **shown,
        "first_point_cold": first[0],
        "first_point_warm": first[1:],
        "rerun": rerun,
        "first_point_median": median(first[1:]) if len(first) > 1 else None,
        "first_frame_median": {way: median(x) for way, x in shown["first_frame"].items()},
        "fps_median": {speed: median(x) for speed, x in shown["fps"].items()},
        "step_median": {way: median(x) for way, x in shown["step"].items()},
        "fresh_tab_median": {what: median(x) for what, x in shown["fresh_tab"].items()},
        "rerun_median": median(rerun["seconds"]),
    }
