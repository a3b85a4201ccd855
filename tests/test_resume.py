"""Resume (issue 38, item 7): a run killed mid-way and resumed ends with the very records of a
run that was never interrupted, because the resumed run replays its seed's draws and writes
only what the store lacks. Both runs are eager (--compile never), so the equality is exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
from clitest import ROOT, jobs

from runs.store import Store

SPEC = [
    *("--target", "banana", "--sampler", "mala", "--param", "step_size=0.1"),
    *("--chains", "8", "--steps", "6000", "--seed", "5", "--compile", "never"),
    *("--observe", "llc"),  # its live rows ("flushes") are kept and continued too
]


def test_a_killed_run_resumed_records_what_an_uninterrupted_run_records(tmp_path):
    whole = jobs(tmp_path, "run", *SPEC, "--json")
    assert whole.returncode == 0, whole.stderr
    whole_id = json.loads(whole.stdout)["run_id"]

    env = {**os.environ, "BASIN_HOME": str(tmp_path)}
    proc = subprocess.Popen(  # a process of its own: the point is its SIGKILL mid-run
        [sys.executable, "-m", "jobs", "run", *SPEC],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    store = Store(tmp_path)
    deadline = time.monotonic() + 120
    killed_id = None
    while time.monotonic() < deadline:  # kill it once some records, not all, are stored
        ids = [r.id for r in store.list() if r.id != whole_id]
        if ids and store.records(ids[0]) > 300:
            killed_id = ids[0]
            break
        time.sleep(0.05)
    proc.kill()  # SIGKILL on POSIX: no handler runs
    proc.wait(timeout=30)
    assert killed_id is not None, "the run never flushed"
    kept = store.records(killed_id)
    assert 0 < kept < 6000
    assert store.mark_stale(timeout_s=0) == [killed_id]
    assert store.get(killed_id).status == "interrupted"

    resumed = jobs(tmp_path, "resume", killed_id, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "completed"
    a, b = store.read(whole_id), store.read(killed_id)
    assert set(a) == set(b) and len(b["step"]) == 6000
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert store.records(killed_id, "flushes") > 0
    summary = store.get(killed_id).summary
    assert summary["loss"] == store.get(whole_id).summary["loss"]

    again = jobs(tmp_path, "resume", whole_id)  # a completed run is not resumed
    assert again.returncode == 2 and "only interrupted or cancelled" in again.stderr
