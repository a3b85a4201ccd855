"""Workers: runs execute in child processes, never in the app's; a supervisor keeps them going.

The supervisor (``python -m jobs worker``, or started by the app) keeps at most ``slots`` worker
processes alive while runs are queued. Each worker claims the oldest queued run, executes it with
a heartbeat thread beside it, records the outcome and claims the next. A worker that dies
(SIGKILL, out of memory) stops its heartbeat; ``Store.mark_stale``, called by the supervisor and
by readers, marks its run interrupted, and every chunk it flushed stays readable. A cancel is
seen by the run loop between blocks; one not honoured within a second (a long compile) is
enforced by terminating the worker.
"""

from __future__ import annotations

import contextlib
import errno
import multiprocessing as mp
import os
import signal
import sqlite3
import sys
import threading
import time
import traceback
from collections.abc import Callable

from runs.liveness import alive, same_start
from runs.spec import SpecError, parse_spec
from runs.store import Store

HEARTBEAT_S = 1.0
STALE_S = 10.0
CANCEL_GRACE_S = 1.0
POLL_S = 0.05  # a warm worker's look at the queue: a small indexed SELECT


def cores() -> int:
    """The cores this process may use: 3.13+'s affinity-aware count, else every core."""
    count = os.process_cpu_count if hasattr(os, "process_cpu_count") else os.cpu_count
    return count() or 1


def default_slots() -> tuple[int, int]:
    """(runs at once, torch threads per run): one per GPU; on CPU one single-threaded run per
    core, so runs submitted together (Compare's samplers) progress side by side. A small
    chain-batched run gains nothing from a second thread (bench/RESULTS.md), and a single
    run alone still has its core to itself."""
    import torch

    n = cores()
    if torch.cuda.is_available():
        return torch.cuda.device_count(), max(1, n // torch.cuda.device_count())
    return n, 1


# one thread's blocks at a time set and restore torch's (process-wide) count; reentrant, so a
# block nested in another (a test's run inside a thread-limited section) restores the outer count
_THREADS = threading.RLock()


@contextlib.contextmanager
def torch_threads(threads: int):
    """torch's intra-op threads set to ``threads`` for the block, then restored: a foreground
    run (``python -m jobs run``) runs as a worker would, and the app's in-process studies (the
    KL from prior draws) as well. On a CPU, small ops' thread hand-offs cost more than they
    share: the repriorised network's energy took 5 ms with one thread and 420 ms with two on
    this 2-core machine (docs/methods/wide-networks.md warns of the same). The count is the
    process's: blocks in other threads wait for each other, so none restores another's."""
    import torch

    with _THREADS:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)


def run_one(store: Store, record, threads: int | None = None, prepare: bool = False) -> None:
    """Execute a claimed run to its end: completed, cancelled or failed (with the error).
    ``prepare``: a warm worker, which then compiles the run's kernel while it waits
    (``execute``)."""
    import torch

    from runs.loop import execute

    if threads:
        torch.set_num_threads(threads)

    with heartbeat(store, record.id):
        try:
            spec = parse_spec(record.spec)
            stop = cancelled(store, record.id)
            summary = execute(spec, store, record.id, stop, prepare=prepare)
            store.finish(record.id, summary["status"], summary=summary)
        except KeyError:  # deleted while it ran, or taken over (LostClaim): nothing to report
            return
        except SpecError as exc:
            store.finish(record.id, "failed", error=str(exc))
        except Exception as exc:
            detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
            if disk_full(exc):
                detail = f"disk full: {store.records(record.id)} records kept ({detail})"
            try:
                store.finish(record.id, "failed", error=detail)
            except (OSError, sqlite3.Error) as again:  # the store's disk too: stale-marked later
                print(f"run {record.id} failed ({detail}); not recorded: {again}", file=sys.stderr)


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk is full (the data file's write, or SQLite's)."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    return isinstance(exc, sqlite3.Error) and "full" in str(exc)


def cancelled(store: Store, run_id: str) -> Callable[[], bool]:
    """``execute``'s ``should_stop`` for a run in the store: true once a cancel was asked for
    (``python -m jobs cancel``, the Runs page), when the run is marked cancelled at once.
    LostClaim (a KeyError: the writer stops, writing nothing more) once the run was taken over
    by another process (interrupted, then resumed there)."""

    def stop() -> bool:  # asked between blocks: the sampling stops here, the summary follows
        if store.get(run_id, owned=True).cancel_requested:
            store.finish(run_id, "cancelled")
            return True
        return False

    return stop


@contextlib.contextmanager
def heartbeat(store: Store, run_id: str):
    """Beat every HEARTBEAT_S from a thread while the block runs, so that a long compile or a
    long block still shows a live run (``Store.mark_stale`` interrupts silent ones)."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(HEARTBEAT_S):
            try:
                store.heartbeat(run_id)
            except KeyError:  # the run was deleted meanwhile
                return
            except (OSError, sqlite3.Error):  # e.g. the disk is full: try again at the next beat
                continue

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def work(home: str, threads: int | None = None, warm: bool = False) -> None:
    """A worker process: claim and run queued runs until none is left; a ``warm`` one keeps
    waiting for the next (its interpreter, torch and compiled kernels stay loaded, so a run
    submitted from the app starts at once instead of after a fresh process's imports)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    store = Store(home)
    parent = os.getppid()
    if warm:
        import torch  # noqa: F401  (loaded now, not when the first run arrives)

        from runs import loop as run  # noqa: F401
    while True:
        record = store.claim(os.getpid())
        if record is not None:
            run_one(store, record, threads, prepare=warm)
        elif warm and not _orphaned(parent):  # an orphan stops: its supervisor is gone
            time.sleep(POLL_S)
        else:
            return


def _orphaned(parent: int) -> bool:
    """POSIX hands an orphan to another parent; Windows keeps the dead parent's pid, so ask it."""
    return os.getppid() != parent if os.name == "posix" else not alive(parent)


def supervise(
    home: str | None = None,
    slots: int | None = None,
    once: bool = False,
    owner: str | None = None,
    stopping: Callable[[], bool] | None = None,
) -> None:
    """Keep up to ``slots`` workers busy while runs are queued; with ``once``, return when the
    queue is empty and no worker is left (tests, scripts), else serve until interrupted, with
    one warm worker always waiting. ``owner`` ("pid:start", the app that started it): stop as
    on Ctrl-C once that process is gone, so stopping the app stops its workers; ``stopping``:
    likewise once it returns True (``runs.pool.serve``: every app sharing the pool is gone)."""
    if slots is not None and slots < 1:
        raise SpecError("slots", f"must be an integer >= 1 (runs at once), got {slots}")
    store = Store(home)
    default, threads = default_slots()
    slots = slots or default
    context = mp.get_context("spawn")  # a fresh interpreter: no torch or SQLite state inherited
    workers: list = []

    def interrupted(signum, frame):  # SIGTERM (stop_supervisor, docker stop): as Ctrl-C
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        # SIGBREAK: Windows' Ctrl-Break, which stop_supervisor sends there instead of SIGTERM
        for name in ("SIGTERM", "SIGBREAK"):
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), interrupted)
    cancel_seen: dict[str, float] = {}
    try:
        while True:
            if (owner is not None and not _owner_alive(owner)) or (stopping and stopping()):
                raise KeyboardInterrupt
            store.mark_stale(STALE_S)
            workers = [w for w in workers if w.is_alive()]
            queued = store.list("queued")
            idle_warm = 0 if once else 1  # the warm worker is waiting or already took one
            # a worker busy with a run takes no other: a run queued beside it needs a new one
            # (counting the queue alone, Compare's second run waited for the first to end)
            pids = {w.pid for w in workers}
            busy = sum(r.worker_pid in pids for r in store.list("running"))
            for _ in range(min(slots, busy + max(len(queued), idle_warm)) - len(workers)):
                process = context.Process(target=work, args=(str(store.home), threads, not once))
                process.start()
                workers.append(process)
            enforce_cancels(store, workers, cancel_seen)
            if once and not workers and not store.list("queued"):
                return
            time.sleep(0.2)
    except KeyboardInterrupt:  # Ctrl-C: stop the workers; their runs end interrupted
        # and one a signal caught inside its start, before it joined the list: else the exit
        # would wait on it for ever (multiprocessing joins every child)
        for process in {*workers, *mp.active_children()}:
            process.terminate()
            process.join(10)
        store.mark_stale(STALE_S)  # their pids are gone now (joined)


def _owner_alive(owner: str) -> bool:
    """Whether the process "pid:start" still runs (the same one: its start time agrees; where
    either start time cannot be read, the pid alone decides)."""
    pid, _, when = owner.partition(":")
    return alive(int(pid)) and same_start(int(pid), when) is not False


def enforce_cancels(store: Store, workers: list, seen: dict[str, float]) -> None:
    """Terminate the worker of a run whose cancel was not honoured within CANCEL_GRACE_S."""
    now = time.monotonic()
    pids = {w.pid: w for w in workers}
    for record in store.list("running"):
        if not record.cancel_requested or record.worker_pid not in pids:
            continue
        first = seen.setdefault(record.id, now)
        if now - first >= CANCEL_GRACE_S:
            pids[record.worker_pid].terminate()
            pids[record.worker_pid].join(5)
            store.finish(record.id, "cancelled", error="cancelled while the worker was busy")
            seen.pop(record.id)
