"""``python -m bench faults``: the store's probes of issue 60 (items A, B and 10): a run's
ownership (a resume of a running or completed run, two resumes at once) and a store that lost
its metadata (an empty ``basin.sqlite``, a garbage write-ahead log). Shaped as
``bench.faults.probes``; each setup returns CLI arguments or the CompletedProcess of a probe
that ran its own processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench import faults
from bench.faults import LIMIT_S, ROOT, SMALL, a_run, jobs, refused
from runs.spec import parse_spec
from runs.store import RESUMABLE, NotResumable, Store

ONLY = "only interrupted or cancelled runs can be resumed"
STEPS = 2000


def _env(home: Path) -> dict:
    return {**os.environ, "BASIN_HOME": str(home)}


def resume_running(home: Path) -> subprocess.CompletedProcess:
    """The Runs page's Resume pressed twice on a run a worker (``jobs run``) is running."""
    args = [*SMALL, "--chains", "4", "--steps", "8000", "--flush-every", "100", "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs", "run", *args],
        cwd=ROOT,
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    store, said = Store(home), []
    try:
        run_id = _first_records(store, proc)
        for _ in range(2):  # a double click, or a second tab
            try:
                store.requeue(run_id, RESUMABLE)
            except NotResumable as exc:
                said.append(str(exc))
    finally:
        out, err = proc.communicate(timeout=LIMIT_S)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "\n".join([err, *said]))


def _first_records(store: Store, proc: subprocess.Popen) -> str:
    """The run ``proc`` runs, once it has recorded something."""
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline and proc.poll() is None:
        runs = store.list("running")
        if runs and store.records(runs[0].id) > 0:
            return runs[0].id
        time.sleep(0.02)
    raise RuntimeError("the run never started recording")


def summary_kept(home: Path) -> Callable[[subprocess.CompletedProcess], bool]:
    """Both presses refused naming the status, and the run completed with its summary."""

    def check(out: subprocess.CompletedProcess) -> bool:
        record = Store(home).list()[0]
        refusals = [line for line in out.stderr.splitlines() if "is running; " + ONLY in line]
        kept = record.status == "completed" and record.summary is not None
        return out.returncode == 0 and len(refusals) == 2 and kept

    return check


def resume_completed(home: Path) -> list[str]:
    return ["resume", a_run(home)]


def completed_kept(home: Path) -> Callable[[subprocess.CompletedProcess], bool]:
    def check(out: subprocess.CompletedProcess) -> bool:
        record = Store(home).list()[0]
        return refused(ONLY)(out) and record.status == "completed" and bool(record.summary)

    return check


def empty_index(home: Path, command: str) -> list[str]:
    """``: > basin.sqlite`` beside a run's files."""
    a_run(home)
    (home / "basin.sqlite").write_bytes(b"")
    return [command]


def lost_index(out: subprocess.CompletedProcess) -> bool:
    lines = out.stderr.strip().splitlines()
    said = lines[0] if len(lines) == 1 else ""
    return (
        out.returncode != 0
        and "basin.sqlite is empty (0 bytes)" in said
        and "files: the run index" in said
    )


HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE held (a)")
print("ready", flush=True)
sys.stdin.read()
"""


def garbage_wal(home: Path) -> subprocess.CompletedProcess:
    """The store open in another process (the app) when its -wal is overwritten: `jobs list`."""
    a_run(home)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(home / "basin.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        holder.stdout.readline()
        (home / "basin.sqlite-wal").write_bytes(b"garbage" * 100)
        return jobs(home, "list")
    finally:
        holder.communicate("", timeout=30)


def wal_named(out: subprocess.CompletedProcess) -> bool:
    lines = out.stderr.strip().splitlines()
    said = lines[0] if len(lines) == 1 else ""
    return out.returncode == 2 and "basin.sqlite-wal" in said and "BASIN_HOME" not in said


RACER = """
import os, sys, time
from cli.main import main
import runs.loop  # noqa: F401  (imported before the start, as the other racer's)
print("ready", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.001)
sys.exit(main(["resume", sys.argv[1]]))
"""


def two_resumes(home: Path) -> subprocess.CompletedProcess:
    """``jobs resume ID`` twice at the same moment on an interrupted run."""
    spec = {"target": {"name": "banana"}, "sampler": {"name": "mala", "params": {"step_size": 0.1}}}
    spec.update(chains=4, steps=STEPS, flush_every=100, compile="never")
    store = Store(home)
    run_id = store.create(parse_spec(spec).model_dump(mode="json"))
    store.finish(run_id, "interrupted", error="its worker stopped")
    go = home / "go"
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, run_id, str(go)],
            cwd=ROOT,
            env=_env(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for racer in racers:
        racer.stdout.readline()
    go.touch()
    outs = [racer.communicate(timeout=LIMIT_S) for racer in racers]
    codes = [racer.returncode for racer in racers]
    loser = [err for (_, err), code in zip(outs, codes, strict=True) if code != 0]
    stderr = "\n".join(loser or [outs[0][1]])
    return subprocess.CompletedProcess(["resume"] * 2, 0, json.dumps(codes), stderr)


def one_resumed(home: Path) -> Callable[[subprocess.CompletedProcess], bool]:
    """One exits 0, the other 2 with one line; the run completed with every record."""

    def check(out: subprocess.CompletedProcess) -> bool:
        store = Store(home)
        record = store.list()[0]
        lines = out.stderr.strip().splitlines()
        line = lines[0] if len(lines) == 1 else ""
        return (
            sorted(json.loads(out.stdout)) == [0, 2]
            and f"resume: run {record.id} is already being resumed" in line
            and record.status == "completed"
            and store.records(record.id) == STEPS
        )

    return check


def probes(home: Path) -> list[tuple[str, Callable, Callable]]:
    """(name, setup returning the CLI arguments or a CompletedProcess, check of the outcome)."""
    return [
        ("Resume twice on a running run", lambda: resume_running(home), summary_kept(home)),
        ("resume a completed run", lambda: resume_completed(home), completed_kept(home)),
        ("zero-byte basin.sqlite, then list", lambda: empty_index(home, "list"), lost_index),
        ("zero-byte basin.sqlite, then check", lambda: empty_index(home, "check"), lost_index),
        ("garbage -wal beside a live -shm", lambda: garbage_wal(home), wal_named),
        ("two resumes at once", lambda: two_resumes(home), one_resumed(home)),
    ]


if __name__ == "__main__":
    faults.run(probes)  # these probes alone
