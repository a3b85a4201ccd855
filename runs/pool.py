"""Find or start the worker supervisor of a store, so the app never runs a sampler itself.

One supervisor per BASIN_HOME: ``python -m jobs worker`` in its own session (it outlives the
app that started it, as runs outlive a closed tab), its pid and start time (as the operating
system reports it: ``runs.liveness``) in ``$BASIN_HOME/supervisor.pid``. Starting is idempotent:
a live process with that pid and start time is the pool, already there. A pid alone could name a
stranger (the supervisor died and the system gave its pid to another process): such a file is
stale, a new pool starts, and the stranger is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from runs.liveness import alive, same_start, started
from runs.store import Store

PIDFILE = "supervisor.pid"
LOCK_TIMEOUT_S = 30.0  # a starter waits this long for another to finish starting the pool


def _pidfile(store: Store) -> Path:
    return store.home / PIDFILE


def supervisor_pid(store: Store) -> int | None:
    """The live supervisor's pid, or None (no file, or its pid is gone or now names another
    process: one started at another time)."""
    try:
        text, when = _pidfile(store).read_text().split(maxsplit=1)
        pid = int(text)
    except (OSError, ValueError):  # none, or a bare pid (no start time: it cannot be told)
        return None
    if os.name == "posix":  # Windows has no zombies (and its waitpid takes a handle, not a pid)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # our own child that exited is a zombie until reaped
    return pid if alive(pid) and same_start(pid, when) is True else None


@contextlib.contextmanager
def _exclusive(path: Path):
    """Held by one process (or thread) at a time: SQLite's write lock, portable, waited for, and
    released by the operating system when its holder dies, so no lock is ever left stale."""
    conn = sqlite3.connect(path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
    finally:
        conn.close()  # rolls the empty transaction back: the lock is free


def ensure_supervisor(store: Store, slots: int | None = None, owned: bool = False) -> int:
    """The pid of the store's supervisor, started (detached) when none is alive; ``owned``: it
    stops (its runs end interrupted) when this process ends."""
    with _exclusive(store.home / "supervisor.lock.sqlite"):  # two app sessions start one pool
        pid = supervisor_pid(store)
        if pid is not None:
            return pid
        # from the repository's root: `-m jobs` finds every package there, installed or not
        root = Path(__file__).resolve().parents[1]
        env = {**os.environ, "BASIN_HOME": str(store.home)}
        command = [sys.executable, "-m", "jobs", "worker"]
        if slots:
            command += ["--slots", str(slots)]
        if owned:
            command += ["--owner", f"{os.getpid()}:{started(os.getpid())}"]
        # not in the app's process group, so a Ctrl-C there spares it
        if os.name == "nt":
            detach = {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
        else:
            detach = {"start_new_session": True}
        log = open(store.home / "supervisor.log", "ab")  # noqa: SIM115 (the child keeps it)
        process = subprocess.Popen(
            command, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, **detach
        )
        log.close()
        _pidfile(store).write_text(f"{process.pid} {started(process.pid)}\n")
        return process.pid


def stop_supervisor(store: Store, timeout: float = 10.0) -> bool:
    """Stop the supervisor as on Ctrl-C (its workers stop, their runs end interrupted); True if
    one was running."""
    pid = supervisor_pid(store)
    if pid is None:
        return False
    # Windows: os.kill with SIGINT would terminate it outright; Ctrl-Break reaches its group
    # POSIX: SIGTERM; a SIGINT ignored where it was started (a CI job, `cmd &`) stays ignored
    interrupt = signal.CTRL_BREAK_EVENT if os.name == "nt" else signal.SIGTERM
    with contextlib.suppress(OSError):  # gone already, or not ours: the kill below decides
        os.kill(pid, interrupt)
    deadline = time.monotonic() + timeout
    while supervisor_pid(store) == pid and time.monotonic() < deadline:
        time.sleep(0.05)
    if supervisor_pid(store) == pid:  # still the same process: its pid was not reused since
        with contextlib.suppress(OSError):  # Windows has no SIGKILL: SIGTERM terminates there
            os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
    _pidfile(store).unlink(missing_ok=True)
    return True
