"""Basin without Linux-only calls: the Store, the core count, the pool's start lock and a run
through the worker pool, with what Windows lacks taken away (os.sched_getaffinity, os.pwrite,
os.preadv, os.pread, os.O_DIRECT, fcntl)."""

import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from runs import pool
from runs.spec import parse_spec
from runs.store import Store
from runs.worker import cores, default_slots

ROOT = Path(__file__).resolve().parents[1]
# process_cpu_count too (3.13+), so that the fallback is what runs
MISSING = ("sched_getaffinity", "process_cpu_count", "pwrite", "preadv", "pread", "O_DIRECT")


@pytest.fixture
def stripped(monkeypatch):
    for name in MISSING:
        monkeypatch.delattr(os, name, raising=False)
    monkeypatch.setitem(sys.modules, "fcntl", None)  # `import fcntl` raises ImportError


def test_store_round_trip_without_positional_io(stripped, tmp_path):
    store = Store(tmp_path)
    run_id = store.create({})
    rng = np.random.default_rng(0)
    position = rng.standard_normal((11, 3, 5)).astype(np.float32)  # [records, chains, d]
    loss = rng.standard_normal((11, 3))
    store.append(run_id, 0, {"step": np.arange(4), "position": position[:4], "loss": loss[:4]})
    parts = [position[4:5], position[5:]]
    store.append(run_id, 4, {"step": np.arange(4, 11), "position": parts, "loss": loss[4:]})
    got = store.read(run_id)
    np.testing.assert_array_equal(got["step"], np.arange(11))
    np.testing.assert_array_equal(got["position"], position)
    np.testing.assert_array_equal(got["loss"], loss)
    np.testing.assert_array_equal(store.read(run_id, since=6)["position"], position[6:])
    store.put_array(run_id, "projection", np.eye(5)[:, :2])
    path = store.export_npz(run_id, tmp_path / "run.npz", burn_in=2, thin=3)
    with np.load(path) as npz:
        np.testing.assert_array_equal(npz["position"], np.swapaxes(position[2::3], 0, 1))
        np.testing.assert_array_equal(npz["step"], np.arange(2, 11, 3))
        np.testing.assert_array_equal(npz["projection"], np.eye(5)[:, :2])


def test_core_count_and_default_slots_without_affinity(stripped, monkeypatch):
    import torch

    n = os.cpu_count() or 1
    assert cores() == n
    if torch.cuda.is_available():
        gpus = torch.cuda.device_count()
        assert default_slots() == (gpus, max(1, n // gpus))
    else:  # one single-threaded run per core: runs submitted together go side by side
        assert default_slots() == (n, 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 5)
    assert cores() == 5  # before 3.13: every core
    monkeypatch.setattr(os, "process_cpu_count", lambda: 3, raising=False)
    assert cores() == 3  # 3.13+'s count wins
    monkeypatch.setattr(os, "process_cpu_count", lambda: None)
    assert cores() == 1  # undeterminable: one


def test_starters_at_once_start_one_pool(stripped, tmp_path, monkeypatch):
    """Four app sessions asking for the pool at once start one supervisor (a stand-in that
    sleeps), and all of them get its pid; stopping it leaves none."""
    store, started, popen = Store(tmp_path), [], subprocess.Popen

    def start(command, **kwargs):
        time.sleep(0.3)  # a starter that took no lock would start its own meanwhile
        started.append(command)
        # a process: the pool keeps and stops a supervisor by its pid
        return popen([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs)

    monkeypatch.setattr(pool.subprocess, "Popen", start)
    barrier, pids = threading.Barrier(4), []

    def ask() -> None:
        barrier.wait()
        pids.append(pool.ensure_supervisor(store))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    try:
        assert len(started) == 1 and len(pids) == 4 and len(set(pids)) == 1
        assert pool.supervisor_pid(store) == pids[0]
    finally:
        assert pool.stop_supervisor(store, timeout=5)
    assert pool.supervisor_pid(store) is None


def test_the_start_lock_excludes_other_processes_and_dies_with_its_holder(tmp_path, monkeypatch):
    lock = tmp_path / "supervisor.lock.sqlite"
    hold = (
        f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); from runs.pool import _exclusive\n"
        f"with _exclusive({str(lock)!r}):\n    print('held', flush=True); time.sleep(60)"
    )
    # a process: the lock must exclude other processes and be freed when its holder dies
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(pool, "LOCK_TIMEOUT_S", 0.2)
        with pytest.raises(sqlite3.OperationalError, match="locked"), pool._exclusive(lock):
            pass
    finally:
        holder.kill()
        holder.wait(10)
        holder.stdout.close()
    with pool._exclusive(lock):  # no stale lock: the operating system released it
        pass


# The supervisor's script: what Windows lacks is removed before jobs is imported, in it and in
# every worker it spawns (multiprocessing runs this file's top level in each, as __mp_main__),
# and each process leaves a mark named by its pid.
SCRIPT = f"""
import os, sys
for name in {MISSING!r}:
    if hasattr(os, name):
        delattr(os, name)
sys.modules["fcntl"] = None
sys.path.insert(0, {str(ROOT)!r})  # this script lies outside the repository
open(os.path.join(os.environ["BASIN_HOME"], f"stripped-{{os.getpid()}}"), "w").close()
if __name__ == "__main__":
    import runs.pool  # imports without fcntl
    from runs.worker import supervise

    supervise(os.environ["BASIN_HOME"], slots=1, once=True)
"""


def test_a_run_through_the_worker_pool_completes_without_linux_only_calls(tmp_path):
    home = tmp_path / "home"
    store = Store(home)
    spec = {"target": {"name": "gaussian"}, "sampler": {"name": "sgld"}, "chains": 8}
    spec |= {"steps": 200, "device": "cpu", "compile": "never", "seed": 1}
    run_id = store.create(parse_spec(spec).model_dump(mode="json"))
    script = tmp_path / "stripped_supervisor.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "BASIN_HOME": str(home)}
    # a process: the script removes the Linux-only calls before Basin is imported
    command = [sys.executable, str(script)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    record = store.get(run_id)
    assert record.status == "completed", record.error
    # the worker that ran it, like its supervisor (another mark), had the calls removed
    assert (home / f"stripped-{record.worker_pid}").exists()
    assert len(list(home.glob("stripped-*"))) >= 2
    data = store.read(run_id)
    assert store.records(run_id) == 200
    np.testing.assert_array_equal(data["step"], np.arange(200))
    assert data["loss"].shape == (200, 8) and np.isfinite(data["loss"]).all()
