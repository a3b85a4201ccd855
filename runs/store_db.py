"""The store's SQLite: connections in WAL mode, one-transaction writes, and the errors that name
a damaged file (basin.sqlite, or a run's index) instead of letting sqlite's words through."""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import time
from pathlib import Path

BUSY_TIMEOUT_S = 10.0
_DAMAGE_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB: the file, not the query, is wrong
_IOERR = 10  # SQLITE_IOERR: e.g. a write-ahead log cut short under an index (-shm) that lists it


def store_home(home: str | os.PathLike | None = None) -> Path:
    """Where a Store keeps its runs: ``home``, else $BASIN_HOME, else ./.basin."""
    return Path(home or os.environ.get("BASIN_HOME") or ".basin").resolve()


class StoreError(Exception):
    """The store cannot serve: its home cannot hold runs (missing parent, not a directory, not
    writable), or a file of it is damaged."""


class DamagedStore(StoreError, ValueError):
    """A damaged file or row of the store; the message names it (basin.sqlite, a run's spec, its
    index, its records), ``run_id`` the run when there is one."""

    def __init__(self, message: str, run_id: str | None = None):
        super().__init__(message)
        self.run_id = run_id


class NotResumable(StoreError, ValueError):
    """A requeue or resume of a run that is not interrupted or cancelled (or failed, where the
    caller allows it): running, queued, completed. The message says which."""


class LostClaim(KeyError):
    """The run this writer claimed was taken over (resumed by another process after it was
    marked interrupted): the writer stops without writing a record, a status or a summary. A
    KeyError, as for a run deleted under its writer: every writer already stops quietly on it."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CorruptRecords(DamagedStore):
    """Chunks of a run whose bytes are damaged: ``ranges`` of (first, last, why), record indices
    of ``series``, both ends included."""

    def __init__(self, run_id: str, ranges: list[tuple[int, int, str]], series: str = "records"):
        self.ranges = sorted(ranges)
        spans = ", ".join(f"{first}-{last} ({why})" for first, last, why in self.ranges)
        super().__init__(f"run {run_id}: {series} {spans} are damaged", run_id)


def _connect(path: Path, create: bool) -> sqlite3.Connection:
    """Autocommit connection (transactions are explicit); mode=rw never recreates a deleted file."""
    uri = f"{path.as_uri()}?mode={'rwc' if create else 'rw'}"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    # Switching a new file to WAL takes an exclusive lock without SQLite's busy handler, so two
    # processes opening a fresh store at once can see "database is locked": wait it out.
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    try:
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        # WAL + NORMAL: never corrupt, at most the last transaction lost
        conn.execute("PRAGMA synchronous=NORMAL")
    except BaseException:
        conn.close()  # not left open by the error's traceback: it would hold the file's locks
        raise
    return conn


@contextlib.contextmanager
def _tx(conn: sqlite3.Connection, mode: str = "IMMEDIATE"):
    """One transaction: IMMEDIATE takes the write lock up front (no upgrade deadlocks)."""
    conn.execute(f"BEGIN {mode}")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _code(exc: BaseException) -> int:
    """Sqlite's primary result code (extended codes keep it in their low byte); 0 if none."""
    code = getattr(exc, "sqlite_errorcode", 0) or 0
    return code & 0xFF if isinstance(exc, sqlite3.DatabaseError) else 0


def _is_damage(exc: BaseException) -> bool:
    return _code(exc) in _DAMAGE_CODES or _code(exc) == _IOERR


def _damage(path: Path, exc: BaseException) -> str:
    """What is wrong with the SQLite file ``path``, in words: damaged, or (an I/O error) its
    write-ahead log unreadable."""
    wal = path.with_name(path.name + "-wal")
    if _code(exc) == _IOERR and wal.exists():
        return (
            f"{wal}: the write-ahead log of {path.name} cannot be read ({exc}): it was cut "
            f"short or overwritten while {path.name}-shm still indexes it; stop every process "
            "using this store (the app, workers) so that SQLite rebuilds its index, then run "
            "`python -m jobs check`"
        )
    if _code(exc) == _IOERR:
        return f"{path} cannot be read ({exc}): the disk or the file is failing"
    return f"{path} is damaged ({exc})"


def _names_damage(per_run: bool):
    """Sqlite's "malformed" or "not a database" from the method as a DamagedStore naming the
    file: basin.sqlite, or (``per_run``) the index of the run given first."""

    def wrap(method):
        @functools.wraps(method)
        def guarded(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except sqlite3.DatabaseError as exc:
                if not _is_damage(exc):
                    raise
                if per_run:
                    run_id = args[0] if args else kwargs["run_id"]
                    what = _damage(self._path(run_id), exc)
                    raise DamagedStore(f"run {run_id}: its index {what}", run_id) from None
                raise DamagedStore(_damage(self.home / "basin.sqlite", exc)) from None

        return guarded

    return wrap
