"""One worker pool per BASIN_HOME, shared by every app on it (issue 60, items C and 11): an app
stopping leaves the others' runs running; the pool stops after the last app; runs queued while
no pool ran are taken by the next one."""

from __future__ import annotations

import os

import pytest

from bench.faults_server import RUN, pool_shared, shared_pool, start_app, stop, wait
from runs import pool
from runs.pool import ensure_supervisor, stop_supervisor, supervisor_pid
from runs.spec import parse_spec
from runs.store import Store

# a supervisor and a worker process of their own (torch imported): 6-10 s each on an idle
# 2-core machine, 20-40 s on a busy one
pytestmark = pytest.mark.slow


def test_two_apps_share_the_pool_and_the_first_stopping_spares_the_others_run(tmp_path):
    """Two apps on one store: the first started the pool, the second found it. The first
    stopping stopped the pool it owned, and the second's running run ended interrupted."""
    out = shared_pool(tmp_path)
    assert pool_shared(out), out.stdout
    assert not (tmp_path / "supervisor.owners").exists()


def test_an_app_that_keeps_its_workers_keeps_a_shared_pool_after_its_owner(tmp_path):
    """BASIN_KEEP_WORKERS=1 (``owned=False``) joining an owned pool: the pool outlives both."""
    store = Store(tmp_path)
    app, serving = start_app(tmp_path)
    try:
        assert ensure_supervisor(store, owned=False) == serving  # found, not started again
        stop(app)
        run_id = store.create(parse_spec(RUN).model_dump(mode="json"))
        wait(lambda: store.get(run_id).status not in ("queued", "running"))
        assert store.get(run_id).status == "completed"
        assert supervisor_pid(store) == serving
    finally:
        stop(app)
        stop_supervisor(store)


def test_runs_queued_with_no_pool_are_said_unserved_and_the_next_pool_takes_them(tmp_path):
    """The app's server killed, its pool gone: the queued runs wait; a new pool (the app
    started again, or ``python -m jobs worker``) runs them."""
    store = Store(tmp_path)
    spec = parse_spec({**RUN, "steps": 200}).model_dump(mode="json")
    ids = [store.create(spec) for _ in range(2)]
    assert pool.unserved(store) == 2
    started = ensure_supervisor(store, owned=True)  # this process is the app
    try:
        assert pool.unserved(store) == 0
        wait(lambda: all(store.get(i).status not in ("queued", "running") for i in ids))
        assert [store.get(i).status for i in ids] == ["completed", "completed"]
    finally:
        stop_supervisor(store)
    assert started and not os.path.exists(tmp_path / "supervisor.pid")
