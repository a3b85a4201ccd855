"""Find or start the worker supervisor of a store, so the app never runs a sampler itself.

One supervisor per BASIN_HOME: ``python -m jobs worker`` in its own session (it outlives the
app that started it, as runs outlive a closed tab), its pid and start time (as the operating
system reports it: ``runs.liveness``) in ``$BASIN_HOME/supervisor.pid``. Starting is idempotent:
a live process with that pid and start time is the pool, already there. A pid alone could name a
stranger (the supervisor died and the system gave its pid to another process): such a file is
stale, a new pool starts, and the stranger is never signalled.

An app's pool is owned: it stops (its runs end interrupted, resumable) once the apps that use it
are gone. Two apps on one BASIN_HOME share one pool, so each is counted: every app that finds or
starts an owned pool names itself ("pid:start") in ``$BASIN_HOME/supervisor.owners``, and the
pool stops only when every app named there has ended. An app that keeps its workers
(``owned=False``) removes the file: the pool then serves until it is stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from runs.liveness import alive, same_start, started
from runs.store import Store

PIDFILE = "supervisor.pid"
OWNERS = "supervisor.owners"  # the apps sharing an owned pool, "pid:start" a line
LOCK = "supervisor.lock.sqlite"
LOCK_TIMEOUT_S = 30.0  # a starter waits this long for another to finish starting the pool
WATCH_S = 0.2  # how often an owned pool looks whether its apps still run
NO_WORKER = "queued: no worker running; start the app or `python -m jobs worker`"


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
    stops (its runs end interrupted) once this process and every other app sharing it ended."""
    with _exclusive(store.home / LOCK):  # two app sessions start one pool
        pid = supervisor_pid(store)
        if pid is not None:
            _join(store, owned)
            return pid
        me = _me()
        if owned:  # written before the pool starts, so it never sees a stale list
            _write_owners(store, [me])
        else:
            _owners(store).unlink(missing_ok=True)
        # from the repository's root: `-m jobs` finds every package there, installed or not
        root = Path(__file__).resolve().parents[1]
        env = {**os.environ, "BASIN_HOME": str(store.home)}
        command = [sys.executable, "-m", "jobs", "worker"]
        if slots:
            command += ["--slots", str(slots)]
        if owned:
            command += ["--owner", me]
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
    _owners(store).unlink(missing_ok=True)
    return True


# -- apps sharing a pool ------------------------------------------------------------------------


def _me() -> str:
    return f"{os.getpid()}:{started(os.getpid())}"


def _owners(store: Store) -> Path:
    return store.home / OWNERS


def _read_owners(store: Store) -> list[str] | None:
    """The apps named as the pool's owners; None when the pool has none (it serves until
    stopped)."""
    try:
        return _owners(store).read_text().split()
    except FileNotFoundError:
        return None


def _write_owners(store: Store, owners: list[str]) -> None:
    """Replaced in one step (a rename), so a reader never sees half a list."""
    partial = _owners(store).with_suffix(".partial")
    partial.write_text("".join(f"{owner}\n" for owner in owners))
    os.replace(partial, _owners(store))


def _owner_alive(owner: str) -> bool:
    """Whether the app "pid:start" still runs (its start time agrees; where either start time
    cannot be read, the pid alone decides)."""
    pid, _, when = owner.partition(":")
    try:
        return alive(int(pid)) and same_start(int(pid), when) is not False
    except ValueError:  # not a pid: a damaged line names no app
        return False


def _join(store: Store, owned: bool) -> None:
    """This app uses the running pool: named among its owners (the apps gone are dropped), or,
    keeping its workers, the pool made ownerless. A pool with no owners file stays so."""
    owners = _read_owners(store)
    if owners is None:
        return
    if not owned:
        _owners(store).unlink(missing_ok=True)
    elif _me() not in owners:
        _write_owners(store, [o for o in owners if _owner_alive(o)] + [_me()])


def serve(home: str, slots: int | None, once: bool, owner: str | None) -> None:
    """``python -m jobs worker``: the supervisor (``runs.worker.supervise``); with ``owner``
    ("pid:start", the app that started it), it stops as on Ctrl-C once every app sharing it has
    ended, and its runs end interrupted."""
    from runs.worker import supervise

    store = Store(home)
    if owner is not None:
        with _exclusive(store.home / LOCK):  # the app that started this pool wrote its list
            if _pid_named(store) != os.getpid():  # started by hand: a list there is older
                _write_owners(store, [owner])
    ended = threading.Event()  # every owner gone: supervise stops at the top of its loop
    if owner is not None:
        threading.Thread(target=_watch, args=(store, ended), daemon=True).start()
    with contextlib.suppress(KeyboardInterrupt):  # one before its loop began: no worker yet
        supervise(home, slots=slots, once=once, stopping=ended.is_set)


def _pid_named(store: Store) -> int | None:
    try:
        return int(_pidfile(store).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _watch(store: Store, ended: threading.Event) -> None:
    """Stop this pool (as on Ctrl-C) once every app named among its owners has ended. The last
    look is taken under the starters' lock and removes the pool's files, so an app arriving
    meanwhile starts a new pool instead of joining this one as it stops."""
    lock = store.home / LOCK
    while True:
        time.sleep(WATCH_S)
        owners = _read_owners(store)
        if owners is None:
            return  # ownerless now (an app keeps its workers): it serves until stopped
        if any(_owner_alive(o) for o in owners):
            continue
        with _exclusive(lock):
            owners = _read_owners(store)
            if owners is None:
                return
            if any(_owner_alive(o) for o in owners):
                continue
            _owners(store).unlink(missing_ok=True)
            if _pid_named(store) == os.getpid():
                _pidfile(store).unlink(missing_ok=True)
        break
    # an event, not an interrupt: one landing inside a worker's start left that worker out of
    # the pool's list, and the process hung at exit joining it (found as leftover pools)
    ended.set()


def unserved(store: Store) -> int:
    """How many runs are queued with no worker to take them: no supervisor runs, and no run is
    held by a live worker (one started by hand, ``python -m jobs worker``, writes no pid file).
    Zero when workers exist or nothing waits."""
    queued = len(store.list("queued"))
    if not queued or supervisor_pid(store) is not None:
        return 0
    if any(r.worker_pid and alive(r.worker_pid) for r in store.list("running")):
        return 0
    return queued
