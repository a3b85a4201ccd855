"""The embedded Store: run metadata and recorded arrays, shared by the app, workers and the CLI.

Each process (the app, every worker, the CLI) opens its own ``Store`` on the same home directory;
nothing is shared in memory. SQLite in WAL mode gives many concurrent readers and one writer at a
time per file, and every write below is a single transaction, so a reader in another process sees
a consistent prefix of a run, never a torn chunk. Layout under the home directory::

    basin.sqlite          one row per run (spec, status, progress, heartbeat, ...)
    runs/<run_id>.sqlite  that run's index of recorded chunks, and its named side arrays
    runs/<run_id>.bin     the recorded chunks' bytes, appended

A chunk's bytes are appended to the .bin file (plain file objects: seek, write, readinto, so it
runs wherever Python does) before the transaction that indexes them commits, so a reader that
sees the index row finds the bytes in place; bytes a dying writer left without an index row are
never read. Kept out of SQLite, records are written once instead of twice (WAL, then
checkpoint) through 4 KiB overflow pages, which capped large runs far below the sampler's pace.

A file per run means writers of different runs never contend and deleting a run frees its space.

Each chunk's index row carries the CRC-32 of its bytes (NULL in runs written before checksums:
unchecked), so damaged bytes are reported by run and record range instead of read as numbers;
only the plain numeric dtypes Basin writes are read back (never an object array from raw bytes).
A damaged file or row is a ``DamagedStore`` naming it, and the other runs keep being served.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import os
import secrets
import sqlite3
import threading
import time
import warnings
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

STATUSES = ("queued", "running", "completed", "cancelled", "failed", "interrupted")
FINAL = ("completed", "cancelled", "failed", "interrupted")
BUSY_TIMEOUT_S = 10.0
OPEN_RUN_FILES = 16  # per thread; a sweep's many runs must not exhaust file descriptors

_META_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, spec TEXT NOT NULL, status TEXT NOT NULL, created REAL NOT NULL,
    started REAL, finished REAL, progress TEXT NOT NULL, error TEXT, summary TEXT,
    worker_pid INTEGER, heartbeat REAL, cancel_requested INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS runs_status ON runs (status, created);
CREATE TABLE IF NOT EXISTS sweeps (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, spec TEXT NOT NULL, cells TEXT NOT NULL,
    created REAL NOT NULL);
"""
# A chunk's bytes lie in the run's .bin file at [offset, offset + nbytes); crc is their CRC-32
# (a column added on open to runs written before it; NULL there: unchecked).
_RUN_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    start INTEGER NOT NULL, name TEXT NOT NULL, n INTEGER NOT NULL, dtype TEXT NOT NULL,
    shape TEXT NOT NULL, offset INTEGER NOT NULL, nbytes INTEGER NOT NULL, crc INTEGER,
    PRIMARY KEY (start, name));
CREATE TABLE IF NOT EXISTS flushes (
    start INTEGER NOT NULL, name TEXT NOT NULL, n INTEGER NOT NULL, dtype TEXT NOT NULL,
    shape TEXT NOT NULL, offset INTEGER NOT NULL, nbytes INTEGER NOT NULL, crc INTEGER,
    PRIMARY KEY (start, name));
CREATE TABLE IF NOT EXISTS snapshots (
    start INTEGER NOT NULL, name TEXT NOT NULL, n INTEGER NOT NULL, dtype TEXT NOT NULL,
    shape TEXT NOT NULL, offset INTEGER NOT NULL, nbytes INTEGER NOT NULL, crc INTEGER,
    PRIMARY KEY (start, name));
CREATE TABLE IF NOT EXISTS arrays (
    name TEXT PRIMARY KEY, dtype TEXT NOT NULL, shape TEXT NOT NULL, data BLOB NOT NULL);
"""
_COLUMNS = (
    "id, spec, status, created, started, finished, progress, error, summary, worker_pid, "
    "heartbeat, cancel_requested"
)
# The dtypes Basin records (numpy's dtype.str, byte order explicit): numbers and flags only.
_DTYPES = frozenset(["|b1", "|i1", "|u1"] + [o + k + b for o in "<>" for k in "iuf" for b in "248"])
_DAMAGE_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB: the file, not the query, is wrong


@dataclass
class Progress:
    """A run's progress, as the Store keeps it (a queued run's: none of its steps done)."""

    steps_done: int
    steps_total: int
    steps_per_second: float
    eta_s: float | None
    phase: str = "sample"  # or "train": an LLC run training to w0 first; "fit": a vi run's epochs

    def as_dict(self) -> dict:
        return dict(vars(self))


@dataclass
class RunRecord:
    """One run's metadata as stored; a snapshot, re-read with ``Store.get`` to see changes."""

    id: str
    spec: dict
    status: str
    created: float
    started: float | None
    finished: float | None
    progress: dict
    error: str | None
    summary: dict | None
    worker_pid: int | None
    heartbeat: float | None
    cancel_requested: bool

    @classmethod
    def _from_row(cls, row: tuple) -> RunRecord:
        """ValueError naming the field when a JSON field is not the object it must be."""
        values = list(row)  # in _COLUMNS order; spec, progress and summary are JSON objects
        for i, field in ((1, "spec"), (6, "progress"), (8, "summary")):
            if values[i] is None and field == "summary":
                continue
            try:
                values[i] = json.loads(values[i])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"its {field} is not valid JSON ({exc})") from None
            if not isinstance(values[i], dict):
                raise ValueError(f"its {field} is not a JSON object")
        values[11] = bool(values[11])
        return cls(*values)


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


def _blob(array: np.ndarray) -> tuple[str, str, memoryview]:
    """Raw bytes + dtype + shape: no pickle, readable by any numpy. The bytes are a view of
    the array's own memory (a copy of a large chunk would cost as much as writing it)."""
    array = np.ascontiguousarray(array)
    if array.dtype.str not in _DTYPES:  # what is written is what a read accepts
        raise ValueError(f"cannot store arrays of dtype {array.dtype}: use bool, int or float")
    return array.dtype.str, json.dumps(array.shape), memoryview(array.reshape(-1)).cast("B")


def _append(file: io.RawIOBase, parts: list[memoryview]) -> int:
    """``parts`` one after another at the file's end; returns the offset of the first."""
    start = file.seek(0, os.SEEK_END)
    for data in parts:
        while data:  # a raw write may take less than asked for (e.g. past 2 GiB)
            data = data[file.write(data) :]
    return start


def _read_all(file: io.RawIOBase, view: memoryview, offset: int) -> bool:
    """Fill ``view`` from the file at ``offset`` (a read may return less than asked for); False
    when the file ends first."""
    file.seek(offset)
    while view:
        got = file.readinto(view)
        if not got:
            return False
        view = view[got:]
    return True


def _crc(parts: list[memoryview]) -> int:
    crc = 0
    for data in parts:
        crc = zlib.crc32(data, crc)
    return crc


def _crc_at(file: io.RawIOBase, offset: int, nbytes: int, block: int = 1 << 20) -> int | None:
    """The CRC-32 of the file's bytes [offset, offset + nbytes), read a block at a time; None
    when the file ends first."""
    buffer, crc = memoryview(bytearray(min(nbytes, block))), 0
    while nbytes:
        view = buffer[: min(nbytes, block)]
        if not _read_all(file, view, offset):
            return None
        crc, offset, nbytes = zlib.crc32(view, crc), offset + len(view), nbytes - len(view)
    return crc


def _fill(file: io.RawIOBase, view: memoryview, offset: int, nbytes: int, crc) -> str | None:
    """A chunk's bytes into ``view`` (their tail, when it is shorter: a read from inside the
    chunk checks the whole); why they are damaged, or None."""
    whole = view if len(view) == nbytes else memoryview(bytearray(nbytes))
    if not _read_all(file, whole, offset):
        return "cut short"
    if crc is not None and zlib.crc32(whole) != crc:
        return "checksum mismatch"
    if whole is not view:
        view[:] = whole[nbytes - len(view) :]
    return None


def _layout(where: str, name: str, dtype, shape) -> tuple[np.dtype, list[int]]:
    """An index's dtype and shape for ``name``, checked: only the dtypes Basin writes (raw bytes
    read as objects would be pointers), a list of sizes."""
    if dtype not in _DTYPES:
        raise DamagedStore(f"{where}: {name} has dtype {dtype!r}, which Basin never writes")
    try:
        sizes = json.loads(shape)
    except (TypeError, ValueError):
        sizes = None
    if not (isinstance(sizes, list) and all(isinstance(k, int) and k >= 0 for k in sizes)):
        raise DamagedStore(f"{where}: {name} has shape {shape!r}, not a list of sizes")
    return np.dtype(dtype), sizes


def _row_size(layout, start, n, offset, nbytes, crc) -> int | None:
    """Bytes a record of an index row, when its numbers can be true (else None: damaged)."""
    if layout is None or not all(isinstance(v, int) for v in (start, n, offset, nbytes)):
        return None
    if n < 1 or start < 0 or offset < 0 or not (crc is None or isinstance(crc, int)):
        return None
    dtype, shape = layout
    return dtype.itemsize * math.prod(shape[1:])


def _unblob(where: str, name: str, dtype, shape, data) -> np.ndarray:
    dtype, sizes = _layout(where, name, dtype, shape)
    if not isinstance(data, bytes) or len(data) != dtype.itemsize * math.prod(sizes):
        raise DamagedStore(f"{where}: {name} does not hold the bytes of a {dtype} {sizes} array")
    return np.frombuffer(data, dtype=dtype).reshape(sizes)


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


_last_ms = 0


SERIES = {"records": "chunks", "flushes": "flushes", "snapshots": "snapshots"}


def _table(series: str) -> str:
    if series not in SERIES:
        raise ValueError(f"series must be one of {list(SERIES)}, got {series!r}")
    return SERIES[series]


def _new_id() -> str:
    """Sortable by creation time (strictly within a process), unique by the random suffix."""
    global _last_ms
    _last_ms = max(int(time.time() * 1000), _last_ms + 1)
    seconds, ms = divmod(_last_ms, 1000)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(seconds))
    return f"{stamp}{ms:03d}-{secrets.token_hex(2)}"


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (a POSIX zombie counts until it is reaped)."""
    if os.name == "nt":  # there os.kill(pid, 0) would terminate the process, not probe it
        return _windows_pid_alive(pid)
    try:
        os.kill(pid, 0)  # signal 0 checks that the process exists without touching it
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _windows_pid_alive(pid: int) -> bool:
    """The kernel's own answer through ctypes: no third-party package needed."""
    import ctypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.OpenProcess.restype = ctypes.c_void_p
    kernel32.GetExitCodeProcess.argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_ulong))
    kernel32.CloseHandle.argtypes = (ctypes.c_void_p,)
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return ctypes.get_last_error() == 5  # ERROR_ACCESS_DENIED: it exists, not ours to query
    try:
        code = ctypes.c_ulong()
        ok = kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        return bool(ok) and code.value == 259  # STILL_ACTIVE: it has not exited
    finally:
        kernel32.CloseHandle(handle)


def _add_checksums(conn: sqlite3.Connection, run_id: str, path: Path) -> None:
    """A run index written before checksums gains their column (NULL: unchecked); one missing a
    table is damaged (a run's index is created whole before the run is visible)."""
    tables = [*SERIES.values(), "arrays"]
    columns = {t: {row[1] for row in conn.execute(f"PRAGMA table_info({t})")} for t in tables}
    if missing := [t for t in tables if not columns[t]]:
        raise DamagedStore(f"run {run_id}: its index {path} has no {missing[0]} table", run_id)
    if all("crc" in columns[t] for t in SERIES.values()):
        return
    with _tx(conn) as tx:  # another process may be adding them too: look again under the lock
        for table in SERIES.values():
            if "crc" not in {row[1] for row in tx.execute(f"PRAGMA table_info({table})")}:
                tx.execute(f"ALTER TABLE {table} ADD COLUMN crc INTEGER")


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


class Store:
    """Runs and their arrays under ``home`` (argument, else $BASIN_HOME, else ./.basin)."""

    def __init__(self, home: str | os.PathLike | None = None):
        self.home = store_home(home)
        self._pid = os.getpid()
        self._local = threading.local()
        try:
            (self.home / "runs").mkdir(parents=True, exist_ok=True)
            self._db().executescript(_META_SCHEMA)  # IF NOT EXISTS: safe from any process
        except (OSError, sqlite3.Error) as exc:
            if _is_damage(exc):
                meta = self.home / "basin.sqlite"
                raise StoreError(f"{meta} is damaged ({exc}); no run can be read from it") from None
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise StoreError(
                f"BASIN_HOME: cannot keep runs in {self.home} ({reason}); set BASIN_HOME to a "
                "directory this user can write, or leave it unset for ./.basin"
            ) from None

    # -- connections: one per thread (sqlite3 objects must not cross threads or forks) -------

    def _state(self) -> threading.local:
        if self._pid != os.getpid():  # forked: the parent's connections are not ours to use
            self._pid, self._local = os.getpid(), threading.local()
        if not hasattr(self._local, "db"):
            self._local.db = _connect(self.home / "basin.sqlite", create=True)
            self._local.runs = OrderedDict()
            self._local.appenders = {}  # run id -> its .bin file, open for appending
        return self._local

    def _db(self) -> sqlite3.Connection:
        return self._state().db

    def _path(self, run_id: str) -> Path:
        if not run_id or "/" in run_id or "\\" in run_id or run_id.startswith("."):
            raise KeyError(f"invalid run id {run_id!r}")
        return self.home / "runs" / f"{run_id}.sqlite"

    def _data_path(self, run_id: str) -> Path:
        return self._path(run_id).with_suffix(".bin")

    def written(self, run_id: str) -> int:
        """Bytes of the run's records file so far (0 before its first flush)."""
        path = self._data_path(run_id)
        return path.stat().st_size if path.exists() else 0

    def _appender(self, run_id: str) -> io.RawIOBase:
        """This thread's handle on the run's .bin file: unbuffered, so that each write is in the
        operating system's hands (visible to every process) before its index row commits."""
        files = self._state().appenders
        if run_id not in files:
            files[run_id] = open(self._data_path(run_id), "ab", buffering=0)  # noqa: SIM115
        return files[run_id]

    def _run(self, run_id: str, create: bool = False) -> sqlite3.Connection:
        """The run file's connection; KeyError once the run is deleted (by any process)."""
        path, cache = self._path(run_id), self._state().runs
        if not create and not path.exists():
            self._forget(run_id)
            raise KeyError(f"unknown run {run_id!r} (no data file {path})")
        if run_id not in cache:
            with contextlib.suppress(FileNotFoundError):  # deleted just now: connect says so
                if not create and path.stat().st_size == 0:  # sqlite would take it for new
                    raise DamagedStore(f"run {run_id}: its index {path} is empty", run_id)
            try:
                conn = _connect(path, create)
            except sqlite3.OperationalError:
                raise KeyError(f"unknown run {run_id!r} (cannot open {path})") from None
            try:
                conn.executescript(_RUN_SCHEMA) if create else _add_checksums(conn, run_id, path)
            except BaseException:
                conn.close()
                raise
            cache[run_id] = conn
            while len(cache) > OPEN_RUN_FILES:
                self._forget(next(iter(cache)))  # its connection and its .bin file
        cache.move_to_end(run_id)
        return cache[run_id]

    def _forget(self, run_id: str) -> None:
        conn = self._state().runs.pop(run_id, None)
        if conn is not None:
            conn.close()
        appender = self._state().appenders.pop(run_id, None)
        if appender is not None:
            appender.close()

    def close(self) -> None:
        """Close this thread's connections (others close when their thread's Store is dropped)."""
        state = self._state()
        for conn in state.runs.values():
            conn.close()
        state.runs.clear()
        for appender in state.appenders.values():
            appender.close()
        state.appenders.clear()
        state.db.close()
        del self._local.db

    # -- metadata ------------------------------------------------------------------------------

    @_names_damage(per_run=False)
    def create(self, spec: dict, held_by: int | None = None) -> str:
        """A new queued run, e.g. id "20250131-142501123-9f3a" (UTC time to the ms, random);
        ``held_by``: created running, held by that process (a Ray driver: no local worker may
        take it meanwhile), which must beat for it (``mark_stale``)."""
        spec_json = json.dumps(spec)
        vi = spec.get("vi") if spec.get("kind") == "vi" else None  # a fit counts its epochs
        total = vi.get("epochs", 0) if isinstance(vi, dict) else spec.get("steps", 0)
        queued = Progress(0, total, 0.0, None, "fit" if vi else "sample").as_dict()
        run_id = _new_id()
        while self._path(run_id).exists():
            run_id = _new_id()
        self._run(run_id, create=True)  # the file exists before anyone can see the run
        with _tx(self._db()) as db:
            db.execute(
                "INSERT INTO runs (id, spec, status, created, progress) VALUES (?, ?, ?, ?, ?)",
                (run_id, spec_json, "queued", time.time(), json.dumps(queued)),
            )
            if held_by is not None:
                self._hold(db, run_id, held_by)
        return run_id

    @staticmethod
    def _hold(db: sqlite3.Connection, run_id: str, pid: int) -> None:
        now = time.time()
        db.execute(
            "UPDATE runs SET status = 'running', started = ?, finished = NULL, worker_pid = ?, "
            "heartbeat = ?, error = NULL, cancel_requested = 0 WHERE id = ?",
            (now, pid, now, run_id),
        )

    @_names_damage(per_run=False)
    def hold(
        self, run_id: str, pid: int, statuses: tuple[str, ...], holder: int | None = None
    ) -> bool:
        """Make the run running under process ``pid`` if its status is one of ``statuses`` (and,
        given ``holder``, it is held by that process): a Ray driver taking a queued or
        interrupted run, or adopting the runs the app created for it, in one transaction, so no
        local worker claims it in between. False if it was not taken."""
        with _tx(self._db()) as db:
            sql = "SELECT status, worker_pid FROM runs WHERE id = ?"
            row = db.execute(sql, (run_id,)).fetchone()
            if row is None or row[0] not in statuses or holder not in (None, row[1]):
                return False
            self._hold(db, run_id, pid)
        return True

    @_names_damage(per_run=True)
    def array_names(self, run_id: str) -> list[str]:
        """The names of the run's side arrays (``put_array``)."""
        return [r[0] for r in self._run(run_id).execute("SELECT name FROM arrays ORDER BY name")]

    def _record(self, row: tuple) -> RunRecord | DamagedStore:
        try:
            return RunRecord._from_row(row)
        except ValueError as exc:
            where = self.home / "basin.sqlite"
            return DamagedStore(f"run {row[0]}: {exc} in {where}", row[0])

    @_names_damage(per_run=False)
    def get(self, run_id: str) -> RunRecord:
        """The run's record; DamagedStore when its row is damaged."""
        row = self._db().execute(f"SELECT {_COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise KeyError(f"unknown run {run_id!r} in {self.home / 'basin.sqlite'}")
        record = self._record(row)
        if isinstance(record, DamagedStore):
            raise record
        return record

    def list(self, status: str | None = None) -> list[RunRecord]:
        """Newest first; ``status`` filters to one of STATUSES. Runs whose row is damaged are
        left out (``entries`` names them)."""
        return [r for r in self.entries(status) if isinstance(r, RunRecord)]

    @_names_damage(per_run=False)
    def entries(self, status: str | None = None) -> list[RunRecord | DamagedStore]:
        """Every run newest first: its record, or a DamagedStore saying what in its row is
        damaged (a spec that is not JSON, ...), so that one bad row hides no other run."""
        if status is not None and status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        where, args = ("WHERE status = ?", (status,)) if status else ("", ())
        sql = f"SELECT {_COLUMNS} FROM runs {where} ORDER BY created DESC, rowid DESC"
        return [self._record(r) for r in self._db().execute(sql, args).fetchall()]

    @_names_damage(per_run=False)
    def _update(self, run_id: str, sql: str, args: tuple = ()) -> None:
        with _tx(self._db()) as db:
            if db.execute(f"UPDATE runs SET {sql} WHERE id = ?", (*args, run_id)).rowcount == 0:
                raise KeyError(f"unknown run {run_id!r}")

    @_names_damage(per_run=False)
    def claim(self, worker_pid: int, run_id: str | None = None) -> RunRecord | None:
        """Take the oldest queued run (or ``run_id``, when still queued: a foreground run); the
        write lock makes two claimers never take the same. A run whose row is damaged fails
        with the reason instead (no worker dies on it) and the next is taken."""
        while True:
            now = time.time()
            with _tx(self._db()) as db:
                if run_id is None:
                    query, args = "ORDER BY created, rowid LIMIT 1", ()
                else:
                    query, args = "AND id = ?", (run_id,)
                row = db.execute(
                    f"SELECT id FROM runs WHERE status = 'queued' {query}", args
                ).fetchone()
                if row is None:
                    return None
                db.execute(
                    "UPDATE runs SET status = 'running', started = ?, finished = NULL, "
                    "worker_pid = ?, heartbeat = ?, error = NULL WHERE id = ?",
                    (now, worker_pid, now, row[0]),
                )
            try:
                return self.get(row[0])
            except DamagedStore as exc:
                self.finish(row[0], "failed", error=str(exc))

    def heartbeat(self, run_id: str) -> None:
        self._update(run_id, "heartbeat = ?", (time.time(),))

    def set_progress(self, run_id: str, progress: dict) -> None:
        """Replace the progress dict; a worker that reports progress is alive, so beat too."""
        self._update(run_id, "progress = ?, heartbeat = ?", (json.dumps(progress), time.time()))

    def finish(
        self, run_id: str, status: str, error: str | None = None, summary: dict | None = None
    ) -> None:
        if status not in FINAL:
            raise ValueError(f"finish status must be one of {FINAL}, got {status!r}")
        summary_json = None if summary is None else json.dumps(summary)
        self._update(
            run_id,
            "status = ?, finished = ?, error = ?, summary = ?",
            (status, time.time(), error, summary_json),
        )

    def requeue(self, run_id: str) -> None:
        """Back to queued for a worker to resume; progress and recorded arrays are kept."""
        self._update(
            run_id,
            "status = 'queued', started = NULL, finished = NULL, error = NULL, worker_pid = NULL,"
            " heartbeat = NULL, cancel_requested = 0",
        )

    @_names_damage(per_run=False)
    def request_cancel(self, run_id: str) -> None:
        """Queued runs end now; a running one is flagged, and its worker stops at its next check."""
        with _tx(self._db()) as db:
            row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise KeyError(f"unknown run {run_id!r}")
            if row[0] == "queued":
                sql = "UPDATE runs SET status = 'cancelled', finished = ? WHERE id = ?"
                db.execute(sql, (time.time(), run_id))
            elif row[0] == "running":
                db.execute("UPDATE runs SET cancel_requested = 1 WHERE id = ?", (run_id,))

    @_names_damage(per_run=False)
    def mark_stale(self, timeout_s: float = 10.0, alive=None) -> list[str]:
        """Running runs whose worker died or went silent become interrupted; returns their ids."""
        alive = alive or _pid_alive
        now, stale = time.time(), []
        with _tx(self._db()) as db:
            rows = db.execute(
                "SELECT id, worker_pid, heartbeat, started FROM runs WHERE status = 'running'"
            ).fetchall()
            for run_id, pid, beat, started in rows:
                age = now - (beat or started or now)
                gone = pid is not None and not alive(pid)
                if age <= timeout_s and not gone:
                    continue
                why = "process gone; " if gone else ""
                error = f"worker {pid} stopped ({why}no heartbeat for {age:.0f} s)"
                db.execute(
                    "UPDATE runs SET status = 'interrupted', finished = ?, error = ? WHERE id = ?",
                    (now, error, run_id),
                )
                stale.append(run_id)
        return stale

    @_names_damage(per_run=False)
    def delete(self, run_id: str) -> None:
        """Remove the run; a worker still writing it gets KeyError on its next call."""
        with _tx(self._db()) as db:
            if db.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount == 0:
                raise KeyError(f"unknown run {run_id!r}")
        self._forget(run_id)
        path = self._path(run_id)
        for suffix in ("", "-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
        self._data_path(run_id).unlink(missing_ok=True)

    # -- sweeps: named sets of runs ----------------------------------------------------------

    @_names_damage(per_run=False)
    def create_sweep(self, kind: str, spec: dict, cells: list[dict]) -> str:
        """A sweep over runs already created; each cell names its ``run_id`` and what it varies
        (problem, sampler, step size, ...). Results are computed from the runs when read."""
        sweep_id = "sweep-" + _new_id()
        with _tx(self._db()) as db:
            db.execute(
                "INSERT INTO sweeps (id, kind, spec, cells, created) VALUES (?, ?, ?, ?, ?)",
                (sweep_id, kind, json.dumps(spec), json.dumps(cells), time.time()),
            )
        return sweep_id

    @_names_damage(per_run=False)
    def get_sweep(self, sweep_id: str) -> dict:
        sql = "SELECT id, kind, spec, cells, created FROM sweeps WHERE id = ?"
        row = self._db().execute(sql, (sweep_id,)).fetchone()
        if row is None:
            raise KeyError(f"unknown sweep {sweep_id!r}")
        return {
            "id": row[0],
            "kind": row[1],
            "spec": json.loads(row[2]),
            "cells": json.loads(row[3]),
            "created": row[4],
        }

    @_names_damage(per_run=False)
    def list_sweeps(self) -> list[dict]:
        """Newest first."""
        ids = self._db().execute("SELECT id FROM sweeps ORDER BY created DESC, rowid DESC")
        return [self.get_sweep(row[0]) for row in ids.fetchall()]

    @_names_damage(per_run=False)
    def delete_sweep(self, sweep_id: str) -> None:
        """The sweep and every run of it (a running one is cancelled by its deletion)."""
        for cell in self.get_sweep(sweep_id)["cells"]:
            with contextlib.suppress(KeyError):
                self.delete(cell["run_id"])
        with _tx(self._db()) as db:
            db.execute("DELETE FROM sweeps WHERE id = ?", (sweep_id,))

    # -- recorded arrays -----------------------------------------------------------------------

    @_names_damage(per_run=True)
    def append(
        self,
        run_id: str,
        step: int,
        arrays: dict[str, np.ndarray | list[np.ndarray]],
        series: str = "records",
    ) -> None:
        """One chunk of records starting at record ``step``, all names in one transaction.

        Chunks must be contiguous, so a retried flush is refused instead of duplicated, and every
        chunk carries the names, dtypes and trailing shapes of the first one. ``series``:
        "records" (per recorded step), "flushes" (one row per flush: live signals such as the
        running LLC, whose cadence is the flush's) or "snapshots" (full positions of a model
        whose records hold a projection, for the PCA of its trajectory). A name may map to a
        list of arrays, the chunk's parts along the first axis: they are written one after
        another, never concatenated in memory (at thin 1, a flush is hundreds of MB).
        """
        table = _table(series)
        parts = {
            name: [np.asarray(p) for p in (a if isinstance(a, list) else [a])]
            for name, a in arrays.items()
        }
        lengths, heads, blobs = set(), {}, {}
        for name, pieces in parts.items():
            if not pieces or any(p.ndim == 0 for p in pieces):
                raise ValueError(f"{name}: chunk arrays need a leading (record) axis")
            kinds = {(p.dtype.str, p.shape[1:]) for p in pieces}
            if len(kinds) != 1:
                raise ValueError(f"{name}: the parts of a chunk differ in dtype or shape: {kinds}")
            lengths.add(sum(p.shape[0] for p in pieces))
            heads[name] = pieces[0]
            blobs[name] = [_blob(p)[2] for p in pieces]  # views of the bytes; refuses objects
        if not parts or len(lengths) != 1:
            raise ValueError(f"chunk arrays must share one leading length, got {lengths}")
        n = lengths.pop()
        with _tx(self._run(run_id)) as conn:
            end = self._end(conn, table)
            if step != end:
                raise ValueError(f"run {run_id}: chunk starts at {step}, expected {end}")
            rows = conn.execute(f"SELECT name, dtype, shape FROM {table} WHERE start = 0")
            first = {name: (dtype, json.loads(shape)[1:]) for name, dtype, shape in rows}
            if first and set(first) != set(arrays):
                raise ValueError(f"chunk names {sorted(arrays)} differ from {sorted(first)}")
            for name, a in heads.items():
                if name in first and first[name] != (a.dtype.str, [*a.shape[1:]]):
                    raise ValueError(f"{name}: {a.dtype} {a.shape[1:]} differs from chunk 0")
            if n:
                out, index = self._appender(run_id), []
                for name, views in blobs.items():
                    offset, nbytes = _append(out, views), sum(len(data) for data in views)
                    shape = json.dumps([n, *heads[name].shape[1:]])
                    head = (step, name, n, heads[name].dtype.str, shape)
                    index.append((*head, offset, nbytes, _crc(views)))
                conn.executemany(
                    f"INSERT INTO {table} (start, name, n, dtype, shape, offset, nbytes, crc) "
                    "VALUES (?,?,?,?,?,?,?,?)",
                    index,
                )

    @staticmethod
    def _end(conn: sqlite3.Connection, table: str = "chunks") -> int:
        row = conn.execute(f"SELECT start + n FROM {table} ORDER BY start DESC LIMIT 1").fetchone()
        return row[0] if row else 0

    @_names_damage(per_run=True)
    def records(self, run_id: str, series: str = "records") -> int:
        return self._end(self._run(run_id), _table(series))

    def read(
        self,
        run_id: str,
        since: int = 0,
        names: list[str] | None = None,
        series: str = "records",
    ) -> dict[str, np.ndarray]:
        """Records ``since`` onward, concatenated per name; {} before the first chunk.

        Names never recorded are left out (not every kernel records ``accepted``). Chunks whose
        bytes are damaged raise CorruptRecords naming their record ranges.
        """
        out, damaged = self._read(run_id, since, names, series)
        if damaged:
            raise CorruptRecords(run_id, damaged, series)
        return out

    @_names_damage(per_run=True)
    def _read(
        self, run_id: str, since: int, names: list[str] | None, series: str
    ) -> tuple[dict[str, np.ndarray], list[tuple[int, int, str]]]:
        """``read``'s arrays with the damaged chunks left out, and (first, last, why) of each."""
        since = max(int(since), 0)
        layouts, spans = self._index(run_id, series, since, names)
        out, damaged = {}, {}  # damaged: first record -> (last, why)
        with self._records_file(run_id, spans) as f:
            # Each name's records are read straight into one array: no per-chunk copy to join.
            for name, (dtype, shape) in layouts.items():
                array = np.empty((sum(n - k for _, n, k, *_ in spans[name]), *shape[1:]), dtype)
                flat, at = memoryview(array.reshape(-1)).cast("B"), 0
                for start, n, skip, offset, nbytes, crc in spans[name]:
                    size = (n - skip) * (nbytes // n)
                    why = _fill(f, flat[at : at + size], offset, nbytes, crc)
                    if why:
                        damaged.setdefault(max(start, since), (start + n - 1, f"{name}: {why}"))
                    at += size
                out[name] = array
        if damaged:  # every name leaves out the same records, so that they stay aligned
            keep = np.ones(len(next(iter(out.values()))), bool)
            for a, (b, _) in damaged.items():
                keep[a - since : b + 1 - since] = False
            out = {name: array[keep] for name, array in out.items()}
        return out, [(a, b, why) for a, (b, why) in sorted(damaged.items())]

    def _index(self, run_id: str, series: str, since: int, names: list[str] | None):
        """The layout (dtype, shape) of each name and its chunks' spans from ``since`` on:
        (start, records, records skipped, offset, nbytes, crc), every row checked against its
        name's layout, so that no damaged row makes a read wander or an array of objects."""
        table = _table(series)
        filt, args = "", ()
        if names is not None:
            filt, args = f" AND name IN ({','.join('?' * len(names))})", tuple(names)
        # From the chunk holding `since` on (the primary key's index finds it), in one snapshot.
        sql = (
            f"SELECT start, name, n, dtype, offset, nbytes, crc FROM {table} WHERE start >= "
            f"COALESCE((SELECT MAX(start) FROM {table} WHERE start <= ?), 0) AND start + n > ?"
            f"{filt} ORDER BY start"
        )
        first = f"SELECT name, dtype, shape FROM {table} WHERE start = 0{filt}"
        with _tx(self._run(run_id), "DEFERRED") as conn:
            heads = conn.execute(first, args).fetchall()
            rows = conn.execute(sql, (since, since, *args)).fetchall()
        where = f"run {run_id}"
        layouts = {name: _layout(where, name, dtype, shape) for name, dtype, shape in heads}
        spans = {name: [] for name in layouts}
        for start, name, n, dtype, offset, nbytes, crc in rows:
            size = _row_size(layouts.get(name), start, n, offset, nbytes, crc)
            if size is None or dtype != layouts[name][0].str or nbytes != n * size:
                last = start + n - 1 if isinstance(start, int) and isinstance(n, int) else "?"
                raise DamagedStore(
                    f"{where}: the index row of {series} {start}-{last} ({name}) is damaged "
                    f"in {self._path(run_id)}",
                    run_id,
                )
            spans[name].append((start, n, max(since - start, 0), offset, nbytes, crc))
        return layouts, spans

    @contextlib.contextmanager
    def _records_file(self, run_id: str, spans: dict):
        """The run's .bin file to read (when there is anything to read); an error reading it is
        named by the run, never blamed on where an export goes."""
        path = self._data_path(run_id)
        try:
            with open(path, "rb", buffering=0) if any(spans.values()) else io.BytesIO() as f:
                yield f
        except OSError as exc:
            message = f"run {run_id}: cannot read its records file {path} ({exc.strerror or exc})"
            raise DamagedStore(message, run_id) from None

    @_names_damage(per_run=True)
    def put_array(self, run_id: str, name: str, array: np.ndarray) -> None:
        """A side array (projection, snapshots, w0) replaced as a whole, in one transaction."""
        with _tx(self._run(run_id)) as conn:
            conn.execute("INSERT OR REPLACE INTO arrays VALUES (?, ?, ?, ?)", (name, *_blob(array)))

    @_names_damage(per_run=True)
    def get_array(self, run_id: str, name: str) -> np.ndarray | None:
        sql = "SELECT dtype, shape, data FROM arrays WHERE name = ?"
        row = self._run(run_id).execute(sql, (name,)).fetchone()
        return None if row is None else _unblob(f"run {run_id}", name, *row)

    # -- damage ------------------------------------------------------------------------------

    def check(self) -> list[str]:
        """What is damaged, one line each naming the file or run: basin.sqlite, runs' rows,
        their indexes, side arrays and records (every chunk's checksum: reads every byte)."""
        try:
            problems = self._check_meta()
            entries = self.entries()
        except DamagedStore as exc:
            return [str(exc)]
        for entry in entries:
            if isinstance(entry, DamagedStore):
                problems.append(str(entry))
            run_id = entry.run_id if isinstance(entry, DamagedStore) else entry.id
            try:
                problems += self._check_run(run_id)
            except DamagedStore as exc:
                problems.append(str(exc))
            except KeyError as exc:  # its index is gone
                problems.append(f"run {run_id}: {exc.args[0]}")
        return problems

    @_names_damage(per_run=False)
    def _check_meta(self) -> list[str]:
        bad = [row for (row,) in self._db().execute("PRAGMA quick_check") if row != "ok"]
        lines = " ".join(bad).split("\n")[:4]  # sqlite's own words, on one line
        return [f"{self.home / 'basin.sqlite'} is damaged ({'; '.join(lines)})"] if bad else []

    @_names_damage(per_run=True)
    def _check_run(self, run_id: str) -> list[str]:
        conn, where = self._run(run_id), f"run {run_id}"
        bad = [row for (row,) in conn.execute("PRAGMA quick_check") if row != "ok"]
        if bad:
            lines = " ".join(bad).split("\n")[:4]
            return [f"{where}: its index {self._path(run_id)} is damaged ({'; '.join(lines)})"]
        problems = []
        for name, dtype, shape, data in conn.execute("SELECT * FROM arrays").fetchall():
            try:
                _unblob(where, name, dtype, shape, data)
            except DamagedStore as exc:
                problems.append(str(exc))
        for series in SERIES:
            try:  # every row checked, then every chunk's bytes, a block at a time
                _, spans = self._index(run_id, series, 0, None)
                damaged = {}
                with self._records_file(run_id, spans) as f:
                    for name, chunks in spans.items():
                        for start, n, _, offset, nbytes, crc in chunks:
                            got = _crc_at(f, offset, nbytes)
                            if got is None or (crc is not None and got != crc):
                                why = "cut short" if got is None else "checksum mismatch"
                                damaged.setdefault(start, (start + n - 1, f"{name}: {why}"))
            except DamagedStore as exc:
                problems.append(str(exc))
                continue
            if damaged:
                ranges = [(a, b, why) for a, (b, why) in sorted(damaged.items())]
                problems.append(str(CorruptRecords(run_id, ranges, series)))
        return problems

    # -- export --------------------------------------------------------------------------------

    def _export(
        self, run_id: str, burn_in: int, thin: int, damaged: list | None
    ) -> dict[str, np.ndarray]:
        """Records after burn-in, every thin-th, chain-major ([chains, draws, ...]); 1-D stay.
        Damaged chunks raise CorruptRecords, or are left out and listed in ``damaged``."""
        if burn_in < 0 or thin < 1:
            raise ValueError(f"need burn_in >= 0 and thin >= 1, got {burn_in}, {thin}")
        data, bad = self._read(run_id, burn_in, None, "records")
        if bad and damaged is None:
            raise CorruptRecords(run_id, bad)
        if bad:
            damaged.extend(bad)
        data = {name: a[::thin] for name, a in data.items()}
        return {name: np.swapaxes(a, 0, 1) if a.ndim > 1 else a for name, a in data.items()}

    def export_npz(
        self, run_id: str, path, burn_in: int = 0, thin: int = 1, damaged: list | None = None
    ) -> Path:
        """The recorded arrays chain-major, e.g. position [chains, draws, d], step [draws]. A
        run with d > 64 records position [chains, draws, k], its positions' coordinates on the
        orthonormal columns of ``projection`` [d, k], which the file holds too. With a list as
        ``damaged``, damaged chunks are left out and their (first, last, why) appended to it."""
        _writable(path)
        arrays = self._export(run_id, burn_in, thin, damaged)
        basis = self.get_array(run_id, "projection")
        if basis is not None:
            arrays["projection"] = basis

        def write(temp: Path) -> None:
            with open(temp, "wb") as f:  # a file object: np.savez must not append ".npz"
                np.savez(f, **arrays)

        return _replace(path, write)

    def export_netcdf(
        self, run_id: str, path, burn_in: int = 0, thin: int = 1, damaged: list | None = None
    ) -> Path:
        """ArviZ InferenceData: position in posterior, per-chain statistics in sample_stats;
        ``damaged`` as for ``export_npz``."""
        import arviz as az  # heavy; only exports need it

        _writable(path)
        data = self._export(run_id, burn_in, thin, damaged)
        step = data.pop("step", None)
        per_chain = {k: v for k, v in data.items() if v.ndim > 1}
        posterior = {"position": per_chain.pop("position")} if "position" in per_chain else {}
        basis = self.get_array(run_id, "projection")  # d > 64: projected coordinates
        axis = "dim" if basis is None else "projected_dim"
        coords, dims, constant = {}, {}, {}
        if posterior:
            coords[axis] = np.arange(posterior["position"].shape[2])
            dims["position"] = [axis]
        if basis is not None:
            constant["projection"] = basis
            coords["param"] = np.arange(basis.shape[0])
            dims["projection"] = ["param", axis]
        if step is not None:
            coords["draw"] = step
        with warnings.catch_warnings():  # "more chains than draws" is expected for short runs
            warnings.simplefilter("ignore", UserWarning)
            idata = az.from_dict(
                posterior,
                sample_stats=per_chain,
                constant_data=constant or None,
                coords=coords,
                dims=dims,
            )
        return _replace(path, lambda temp: idata.to_netcdf(str(temp)))


def _writable(path) -> None:
    """An export replaces its target by a rename, which a pipe or a device cannot take."""
    path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        raise ValueError(
            f"cannot export to {path}: not a regular file (a pipe, device or folder); an export "
            "is written to a temporary file beside its target and renamed onto it"
        )


def _replace(path, write) -> Path:
    """``write(temp)`` to a temporary file beside ``path``, then renamed onto it: a process
    killed midway leaves the old file whole (the temporary one is removed on any error)."""
    target = Path(os.path.realpath(path))  # through a symlink: its file is replaced, not it
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        write(temp)
        with open(temp, "rb+") as f:
            os.fsync(f.fileno())  # the bytes on disk before the name points at them
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return Path(path)
