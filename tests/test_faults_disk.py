"""A full disk (issue 38, item 13): the run ends failed with "disk full" and the records it
flushed before stay readable; the heartbeat thread rides it out without a traceback."""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
import time

from runs import worker
from runs.spec import parse_spec
from runs.store import Store

SPEC = {
    "target": {"name": "banana"},
    "sampler": {"name": "mala", "params": {"step_size": 0.1}},
    "chains": 4,
    "steps": 2000,
    "flush_every": 100,  # a chunk every 100 steps
    "compile": "never",
}


def test_a_full_disk_fails_the_run_and_keeps_its_flushed_records(tmp_path, monkeypatch):
    store = Store(tmp_path)
    run_id = store.create(parse_spec(SPEC).model_dump(mode="json"))
    record = store.claim(os.getpid(), run_id)
    append, calls = Store.append, []

    def fills_up(self, *args, **kwargs):  # the third chunk finds the disk full
        calls.append(args)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return append(self, *args, **kwargs)

    monkeypatch.setattr(Store, "append", fills_up)
    worker.run_one(store, record)
    monkeypatch.setattr(Store, "append", append)
    failed = store.get(run_id)
    assert failed.status == "failed" and failed.error.startswith("disk full: 200 records kept")
    data = store.read(run_id)
    assert data["step"].tolist() == list(range(200))  # the two chunks written before


def test_the_heartbeat_rides_out_a_full_disk_without_a_traceback(tmp_path, monkeypatch):
    store = Store(tmp_path)
    run_id = store.create(parse_spec(SPEC).model_dump(mode="json"))
    store.claim(os.getpid(), run_id)
    beats, errors = [], []

    def full(run_id):
        beats.append(run_id)
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store, "heartbeat", full)
    monkeypatch.setattr(threading, "excepthook", errors.append)
    monkeypatch.setattr(worker, "HEARTBEAT_S", 0.05)
    with worker.heartbeat(store, run_id):
        time.sleep(0.5)
    assert len(beats) >= 3 and not errors  # it kept trying, and nothing escaped the thread
    assert worker.disk_full(sqlite3.OperationalError("database or disk is full"))
    assert worker.disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert not worker.disk_full(OSError(errno.EACCES, "Permission denied"))


def test_the_disk_check_counts_what_queued_runs_will_write(tmp_path, monkeypatch):
    """Room on the disk for one run: the first is accepted, and a second, while the first is
    still queued, is refused, the space being promised to it."""
    from runs import budget
    from runs.budget import check_budget, estimate
    from runs.spec import SpecError

    monkeypatch.setenv("BASIN_HOME", str(tmp_path))
    big = parse_spec({**SPEC, "steps": 200_000})
    need = estimate(big).store_bytes
    Store(tmp_path)  # the store exists, empty
    monkeypatch.setattr(budget, "_disk_free", lambda: (tmp_path, int(1.5 * need)))
    check_budget(big)  # fits on its own
    Store(tmp_path).create(big.model_dump(mode="json"))  # queued, nothing written yet
    try:
        check_budget(big)
    except SpecError as exc:
        assert exc.field == "memory" and "promised to the runs queued or running" in str(exc)
    else:
        raise AssertionError("the second run fit only by ignoring the queued one")
