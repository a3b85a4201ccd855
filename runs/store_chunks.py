"""A run's recorded arrays: chunks of raw bytes appended to ``runs/<run_id>.bin``, indexed (with
their CRC-32) in ``runs/<run_id>.sqlite`` beside the run's named side arrays; the Store's methods
that append, read and check them (``ChunkFiles``, a part of ``runs.store.Store``).

A chunk's bytes are appended before the transaction that indexes them commits, so a reader that
sees the index row finds the bytes in place; bytes a dying writer left without an index row are
never read. Only the plain numeric dtypes Basin writes are read back (never an object array from
raw bytes), and damaged bytes are reported by run and record range (``CorruptRecords``).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sqlite3
import zlib
from pathlib import Path

import numpy as np

from runs.store_db import CorruptRecords, DamagedStore, _names_damage, _tx

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
# The dtypes Basin records (numpy's dtype.str, byte order explicit): numbers and flags only.
_DTYPES = frozenset(["|b1", "|i1", "|u1"] + [o + k + b for o in "<>" for k in "iuf" for b in "248"])


SERIES = {"records": "chunks", "flushes": "flushes", "snapshots": "snapshots"}


def _table(series: str) -> str:
    if series not in SERIES:
        raise ValueError(f"series must be one of {list(SERIES)}, got {series!r}")
    return SERIES[series]


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


class ChunkFiles:
    """The Store's recorded arrays (``runs.store.Store`` holds the connections it uses: ``_run``,
    ``_path``, ``_data_path`` and ``_appender``, and ``_check_claim``: a writer's append checks,
    under the index's write lock, that the run is still its own)."""

    @_names_damage(per_run=True)
    def array_names(self, run_id: str) -> list[str]:
        """The names of the run's side arrays (``put_array``)."""
        return [r[0] for r in self._run(run_id).execute("SELECT name FROM arrays ORDER BY name")]

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
            self._check_claim(run_id)  # a writer whose run was taken over appends nothing
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
            self._check_claim(run_id)
            conn.execute("INSERT OR REPLACE INTO arrays VALUES (?, ?, ?, ?)", (name, *_blob(array)))

    @_names_damage(per_run=True)
    def get_array(self, run_id: str, name: str) -> np.ndarray | None:
        sql = "SELECT dtype, shape, data FROM arrays WHERE name = ?"
        row = self._run(run_id).execute(sql, (name,)).fetchone()
        return None if row is None else _unblob(f"run {run_id}", name, *row)

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
