"""``python -m bench app``: how the app feels, measured.

(a) Click to first live point, end to end in a real browser: ``streamlit run app.py`` with an
    empty store, Debian's Chromium on the Playground, banana + MALA (32 chains x 2000 steps);
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
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from jobs.pool import stop_supervisor
from jobs.store import Store

ROOT = Path(__file__).resolve().parents[1]
DENSITY = "chains' last"  # the density figure's title: drawn once a run has records
STREAMING = 100  # records of the 4096-chain run before the reruns are timed
RERUN_GAP = 0.25  # s between reruns, so that they span several of the run's flushes


def _empty(store: Store) -> None:
    for record in store.list():
        store.delete(record.id)


def first_point(repeats: int) -> list[float]:
    from ui.server import chromium, serve

    tmp = Path(tempfile.mkdtemp(prefix="basin-bench-app-"))
    home = tmp / "store"
    seconds = []
    try:
        with serve(home, tmp / "streamlit.log") as url, chromium() as page:
            store = Store(home)
            page.goto(url, timeout=90_000)
            page.get_by_text("Potential").first.wait_for(timeout=90_000)
            for _ in range(repeats):
                _empty(store)
                page.reload()
                page.get_by_text("No playground runs yet").wait_for(timeout=60_000)
                time.sleep(2.0)  # the user reads the page; the warm worker is waiting by now
                run = page.get_by_role("button", name="Run", exact=True)
                start = time.perf_counter()
                run.click()
                figure = page.locator(".js-plotly-plot").filter(has_text=DENSITY).first
                figure.wait_for(timeout=120_000)
                seconds.append(time.perf_counter() - start)
                _wait_end(store)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return seconds


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
        at = AppTest.from_file(str(ROOT / "views" / "playground.py"), default_timeout=120)
        at.run()
        at.selectbox(key="pg.target_name").set_value("banana").run()
        at.selectbox(key="pg.sampler_name").set_value("mala").run()
        at.number_input(key="pg.chains").set_value(4096)
        at.number_input(key="pg.steps").set_value(100_000)
        at.number_input(key="pg.burn_pct").set_value(0)
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
    first = first_point(2 if quick else repeats + 1)
    rerun = rerun_while_streaming(3 if quick else 4 * repeats)
    return {
        "first_point_cold": first[0],
        "first_point_warm": first[1:],
        "rerun": rerun,
        "first_point_median": statistics.median(first[1:]) if len(first) > 1 else None,
        "rerun_median": statistics.median(rerun["seconds"]),
    }
