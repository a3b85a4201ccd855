"""What ``Store.check`` and every Store's opening find beyond damaged bytes: a lost run index
(``basin.sqlite`` missing, empty or recreated beside run files), rows whose columns hold the
wrong types, run files no row lists, and sweeps that are damaged or lost runs.

Basin cannot rebuild a lost index: each run's spec and status live only in ``basin.sqlite``
(a run's own files hold its records), so the way back is a backup of ``basin.sqlite``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from runs.store_db import BUSY_TIMEOUT_S, DamagedStore, StoreError

STATUSES = ("queued", "running", "completed", "cancelled", "failed", "interrupted")
SLACK_S = 2.0  # file times against the index's creation: coarse clocks, a copy's rounding


def run_files(home: Path) -> dict[str, list[Path]]:
    """Run id -> its files under runs/ (index, its -wal and -shm, records), by their names."""
    found: dict[str, list[Path]] = {}
    folder = home / "runs"
    if folder.is_dir():
        for path in folder.iterdir():
            run_id, dot, suffix = path.name.partition(".")
            if dot and suffix in ("sqlite", "sqlite-wal", "sqlite-shm", "bin") and run_id:
                found.setdefault(run_id, []).append(path)
    return found


def _indexes(home: Path) -> list[Path]:
    return [p for files in run_files(home).values() for p in files if p.suffix == ".sqlite"]


def _lost(home: Path, what: str, count: int) -> StoreError:
    meta, runs = home / "basin.sqlite", home / "runs"
    files = "1 run's files" if count == 1 else f"{count} runs' files"
    return StoreError(
        f"{meta} {what} but {runs} holds {files}: the run index (each run's spec "
        f"and status) is lost; restore basin.sqlite from a backup, or move {runs} aside to "
        "start an empty store (the index cannot be rebuilt from the run files)"
    )


def refuse_lost_file(home: Path) -> None:
    """Before ``basin.sqlite`` is opened (which would create it): missing or empty (0 bytes)
    beside run files, it lost every run, and nothing may re-initialise it silently."""
    meta = home / "basin.sqlite"
    if meta.exists() and meta.stat().st_size > 0:
        return
    if count := len(_indexes(home)):
        raise _lost(home, "is empty (0 bytes)" if meta.exists() else "is missing", count)


def refuse_lost_tables(home: Path, db: sqlite3.Connection) -> None:
    """Before the schema is created: a ``basin.sqlite`` without its runs table (its
    write-ahead log, which held them, lost) beside run files lost every run."""
    sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'"
    if db.execute(sql).fetchone() is None and (count := len(_indexes(home))):
        raise _lost(home, "has no runs table", count)


def refuse_recreated(home: Path, db: sqlite3.Connection) -> None:
    """After the schema: an index that lists no run, made after run files it does not list
    (recreated: by hand, or by Basin before it refused to) lost them. Its creation time is kept
    in ``meta`` (an index made before that table: its oldest run's, else now)."""
    if db.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is not None:
        return
    row = db.execute("SELECT value FROM meta WHERE key = 'created'").fetchone()
    if row is None:  # a new index, or the first opening since meta was added: now
        db.execute("INSERT OR IGNORE INTO meta VALUES ('created', ?)", (time.time(),))
        row = db.execute("SELECT value FROM meta WHERE key = 'created'").fetchone()
    created = row[0] if row and isinstance(row[0], (int, float)) else time.time()
    older = [p for p in _indexes(home) if p.stat().st_mtime < created - SLACK_S]
    if older:
        raise _lost(home, "lists no runs (it was made after them)", len(older))


def date_index(db: sqlite3.Connection) -> None:
    """Record when the index was made (``refuse_recreated``): by its oldest run, else now."""
    if db.execute("SELECT 1 FROM meta WHERE key = 'created'").fetchone() is None:
        oldest = db.execute("SELECT MIN(created) FROM runs").fetchone()[0]
        if isinstance(oldest, (int, float)):
            db.execute("INSERT OR IGNORE INTO meta VALUES ('created', ?)", (oldest,))


def _kind(value) -> str:
    return {int: "an integer", float: "a number", str: "text", bytes: "bytes"}.get(
        type(value), "NULL" if value is None else type(value).__name__
    )


def row_problem(values: list) -> str | None:
    """What is wrong with a runs row's plain columns (in ``_COLUMNS`` order: id, spec, status,
    created, started, finished, progress, error, summary, worker_pid, heartbeat,
    cancel_requested), or None."""
    number, maybe = (int, float), (int, float, type(None))
    checks = (
        (0, "id", (str,), "text"),
        (3, "created", number, "a number"),
        (4, "started", maybe, "a number or NULL"),
        (5, "finished", maybe, "a number or NULL"),
        (7, "error", (str, type(None)), "text or NULL"),
        (9, "worker_pid", (int, type(None)), "an integer or NULL"),
        (10, "heartbeat", maybe, "a number or NULL"),
        (11, "cancel_requested", (int,), "0 or 1"),
    )
    if values[2] not in STATUSES:
        return f"its status is {values[2]!r:.40}, not one of {', '.join(STATUSES)}"
    for i, name, types, what in checks:
        if not isinstance(values[i], types) or isinstance(values[i], bool):
            return f"its {name} is {_kind(values[i])} ({values[i]!r:.40}), not {what}"
    if values[11] not in (0, 1):
        return f"its cancel_requested is {values[11]!r:.40}, not 0 or 1"
    return None


def orphans(home: Path, listed: set[str]) -> list[str]:
    """Run files no row lists, a line per run (a run being created now, its index younger than
    BUSY_TIMEOUT_S and no records yet, is not one: its row follows)."""
    lines, now = [], time.time()
    for run_id, files in sorted(run_files(home).items()):
        if run_id in listed:
            continue
        data = [p for p in files if p.suffix == ".bin" and p.stat().st_size > 0]
        ages = [now - p.stat().st_mtime for p in files]
        if not data and min(ages) < BUSY_TIMEOUT_S:
            continue
        names = ", ".join(sorted(p.name for p in files))
        lines.append(
            f"run {run_id}: its files in {home / 'runs'} ({names}) have no row in basin.sqlite "
            "(orphaned: its spec and status are lost); restore basin.sqlite from a backup, or "
            "delete the files"
        )
    return lines


def sweep_problems(home: Path, db: sqlite3.Connection, listed: set[str]) -> list[str]:
    """Sweeps whose row is damaged, or whose runs lost their row but not their files. A run of
    a sweep gone with its files was deleted (``jobs delete``): a sweep counts it as done."""
    where, files, lines = home / "basin.sqlite", run_files(home), []
    for sweep_id, kind, spec, cells, created in db.execute(
        "SELECT id, kind, spec, cells, created FROM sweeps ORDER BY created, rowid"
    ).fetchall():
        try:
            spec, cells = json.loads(spec), json.loads(cells)
        except (TypeError, ValueError) as exc:
            lines.append(
                f"sweep {sweep_id}: its spec or cells are not valid JSON ({exc}) in {where}"
            )
            continue
        good = isinstance(cells, list) and all(
            isinstance(c, dict) and isinstance(c.get("run_id"), str) for c in cells
        )
        if not (isinstance(kind, str) and isinstance(spec, dict) and good):
            lines.append(
                f"sweep {sweep_id}: its kind, spec or cells have the wrong type in {where}"
            )
            continue
        if not isinstance(created, (int, float)):
            lines.append(f"sweep {sweep_id}: its created is {_kind(created)}, not a number")
            continue
        lost = [c["run_id"] for c in cells if c["run_id"] not in listed and c["run_id"] in files]
        if lost:
            lines.append(
                f"sweep {sweep_id}: {len(lost)} of its {len(cells)} runs ({', '.join(lost[:3])}"
                f"{', ...' if len(lost) > 3 else ''}) have files but no row in basin.sqlite"
            )
    return lines


def check(store) -> list[str]:
    """``Store.check``: what is damaged, one line each naming the file or run: basin.sqlite,
    runs' rows (their types too), their indexes, side arrays and records (every chunk's
    checksum: reads every byte), run files no row lists, and sweeps."""
    try:
        problems = store._check_meta()
        entries = store.entries()
    except DamagedStore as exc:
        return [str(exc)]
    listed = set()
    for entry in entries:
        if isinstance(entry, DamagedStore):
            problems.append(str(entry))
        run_id = entry.run_id if isinstance(entry, DamagedStore) else entry.id
        listed.add(run_id)
        try:
            problems += store._check_run(run_id)
        except DamagedStore as exc:
            problems.append(str(exc))
        except KeyError as exc:  # its index is gone
            problems.append(f"run {run_id}: {exc.args[0]}")
    problems += orphans(store.home, listed)
    try:
        problems += sweep_problems(store.home, store._db(), listed)
    except sqlite3.DatabaseError as exc:
        problems.append(f"{store.home / 'basin.sqlite'}: its sweeps cannot be read ({exc})")
    return problems
