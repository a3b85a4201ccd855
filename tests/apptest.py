"""Shared by the app tests: a temporary store whose worker pool is stopped afterwards, an AppTest
of one page, and the page's submitted runs finished for the test.

A test of a page (what it shows, what it submits, what it draws from a finished run) starts no
worker pool (``no_pool``): it executes the queued runs here (``run_queued``) and runs the page
again. A pool is a supervisor process whose workers import torch, seconds each; only the tests
about the pool itself start one and wait for it (``wait_for_runs``)."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from runs.pool import stop_supervisor
from runs.store import Store

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 120  # the first run of a page imports torch and may compile


@pytest.fixture
def home(tmp_path, monkeypatch):
    """BASIN_HOME for one test; the supervisor the app starts there is stopped at the end."""
    monkeypatch.setenv("BASIN_HOME", str(tmp_path))
    yield tmp_path
    stop_supervisor(Store(tmp_path))


@pytest.fixture
def no_pool(monkeypatch):
    """No worker pool (BASIN_NO_WORKERS=1): a page's submitted runs stay queued until the test
    executes them (``run_queued``)."""
    monkeypatch.setenv("BASIN_NO_WORKERS", "1")


def page(name: str) -> AppTest:
    """An AppTest of ``pages/<name>.py``, run once."""
    at = AppTest.from_file(str(ROOT / "pages" / f"{name}.py"), default_timeout=TIMEOUT)
    return at.run()


def wait_for_runs(home: Path, count: int = 1, timeout: float = 180) -> list:
    """The store's runs once ``count`` of them have ended (completed or otherwise)."""
    store = Store(home)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = store.list()
        ended = [r for r in runs if r.status not in ("queued", "running")]
        if len(ended) >= count:
            return runs
        time.sleep(0.2)
    raise AssertionError(f"{count} run(s) did not end within {timeout} s: {store.list()}")


VERDICT = " · verdict **"  # a run's verdict in red is the run's result, not the page's error


def errors(at: AppTest) -> list[str]:
    """Every exception and error element on the page (their texts), verdicts aside."""
    return [e.value for e in at.exception] + [e.value for e in at.error if VERDICT not in e.value]


def verdicts(at: AppTest) -> list[str]:
    """The verdicts shown, in any colour."""
    shown = [*at.success, *at.warning, *at.error]
    return [e.value for e in shown if VERDICT in e.value]


def array(value) -> np.ndarray:
    """A plotly trace array from a chart's JSON: a list, or {"dtype", "bdata"} (base64)."""
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
    return np.asarray(value, dtype=float)


def figures(at: AppTest) -> dict[str, dict]:
    """The page's plotly figures as JSON, by title."""
    out = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        out[(spec["layout"].get("title") or {}).get("text", "")] = spec
    return out


def run_queued(home: Path) -> Store:
    """Execute the store's queued runs here, in turn, without compiling (no worker pool): a
    page's submitted runs, finished for the test as a worker would finish them, with a worker's
    torch threads (on a CPU, one: on a busy 2-core machine, two threads made the networks
    page's default Adam-SGLD run take 80-100 s instead of 7 s)."""
    from runs.loop import execute
    from runs.spec import parse_spec
    from runs.worker import default_slots, torch_threads

    store = Store(home)
    with torch_threads(default_slots()[1]):
        for run in store.list("queued"):
            spec = parse_spec(run.spec).model_copy(update={"compile": "never"})
            summary = execute(spec, store, run.id)
            store.finish(run.id, summary["status"], summary=summary)
    return store
