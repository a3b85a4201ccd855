"""``python -m bench live``: from Run to the first live draws, and the gaps while a compile runs.

A worker pool (``python -m jobs worker``) with empty inductor and Basin compile caches of its own
serves a store; a run is submitted as the app submits it (banana SGLD by default, 64 chains x
20,000 steps, compile "auto") and the store is polled as the page polls it. Measured: seconds
from submit to the first records, the longest gap between two record updates until the run ends,
the whole run, and whether it switched to the compiled chunk. The first repeat compiles cold;
later ones start a new pool with a new empty cache too, so every repeat is cold.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runs.spec import parse_spec
from runs.store import Store

ROOT = Path(__file__).resolve().parents[1]
POLL_S = 0.02  # the store is read this often (the page polls every 0.25-0.5 s)


def one(sampler: str, params: dict, chains: int, steps: int, compile: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        home, cache = Path(tmp) / "store", Path(tmp) / "inductor"
        store = Store(home)
        env = {**os.environ, "BASIN_HOME": str(home), "TORCHINDUCTOR_CACHE_DIR": str(cache)}
        env["BASIN_CACHE"] = str(Path(tmp) / "basin")  # no compiled package on disk either
        pool = subprocess.Popen(
            [sys.executable, "-m", "jobs", "worker", "--slots", "1"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(5.0)  # the worker imports torch and waits on the queue, as in the app
            spec = parse_spec(
                {
                    "target": {"name": "banana"},
                    "sampler": {"name": sampler, "params": params},
                    "chains": chains,
                    "steps": steps,
                    "compile": compile,
                }
            )
            submitted = time.perf_counter()
            run_id = store.create(spec.model_dump(mode="json"))
            first, last, gap, seen = None, None, 0.0, 0
            while True:
                now = time.perf_counter()
                records = store.records(run_id)
                if records > seen:
                    if first is None:
                        first = now - submitted
                    elif last is not None:
                        gap = max(gap, now - last)
                    last, seen = now, records
                record = store.get(run_id)
                if record.status in ("completed", "failed", "cancelled", "interrupted"):
                    break
                if now - submitted > 600:
                    raise TimeoutError(f"run {run_id} still {record.status} after 600 s")
                time.sleep(POLL_S)
            summary = record.summary or {}
            return {
                "status": record.status,
                "first_records_s": first,
                "max_gap_s": gap,
                "run_s": time.perf_counter() - submitted,
                "compiled": summary.get("compiled"),
                "sampling_s": summary.get("sampling_seconds"),
            }
        finally:
            pool.terminate()
            pool.wait(30)


def run(repeats: int, steps: int, chains: int) -> list[dict]:
    rows = []
    for _ in range(repeats):
        rows.append(one("sgld", {"step_size": 0.01}, chains, steps, "auto"))
        print(rows[-1], file=sys.stderr)
    return rows
