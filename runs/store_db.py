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
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: never corrupt, at most the last tx
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


def _is_damage(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", 0) or 0  # extended codes keep the primary's low byte
    return isinstance(exc, sqlite3.DatabaseError) and code & 0xFF in _DAMAGE_CODES


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
                    where = f"run {run_id}: its index {self._path(run_id)}"
                    raise DamagedStore(f"{where} is damaged ({exc})", run_id) from None
                raise DamagedStore(f"{self.home / 'basin.sqlite'} is damaged ({exc})") from None

        return guarded

    return wrap
