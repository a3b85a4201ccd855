"""``python -m bench scale``: the README's DLN benchmark sweep on the local worker pool against
a 2-node local Ray cluster, wall time side by side, and the same estimates.

The sweep is README's ``python -m jobs sweep dln --class tiny --problems 16 --samplers
sgld,rmsprop-sgld --step-sizes 1e-8,1e-7,1e-6 --steps 5000`` (96 runs), each in a fresh store:
the local pool with one slot per core; then Ray, ``--backend ray``, on a cluster of two nodes on
this machine (``ray.cluster_utils.Cluster``: a head and a second node, one CPU each, standing in
for two machines), its driver streaming every run's rows into the store. Wall time is the whole
command's, from submit to the last run's summary.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
SWEEP = [
    "sweep", "dln", "--class", "tiny", "--problems", "16", "--samplers", "sgld,rmsprop-sgld",
    "--step-sizes", "1e-8,1e-7,1e-6", "--steps", "5000", "--json",
]  # fmt: skip
QUICK = ["--problems", "2", "--steps", "500"]


def timed(home: Path, *args: str) -> tuple[float, dict]:
    env = {**os.environ, "BASIN_HOME": str(home)}
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "jobs", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if out.returncode:
        raise RuntimeError(f"jobs {' '.join(args)} failed: {out.stderr[-2000:]}")
    return seconds, json.loads(out.stdout)


# For the cluster this bench starts and the commands it runs, restored after: no usage
# statistics sent, and Ray's single-machine mode, so every node listens on 127.0.0.1 only.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def run(repeats: int, quick: bool) -> dict:
    with mock.patch.dict(os.environ, RAY_ENV):
        return _run(repeats, quick)


def _run(repeats: int, quick: bool) -> dict:
    from ray.cluster_utils import Cluster

    args = list(SWEEP)
    if quick:
        for flag, value in zip(QUICK[::2], QUICK[1::2], strict=True):
            args[args.index(flag) + 1] = value
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        times, results = {"local": [], "ray": []}, {}
        with TemporaryDirectory() as tmp:
            for k in range(repeats):  # alternate, so both see the same phases of a noisy host
                for backend in ("local", "ray"):
                    extra = (
                        ["--backend", "ray", "--address", cluster.address]
                        if backend == "ray"
                        else []
                    )
                    seconds, out = timed(Path(tmp) / f"{backend}-{k}", *args, *extra)
                    times[backend].append(seconds)
                    results[backend] = out
    finally:
        cluster.shutdown()
    cells = {
        b: {(c["problem"], c["sampler"], c["step_size"]): c["llc"] for c in r["cells"]}
        for b, r in results.items()
    }
    same = cells["local"].keys() == cells["ray"].keys() and all(
        (a is None and cells["ray"][k] is None) or abs(a - cells["ray"][k]) <= 1e-9 * abs(a)
        for k, a in cells["local"].items()
    )
    return {
        "command": "python -m jobs " + " ".join(args),
        "runs": len(results["local"]["cells"]),
        "local_s": times["local"],
        "ray_s": times["ray"],
        "median": {b: statistics.median(t) for b, t in times.items()},
        "same_estimates": same,
    }
