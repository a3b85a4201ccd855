"""Find or start the worker supervisor of a store, so the app never runs a sampler itself.

One supervisor per BASIN_HOME: ``python -m jobs worker`` in its own session (it outlives the
app that started it, as runs outlive a closed tab), its pid in ``$BASIN_HOME/supervisor.pid``.
Starting is idempotent: a live pid in the file means the pool is already there, whoever
started it (the app, another app process, or a user's ``python -m jobs worker``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import tuned_environ
from .store import Store, _pid_alive

PIDFILE = "supervisor.pid"


def _pidfile(store: Store) -> Path:
    return store.home / PIDFILE


def supervisor_pid(store: Store) -> int | None:
    """The live supervisor's pid, or None."""
    try:
        pid = int(_pidfile(store).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # our own child that exited is a zombie until reaped
    return pid if _pid_alive(pid) else None


def ensure_supervisor(store: Store, slots: int | None = None) -> int:
    """The pid of the store's supervisor, started (detached) when none is alive."""
    lock = store.home / (PIDFILE + ".lock")
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # two app sessions starting at once start one pool
        pid = supervisor_pid(store)
        if pid is not None:
            return pid
        root = Path(__file__).resolve().parents[1]
        env = tuned_environ({**os.environ, "BASIN_HOME": str(store.home)})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "jobs", "worker"]
        if slots:
            command += ["--slots", str(slots)]
        log = open(store.home / "supervisor.log", "ab")  # noqa: SIM115 (the child keeps it)
        process = subprocess.Popen(
            command,
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # not in the app's process group: Ctrl-C there spares it
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
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    while supervisor_pid(store) == pid and time.monotonic() < deadline:
        time.sleep(0.05)
    if _pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _pidfile(store).unlink(missing_ok=True)
    return True
