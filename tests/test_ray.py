"""Sweeps on a real local Ray cluster (``--backend ray``), against the local worker pool.

A module-scoped head node on 127.0.0.1 (``ray.cluster_utils.Cluster``, with Ray's
single-machine setting RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 so that nothing listens beyond the
loopback; its processes are this test's children, stopped by their PIDs at the end). Without
Ray installed the tests skip, unless BASIN_REQUIRE_RAY=1 (CI installs requirements-ray.txt):
then they fail.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from clitest import process as cli  # a fresh process each: Ray's driver state is per process
from test_jobs import wait

from runs.store import Store

pytestmark = pytest.mark.ray

if os.environ.get("BASIN_REQUIRE_RAY") == "1":
    import ray  # noqa: F401  (fails here, loudly, when CI lacks it)
else:
    pytest.importorskip("ray", reason="Ray is optional: pip install -r requirements-ray.txt")

# A small DLN benchmark sweep: 2 problems x 1 sampler x 2 step sizes, 4 runs of 2 chains.
SWEEP = [
    "sweep", "dln", "--class", "tiny", "--problems", "2", "--samplers", "sgld",
    "--step-sizes", "1e-7,1e-6", "--steps", "300", "--chains", "2", "--n", "2000",
    "--seed", "5", "--device", "cpu", "--json",
]  # fmt: skip


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as env:  # restored after the module; the CLI inherits it
        env.setenv("RAY_USAGE_STATS_ENABLED", "0")  # no reporting home from CI
        env.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # every node and driver on 127.0.0.1
        head = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False}
        )
        try:
            yield head.address
        finally:
            head.shutdown()


def results(out: str) -> dict:
    return {(c["problem"], c["step_size"]): c for c in json.loads(out)["cells"]}


def test_a_dln_sweep_on_ray_equals_the_local_pool(tmp_path, cluster):
    """Same cells, same seeds: every run's LLC equal to the local pool's, and the runs' rows
    streamed into the store as a local run writes them."""
    local = cli(tmp_path / "local", *SWEEP, "--slots", "2")
    assert local.returncode == 0, local.stderr
    remote = cli(tmp_path / "ray", *SWEEP, "--backend", "ray", "--address", cluster)
    assert remote.returncode == 0, remote.stderr
    a, b = results(local.stdout), results(remote.stdout)
    assert a.keys() == b.keys() and len(a) == 4
    for key in a:
        assert b[key]["llc"] == pytest.approx(a[key]["llc"], rel=1e-9), key
    stores = Store(tmp_path / "local"), Store(tmp_path / "ray")
    for key in a:
        rows = [s.read(c[key]["run_id"]) for s, c in zip(stores, (a, b), strict=True)]
        assert rows[0].keys() == rows[1].keys()
        for name in rows[0]:
            assert (rows[0][name] == rows[1][name]).all() or name == "seconds", name
    run = stores[1].get(b[key]["run_id"])
    assert run.status == "completed" and "ray_worker" in run.progress


def test_a_killed_ray_worker_is_interrupted_a_cancel_reaches_its_task_and_retry_reruns(
    tmp_path, cluster
):
    """Two cells on Ray. SIGKILL the Ray worker of one mid-run: its cell ends interrupted with
    the rows that reached the store. Cancel the other from the store (as the Runs page does):
    the cancel reaches its task, which stops and reports cancelled. Then ``sweep run ID
    --retry-failed`` runs only the lost cell again, to completion, its kept rows unchanged (the
    seed replays them); the cancelled cell stays cancelled."""
    home = tmp_path / "home"
    long = list(SWEEP)  # 1 problem x 2 step sizes, runs of ~4 s: time to kill one
    long[long.index("--problems") + 1], long[long.index("--steps") + 1] = "1", "8000"
    submitted = cli(home, *long, "--backend", "ray", "--address", cluster, "--submit-only")
    assert submitted.returncode == 0, submitted.stderr
    sweep_id = submitted.stdout.strip()
    store = Store(home)
    cells = [c["run_id"] for c in store.get_sweep(sweep_id)["cells"]]

    def started(run_id: str):
        record = store.get(run_id)
        return store.records(run_id) > 0 and record.progress.get("ray_worker")

    lost, other = cells
    worker = wait(lambda: started(lost), timeout=120, every=0.1)
    wait(lambda: started(other), timeout=120, every=0.1)
    kept = store.read(lost)
    os.kill(int(worker.split()[1]), signal.SIGKILL)
    assert cli(home, "cancel", other).returncode == 0
    wait(lambda: store.get(lost).status == "interrupted", timeout=60, every=0.1)
    assert "Ray task lost" in store.get(lost).error
    wait(lambda: store.get(other).status == "cancelled", timeout=60, every=0.1)
    cancelled = store.get(other)
    assert cancelled.summary["status"] == "cancelled" and store.records(other) > 0

    again = cli(home, "sweep", "run", sweep_id, "--retry-failed", "--backend", "ray",
                "--address", cluster, "--json")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert store.get(lost).status == "completed"
    assert store.get(other).finished == cancelled.finished  # not run again
    rows = store.read(lost)
    assert len(rows["step"]) == 8000 // int(store.get(lost).spec["thin"])
    for name, values in kept.items():
        assert (rows[name][: len(values)] == values).all(), name


def test_the_dln_benchmark_page_runs_its_sweep_on_ray(home, cluster):
    """The page's "Run on: Ray cluster": the sweep's runs are held for a driver the app starts
    beside itself (never the local pool's), and fill in from the cluster."""
    from apptest import errors, page

    at = page("dln_benchmark")
    at.number_input(key="dln.problems").set_value(1)
    at.number_input(key="dln.steps").set_value(200)
    at.multiselect(key="dln.samplers").set_value(["sgld"])
    at.text_input(key="dln.step_sizes").input("1e-7")
    at.radio(key="dln.backend").set_value("ray").run()
    at.text_input(key="dln.address").input(cluster).run()
    at.button(key="dln.launch").click().run()
    assert not errors(at)
    store = Store(home)
    (sweep,) = store.list_sweeps()
    (cell,) = sweep["cells"]
    wait(lambda: store.get(cell["run_id"]).status == "completed", timeout=120, every=0.2)
    record = store.get(cell["run_id"])
    assert "ray_worker" in record.progress and record.summary["observables"]["llc"]["mean"]
    assert (home / f"ray-{sweep['id']}.log").exists()
