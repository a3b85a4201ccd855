"""Find or start the worker supervisor of a store, so the app never runs a sampler itself.

One supervisor per BASIN_HOME: ``python -m jobs worker`` in its own session (it outlives the
app that started it, as runs outlive a closed tab), its pid in ``$BASIN_HOME/supervisor.pid``.
Starting is idempotent: a live pid in the file means the pool is already there, whoever
started it (the app, another app process, or a user's ``python -m jobs worker``).
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

from .store import Store, _pid_alive

PIDFILE = "supervisor.pid"
LOCK_TIMEOUT_S = 30.0  # a starter waits this long for another to finish starting the pool


def _pidfile(store: Store) -> Path:
    return store.home / PIDFILE


def supervisor_pid(store: Store) -> int | None:
    """The live supervisor's pid, or None."""
    try:
        pid = int(_pidfile(store).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if os.name == "posix":  # Windows has no zombies (and its waitpid takes a handle, not a pid)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # our own child that exited is a zombie until reaped
    return pid if _pid_alive(pid) else None


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


def ensure_supervisor(store: Store, slots: int | None = None) -> int:
    """The pid of the store's supervisor, started (detached) when none is alive."""
    with _exclusive(store.home / "supervisor.lock.sqlite"):  # two app sessions start one pool
        pid = supervisor_pid(store)
        if pid is not None:
            return pid
        root = Path(__file__).resolve().parents[1]
        env = {**os.environ, "BASIN_HOME": str(store.home)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "jobs", "worker"]
        if slots:
            command += ["--slots", str(slots)]
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
        _pidfile(store).write_text(f"{process.pid}\n")
        return process.pid


def stop_supervisor(store: Store, timeout: float = 10.0) -> bool:
    """Interrupt the supervisor (its workers stop, their runs end interrupted); True if one was
    running."""
    pid = supervisor_pid(store)
    if pid is None:
        return False
    # Windows: os.kill with SIGINT would terminate it outright; Ctrl-Break reaches its group
    interrupt = signal.CTRL_BREAK_EVENT if os.name == "nt" else signal.SIGINT
    with contextlib.suppress(OSError):  # gone already, or not ours: the kill below decides
        os.kill(pid, interrupt)
    deadline = time.monotonic() + timeout
    while supervisor_pid(store) == pid and time.monotonic() < deadline:
        time.sleep(0.05)
    if _pid_alive(pid):
        with contextlib.suppress(OSError):  # Windows has no SIGKILL: SIGTERM terminates there
            os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
    _pidfile(store).unlink(missing_ok=True)
    return True
