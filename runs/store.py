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

This module keeps the metadata (runs, sweeps, their statuses); ``runs.store_chunks`` the recorded
arrays, ``runs.store_export`` their exports and ``runs.store_db`` the SQLite they share.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from runs import store_check
from runs.liveness import alive as _alive
from runs.store_check import STATUSES
from runs.store_chunks import _RUN_SCHEMA, ChunkFiles, _add_checksums
from runs.store_db import (
    BUSY_TIMEOUT_S,
    DamagedStore,
    LostClaim,
    NotResumable,
    StoreError,
    _connect,
    _damage,
    _is_damage,
    _names_damage,
    _tx,
    store_home,
)
from runs.store_export import Exports

FINAL = ("completed", "cancelled", "failed", "interrupted")
RESUMABLE = ("interrupted", "cancelled")  # what a resume (the Runs page, `jobs resume`) takes
REQUEUABLE = (*RESUMABLE, "failed")  # and a sweep's retry
OPEN_RUN_FILES = 16  # per thread; a sweep's many runs must not exhaust file descriptors

_META_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, spec TEXT NOT NULL, status TEXT NOT NULL, created REAL NOT NULL,
    started REAL, finished REAL, progress TEXT NOT NULL, error TEXT, summary TEXT,
    worker_pid INTEGER, heartbeat REAL, cancel_requested INTEGER NOT NULL DEFAULT 0,
    claim TEXT);
CREATE INDEX IF NOT EXISTS runs_status ON runs (status, created);
CREATE TABLE IF NOT EXISTS sweeps (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, spec TEXT NOT NULL, cells TEXT NOT NULL,
    created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value);
"""
# claim: a random token each claim of a run draws (claim, hold); its writer's writes check it,
# so a writer whose run was taken over (interrupted, then resumed elsewhere) writes nothing more
_COLUMNS = (
    "id, spec, status, created, started, finished, progress, error, summary, worker_pid, "
    "heartbeat, cancel_requested"
)


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
        if problem := store_check.row_problem(values):
            raise ValueError(problem)
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


_last_ms = 0


def _new_id() -> str:
    """Sortable by creation time (strictly within a process), unique by the random suffix."""
    global _last_ms
    _last_ms = max(int(time.time() * 1000), _last_ms + 1)
    seconds, ms = divmod(_last_ms, 1000)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(seconds))
    return f"{stamp}{ms:03d}-{secrets.token_hex(2)}"


class Store(ChunkFiles, Exports):
    """Runs and their arrays under ``home`` (argument, else $BASIN_HOME, else ./.basin): their
    metadata and sweeps here, their recorded arrays (``ChunkFiles``) and exports (``Exports``)."""

    def __init__(self, home: str | os.PathLike | None = None):
        self.home = store_home(home)
        self._pid = os.getpid()
        self._local = threading.local()
        self._claims: dict[str, str] = {}  # run id -> the token of this Store's claim of it
        try:
            self._open()
        except BaseException:
            if hasattr(self._local, "db"):  # a Store that cannot serve keeps no connection open
                self._local.db.close()
            raise

    def _open(self) -> None:
        """The home made, basin.sqlite checked (never re-initialised beside runs it lost) and
        its schema brought up to date; StoreError saying what is wrong otherwise."""
        try:
            (self.home / "runs").mkdir(parents=True, exist_ok=True)
            store_check.refuse_lost_file(self.home)  # never re-initialised silently
            db = self._db()
            store_check.refuse_lost_tables(self.home, db)
            db.executescript(_META_SCHEMA)  # IF NOT EXISTS: safe from any process
            if "claim" not in {row[1] for row in db.execute("PRAGMA table_info(runs)")}:
                with contextlib.suppress(sqlite3.OperationalError):  # another process did
                    db.execute("ALTER TABLE runs ADD COLUMN claim TEXT")
            store_check.date_index(db)
            store_check.refuse_recreated(self.home, db)
        except (OSError, sqlite3.Error) as exc:
            if _is_damage(exc):
                what = _damage(self.home / "basin.sqlite", exc)
                end = "; no run can be read from it" if what.endswith(")") else ""
                raise StoreError(what + end) from None
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
                token = self._hold(db, run_id, held_by)
        if held_by is not None:
            self._claims[run_id] = token
        return run_id

    @staticmethod
    def _hold(db: sqlite3.Connection, run_id: str, pid: int) -> str:
        """The run running under ``pid`` with a new claim; returns the claim's token."""
        now, token = time.time(), secrets.token_hex(8)
        db.execute(
            "UPDATE runs SET status = 'running', started = ?, finished = NULL, worker_pid = ?, "
            "heartbeat = ?, error = NULL, cancel_requested = 0, claim = ? WHERE id = ?",
            (now, pid, now, token, run_id),
        )
        return token

    def _claimed(self, run_id: str, token: str) -> None:
        """This Store now writes the run: its writes check ``token``. First, a write of the
        run's previous writer still in flight ends (the index's write lock is taken once), so
        the records this writer finds are final: every later write of the old one is refused."""
        self._claims[run_id] = token
        deadline = time.monotonic() + 6 * BUSY_TIMEOUT_S
        while True:
            try:
                with _tx(self._run(run_id)):
                    return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    return
            except (KeyError, StoreError, sqlite3.DatabaseError):  # its own run reports those
                return

    def _check_claim(self, run_id: str, db: sqlite3.Connection | None = None) -> None:
        """LostClaim when this Store claimed the run and the claim is no longer its own."""
        token = self._claims.get(run_id)
        if token is None:
            return
        sql = "SELECT claim, worker_pid FROM runs WHERE id = ?"
        row = (db or self._db()).execute(sql, (run_id,)).fetchone()
        if row is None:
            raise KeyError(f"unknown run {run_id!r}")
        if row[0] != token:
            raise LostClaim(
                f"run {run_id} was taken over (resumed by process {row[1]}); this process "
                "stopped without writing more"
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
            token = self._hold(db, run_id, pid)
        self._claimed(run_id, token)
        return True

    def _record(self, row: tuple) -> RunRecord | DamagedStore:
        try:
            return RunRecord._from_row(row)
        except ValueError as exc:
            where = self.home / "basin.sqlite"
            return DamagedStore(f"run {row[0]}: {exc} in {where}", row[0])

    @_names_damage(per_run=False)
    def get(self, run_id: str, owned: bool = False) -> RunRecord:
        """The run's record; DamagedStore when its row is damaged. ``owned`` (a writer between
        blocks): LostClaim once the run was taken over."""
        if owned:
            self._check_claim(run_id)
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
        """One UPDATE of the run; LostClaim (nothing written) once this Store's claim of it is
        no longer its own."""
        with _tx(self._db()) as db:
            self._check_claim(run_id, db)
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
                token = secrets.token_hex(8)
                db.execute(
                    "UPDATE runs SET status = 'running', started = ?, finished = NULL, "
                    "worker_pid = ?, heartbeat = ?, error = NULL, claim = ? WHERE id = ?",
                    (now, worker_pid, now, token, row[0]),
                )
            self._claimed(row[0], token)
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
    ) -> bool:
        """The run's end: its status, error and summary. False, with nothing written, when this
        Store's claim of the run was taken over (its new writer ends it)."""
        if status not in FINAL:
            raise ValueError(f"finish status must be one of {FINAL}, got {status!r}")
        summary_json = None if summary is None else json.dumps(summary)
        try:
            self._update(
                run_id,
                "status = ?, finished = ?, error = ?, summary = ?",
                (status, time.time(), error, summary_json),
            )
        except LostClaim:
            return False
        return True

    @_names_damage(per_run=False)
    def requeue(self, run_id: str, statuses: tuple[str, ...] = REQUEUABLE) -> bool:
        """Back to queued for a worker to resume, if its status is one of ``statuses`` (in one
        transaction: a second click or tab finds it queued or running); progress and recorded
        arrays are kept. False if it was queued already; NotResumable if it is running or
        ended otherwise (completed: nothing to resume)."""
        with _tx(self._db()) as db:
            row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise KeyError(f"unknown run {run_id!r}")
            if row[0] == "queued":
                return False
            if row[0] not in statuses:
                allowed = ", ".join(statuses[:-1]) + f" or {statuses[-1]}"
                raise NotResumable(f"run {run_id} is {row[0]}; only {allowed} runs can be resumed")
            db.execute(
                "UPDATE runs SET status = 'queued', started = NULL, finished = NULL, error = NULL,"
                " worker_pid = NULL, heartbeat = NULL, cancel_requested = 0, claim = NULL "
                "WHERE id = ?",
                (run_id,),
            )
        return True

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
        alive = alive or _alive
        now, stale = time.time(), []
        with _tx(self._db()) as db:
            rows = db.execute(
                "SELECT id, worker_pid, heartbeat, started FROM runs WHERE status = 'running'"
            ).fetchall()
            for run_id, pid, beat, started in rows:
                if not all(isinstance(v, (int, float, type(None))) for v in (pid, beat, started)):
                    continue  # a row of the wrong types: `check` and `list` name it
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
        self._claims.pop(run_id, None)
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

    # -- damage ------------------------------------------------------------------------------

    def check(self) -> list[str]:
        """What is damaged, one line each naming the file or run (``runs.store_check``)."""
        return store_check.check(self)

    @_names_damage(per_run=False)
    def _check_meta(self) -> list[str]:
        bad = [row for (row,) in self._db().execute("PRAGMA quick_check") if row != "ok"]
        lines = " ".join(bad).split("\n")[:4]  # sqlite's own words, on one line
        return [f"{self.home / 'basin.sqlite'} is damaged ({'; '.join(lines)})"] if bad else []
