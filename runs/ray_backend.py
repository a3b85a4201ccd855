"""Sweeps on a Ray cluster (``--backend ray``): each cell's run a Ray task, its records streamed
back into this store, so a sweep on a cluster fills in live exactly like a local one.

What runs where: the store stays on this machine, written by the driver alone (the process that
runs ``drive``: ``python -m jobs sweep ... --backend ray``, or the one the app starts). Each run is
one Ray task on any node: it executes the run with ``runs.loop.execute``, the same loop a local
worker runs, into a store of its own in a temporary directory, and every FLUSH_S yields what that
store gained (rows of each series, side arrays, progress), then the summary. The driver appends
those rows here as they arrive and beats for the runs it holds (``Store.hold``: no local worker
takes them). A cancel asked for in the store (the Runs page, ``python -m jobs cancel``) reaches
the task through a small actor the task asks between flushes. A task that fails or is lost (its
worker or node killed) leaves its run ``interrupted`` with every row that reached the store;
``python -m jobs sweep run ID --retry-failed`` runs those cells again: a run replays its seed, so
the rows the store already holds are the same and are not written twice.

Ray is optional (``pip install -r requirements-ray.txt``) and imported only here, only when the
backend is chosen. The nodes need Basin's dependencies; its own packages (landscapes, samplers,
jobs) travel with each task (``runtime_env`` ``py_modules``). A ``model`` target's factory and
checkpoint files must be at the same paths on the nodes (a shared filesystem) or importable there.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from runs.spec import SpecError
from runs.store import Store

FLUSH_S = 0.5  # a task's look at its store: the live view's cadence, as a local flush's
BEAT_S = 1.0  # the driver's heartbeat for its runs and its look for cancels
CONNECT_S = 30.0  # how long a cluster may take to answer ray.init
SERIES = ("records", "flushes", "snapshots")
RETRYABLE = ("interrupted", "failed")


def require_ray():
    """The ray module, or a SpecError naming the backend and how to install it."""
    try:
        import ray
    except ImportError:
        raise SpecError(
            "backend", "'ray' needs Ray installed: pip install -r requirements-ray.txt"
        ) from None
    return ray


def connect(address: str | None):
    """Ray, connected to the cluster at ``address`` ("auto": the one this machine runs or
    RAY_ADDRESS names; "ray://host:port": Ray Client; "host:port": a head's GCS)."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    root = Path(__file__).resolve().parents[1]
    packages = [str(root / name) for name in ("landscapes", "samplers", "runs", "studies", "jobs")]
    outcome: dict = {}

    def init() -> None:
        try:
            ray.init(
                address=address or "auto",
                runtime_env={"py_modules": packages},
                log_to_driver=False,
                logging_level="ERROR",
            )
            outcome["ok"] = True
        except Exception as exc:  # ConnectionError, RuntimeError, ValueError (a bad address)
            outcome["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"

    # Ray retries an unreachable address for minutes: wait CONNECT_S, then say so
    thread = threading.Thread(target=init, daemon=True)
    thread.start()
    thread.join(CONNECT_S)
    if not outcome.get("ok"):
        why = outcome.get("error", f"no answer within {CONNECT_S:g} s")
        raise SpecError("address", f"cannot reach a Ray cluster at {address or 'auto'!r}: {why}")
    return ray


# ---------------------------------------------------------------------------------------------
# On a node: one run, its store's news streamed out.


def _news(store: Store, run_id: str, sent: dict, digests: dict) -> Iterator[dict]:
    """What the task's store gained since the last look: rows per series, changed arrays,
    the progress."""
    for series in SERIES:
        if store.records(run_id, series) > sent[series]:
            rows = store.read(run_id, since=sent[series], series=series)
            n = len(next(iter(rows.values())))
            yield {"series": series, "start": sent[series], "rows": rows}
            sent[series] += n
    for name in store.array_names(run_id):
        array = store.get_array(run_id, name)
        digest = hashlib.sha1(np.ascontiguousarray(array).view(np.uint8)).hexdigest()
        if digests.get(name) != digest:
            digests[name] = digest
            yield {"array": name, "value": array}
    yield {"progress": store.get(run_id).progress}


def execute_remote(spec: dict, run_key: str, cancels) -> Iterator[dict]:
    """The body of the Ray task (a generator: each yield streams to the driver)."""
    import tempfile

    import ray

    from runs.loop import execute
    from runs.spec import parse_spec

    yield {"worker": f"pid {os.getpid()} on {ray.util.get_node_ip_address()}", "pid": os.getpid()}
    with tempfile.TemporaryDirectory(prefix="basin-ray-") as home:
        store = Store(home)
        run_id = store.create(spec)
        stop, outcome = threading.Event(), {}

        def work() -> None:
            try:
                outcome["summary"] = execute(parse_spec(spec), store, run_id, stop.is_set)
            except Exception as exc:  # the run's failure, reported as a local worker does
                outcome["error"] = traceback.format_exception_only(type(exc), exc)[-1].strip()

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        sent, digests = dict.fromkeys(SERIES, 0), {}
        while thread.is_alive():
            thread.join(FLUSH_S)
            if not stop.is_set() and ray.get(cancels.asked.remote(run_key)):
                stop.set()  # seen by the run loop between blocks, as a local cancel is
            yield from _news(store, run_id, sent, digests)
        yield from _news(store, run_id, sent, digests)
        store.close()
        yield {"end": outcome}


def _remote(ray):
    """The task and the cancel actor, defined once Ray is imported."""
    global _TASK, _CANCELS
    if _TASK is None:
        # max_retries=0: a lost task is the driver's to report (interrupted), not Ray's to rerun
        _TASK = ray.remote(max_retries=0)(execute_remote)

        @ray.remote(num_cpus=0)
        class Cancels:
            def __init__(self):
                self.runs = set()

            def ask(self, run_key: str) -> None:
                self.runs.add(run_key)

            def asked(self, run_key: str) -> bool:
                return run_key in self.runs

        _CANCELS = Cancels
    return _TASK, _CANCELS


_TASK = _CANCELS = None


# ---------------------------------------------------------------------------------------------
# The driver: this machine's store.


def _gpus(ray, spec: dict) -> int:
    """A GPU task where the spec may use CUDA and the cluster has GPUs."""
    wants = spec.get("device", "auto") == "auto" or str(spec.get("device")).startswith("cuda")
    return 1 if wants and ray.cluster_resources().get("GPU", 0) >= 1 else 0


def _follow(ray, store: Store, run_id: str, generator) -> None:
    """Write a task's stream into the store; a lost task leaves the run interrupted."""
    have = {series: store.records(run_id, series) for series in SERIES}  # a retry's replay
    worker = None
    try:
        for ref in generator:
            item = ray.get(ref)
            if "worker" in item:
                worker = item["worker"]
                store.set_progress(run_id, {**store.get(run_id).progress, "ray_worker": worker})
            elif "series" in item:
                rows, start, series = item["rows"], item["start"], item["series"]
                skip = max(have[series] - start, 0)  # rows the store holds from an earlier try
                n = len(next(iter(rows.values())))
                if skip < n:
                    store.append(
                        run_id, start + skip, {k: v[skip:] for k, v in rows.items()}, series
                    )
                    have[series] = start + n
            elif "array" in item:
                store.put_array(run_id, item["array"], item["value"])
            elif "progress" in item:
                store.set_progress(run_id, {**item["progress"], "ray_worker": worker})
            elif "end" in item:
                outcome = item["end"]
                if "summary" in outcome:
                    store.finish(run_id, outcome["summary"]["status"], summary=outcome["summary"])
                else:
                    store.finish(run_id, "failed", error=outcome.get("error", "unknown error"))
                return
        store.finish(
            run_id, "interrupted", error=f"the Ray task ({worker}) ended without a summary"
        )
    except KeyError:  # the run was deleted meanwhile
        return
    except Exception as exc:  # RayError: the worker or its node died, or the task was cancelled
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        with contextlib.suppress(KeyError):
            store.finish(
                run_id,
                "interrupted",
                error=f"Ray task lost ({worker or 'not started'}): {type(exc).__name__}: {why}",
            )


def drive(store: Store, run_ids: list[str], address: str | None = None) -> None:
    """Run ``run_ids`` (held by this process: ``Store.hold``) on the Ray cluster at ``address``
    until every one has ended; the store is written here, live."""
    if not run_ids:
        return
    ray = connect(address)
    task, cancels_class = _remote(ray)
    cancels = cancels_class.remote()
    followers = []
    for run_id in run_ids:
        spec = store.get(run_id).spec
        generator = task.options(num_cpus=1, num_gpus=_gpus(ray, spec)).remote(
            spec, run_id, cancels
        )
        thread = threading.Thread(
            target=_follow, args=(ray, Store(store.home), run_id, generator), daemon=True
        )
        thread.start()
        followers.append((run_id, thread, generator))
    asked = set()
    while any(thread.is_alive() for _, thread, _ in followers):
        time.sleep(BEAT_S)
        for run_id, thread, generator in followers:
            if not thread.is_alive():
                continue
            try:
                store.heartbeat(run_id)
                record = store.get(run_id)
            except KeyError:  # deleted: stop its task
                ray.cancel(generator, force=True)
                continue
            if record.cancel_requested and run_id not in asked:
                asked.add(run_id)
                cancels.ask.remote(run_id)
    with contextlib.suppress(Exception):
        ray.kill(cancels)


def start_driver(store: Store, sweep_id: str, address: str | None) -> int:
    """A detached driver process for ``sweep_id`` (``python -m jobs sweep run ID --backend ray``)
    that adopts the runs this process holds for it; it outlives this one (the app, a
    ``--submit-only`` call), as the local pool does. Its output: $BASIN_HOME/ray-SWEEP.log."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]  # `-m jobs` from here finds every package
    command = [sys.executable, "-m", "jobs", "sweep", "run", sweep_id, "--backend", "ray"]
    command += ["--holder", str(os.getpid()), *(["--address", address] if address else [])]
    env = {**os.environ, "BASIN_HOME": str(store.home)}
    detach = (
        {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
        if os.name == "nt"
        else {"start_new_session": True}
    )
    with open(store.home / f"ray-{sweep_id}.log", "ab") as log:
        process = subprocess.Popen(
            command, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, **detach
        )
    return process.pid


def take(store: Store, run_ids: list[str], retry: bool = False, holder: int | None = None):
    """The runs of ``run_ids`` this process now holds to drive: the queued ones, with ``retry``
    the interrupted and failed ones too, and those ``holder`` (the app that submitted them for
    this driver) holds."""
    statuses = ("queued", *(RETRYABLE if retry else ()))
    me = os.getpid()
    return [
        r
        for r in run_ids
        if store.hold(r, me, statuses) or (holder and store.hold(r, me, ("running",), holder))
    ]
