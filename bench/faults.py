"""``python -m bench faults``: the bad inputs and faults of issue 38, tried through the CLI.

Each probe runs ``python -m jobs ...`` in a fresh store (after damaging it, where the probe is
a fault), with a time limit, and is classed by what a user sees:
- handled: the outcome the probe expects (a refusal names the field in one line; a fault is
  reported or survived; no draw lost), with no traceback;
- traceback: a Python traceback or a crash (a signal) reached the user;
- failing: anything else (accepted when it must be refused, a hang, a wrong result).
The tests (tests/test_faults_*.py, tests/test_resume.py) pin each case; this is the census.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from runs.store import Store

ROOT = Path(__file__).resolve().parents[1]
# Issue 60's probes, a module per theme, each with a ``probes(home)`` of this module's shape
ROUND_3 = ("store", "server", "markup", "input", "model")
LIMIT_S = 120.0
SMALL = ["--target", "banana", "--sampler", "mala", "--param", "step_size=0.1"]


def jobs(home: Path, *args: str, timeout: float = LIMIT_S) -> subprocess.CompletedProcess:
    env = {**os.environ, "BASIN_HOME": str(home)}
    command = [sys.executable, "-m", "jobs", *args]
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def refused(field: str) -> Callable[[subprocess.CompletedProcess], bool]:
    """Exit 2 and one stderr line naming ``field``."""

    def check(out: subprocess.CompletedProcess) -> bool:
        lines = out.stderr.strip().splitlines()
        return out.returncode == 2 and len(lines) == 1 and field in lines[0]

    return check


def a_run(home: Path, *extra: str) -> str:
    out = jobs(
        home,
        "run",
        *SMALL,
        "--chains",
        "4",
        "--steps",
        "2000",
        "--flush-every",
        "100",
        "--json",
        *extra,
    )
    return json.loads(out.stdout)["run_id"]


def run_files(home: Path, run_id: str) -> list[Path]:
    return sorted(p for p in (home / "runs").glob(f"{run_id}*") if p.is_file())


def corrupt_bytes(home: Path) -> list[str]:
    run_id = a_run(home)
    data = max(run_files(home, run_id), key=lambda p: p.stat().st_size)
    raw = bytearray(data.read_bytes())
    rng = random.Random(0)
    for i in rng.sample(range(len(raw)), min(2000, len(raw))):
        raw[i] ^= 0xFF
    data.write_bytes(bytes(raw))
    return ["export", run_id, "--out", str(home / "out.npz")]


def object_dtype(home: Path) -> list[str]:
    run_id = a_run(home)
    index = next(p for p in run_files(home, run_id) if p.suffix == ".sqlite")
    with sqlite3.connect(index) as conn:
        conn.execute("UPDATE chunks SET dtype = '|O' WHERE name = 'loss'")
    return ["export", run_id, "--out", str(home / "out.npz")]


def bad_spec_row(home: Path) -> list[str]:
    a_run(home)
    bad = a_run(home)
    with sqlite3.connect(home / "basin.sqlite") as conn:
        conn.execute("UPDATE runs SET spec = '{not json' WHERE id = ?", (bad,))
    return ["list"]


def garbage_index(home: Path) -> list[str]:
    run_id = a_run(home)
    index = next(p for p in run_files(home, run_id) if p.suffix == ".sqlite")
    index.write_bytes(b"garbage" * 1000)
    return ["export", run_id, "--out", str(home / "out.npz")]


def killed_and_resumed(home: Path) -> list[str]:
    """A run killed mid-way, marked interrupted and resumed: its records must equal a whole
    run's; the probe's command is the resume, its check compares the records."""
    spec = [*SMALL, "--chains", "8", "--steps", "12000", "--seed", "5", "--compile", "never"]
    jobs(home, "run", *spec)
    env = {**os.environ, "BASIN_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs", "run", *spec],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    store, deadline = Store(home), time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        runs = store.list()
        if len(runs) == 2 and store.records(runs[0].id) > 500:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    store.mark_stale(timeout_s=0)
    return ["resume", store.list()[0].id]


def same_records(home: Path) -> Callable[[subprocess.CompletedProcess], bool]:
    def check(out: subprocess.CompletedProcess) -> bool:
        store = Store(home)
        resumed, whole = store.list()  # newest first
        a, b = store.read(whole.id), store.read(resumed.id)
        equal = set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
        return out.returncode == 0 and equal

    return check


def probes(home: Path) -> list[tuple[str, Callable[[], list[str]], Callable]]:
    """(name, setup returning the CLI arguments, check of the outcome)."""
    (home / "deep.json").write_text('{"a": ' * 30 + "1" + "}" * 30)
    (home / "big.json").write_text(json.dumps({"target": {"name": "banana"}, "x": "y" * 2**21}))

    def submit(target: str, sampler: str, *args: str) -> Callable[[], list[str]]:
        return lambda: ["submit", "--target", target, "--sampler", sampler, *args]

    def given(*args: str) -> Callable[[], list[str]]:
        return lambda: list(args)

    def widths(count: int) -> str:
        return "widths=" + ",".join(["5000"] * count)

    def formula(text: str) -> Callable[[], list[str]]:
        return submit("custom", "mala", "--target-param", f"formula={text}")

    steps = ",".join(f"{k}e-8" for k in range(1, 13))
    return [
        ("dln 11 x 5000 widths", submit("dln", "sgld", "--target-param", widths(11)),
         refused("target.params.n")),
        ("dln 41 x 5000 widths", submit("dln", "sgld", "--target-param", widths(41)),
         refused("target.params")),
        ("dln size_class=100M", submit("dln", "sgld", "--target-param", "size_class=100M"),
         refused("target.params")),
        ("tanh 4096 x 1e7, 2 chains", submit("tanh", "sgld", "--target-param", "hidden=4096",
         "--target-param", "n=1e7", "--chains", "2"), refused("memory")),
        ("tanh 1000 x 1e6, 4 chains", submit("tanh", "sgld", "--target-param", "hidden=1000",
         "--target-param", "n=1e6", "--chains", "4"), refused("memory")),
        ("bad splitting scheme at submit", submit("banana", "splitting", "--param",
         "scheme=XYZ"), refused("scheme")),
        ("worker --slots -1", given("worker", "--slots", "-1"),
         lambda out: out.returncode == 2 and "--slots: must be an integer >= 1" in out.stderr),
        ("sweep of 60,000 runs", given("sweep", "dln", "--problems", "1000", "--step-sizes",
         steps, "--submit-only"), refused("runs")),
        ("spec nested 30 deep", given("submit", str(home / "deep.json")), refused("nested")),
        ("spec file of 2 MiB", given("submit", str(home / "big.json")), refused("MiB")),
        ("formula NaN everywhere", formula("log(-1 - w0**2)"), refused("formula")),
        ("formula flat", formula("3 + 0 * w0"), refused("flat")),
        ("formula unbounded below", formula("-w0**2 - w1**2"), refused("formula")),
        ("export to /dev/null", lambda: ["export", a_run(home), "--out", os.devnull],
         refused("--out")),
        ("2,000 bytes of a run's data damaged", lambda: corrupt_bytes(home),
         lambda out: out.returncode == 1 and "left out of the export" in out.stderr),
        ("index dtype '|O'", lambda: object_dtype(home), refused("dtype")),
        ("a bad spec row, then list", lambda: bad_spec_row(home),
         lambda out: out.returncode == 0 and "damaged" in out.stdout),
        ("garbage per-run index", lambda: garbage_index(home), refused("index")),
        ("killed run resumed", lambda: killed_and_resumed(home), same_records(home)),
    ] + [
        probe
        for theme in ROUND_3
        for probe in importlib.import_module(f"bench.faults_{theme}").probes(home)
    ]  # fmt: skip


def run(make: Callable[[Path], list] | None = None) -> list[dict]:
    """Each probe of ``make`` (default: all of them, ``probes``) once, in a store of its own."""
    make = make or probes
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        count = len(make(Path(tmp)))
        for i in range(count):
            home = Path(tmp) / f"p{i}"  # each probe in a store of its own
            home.mkdir()
            name, setup, check = make(home)[i]
            tic = time.perf_counter()
            try:
                args = setup()  # CLI arguments, or a probe that ran its own processes
                out = args if isinstance(args, subprocess.CompletedProcess) else jobs(home, *args)
                crashed = "Traceback" in out.stderr or out.returncode < 0
                verdict = "traceback" if crashed else "handled" if check(out) else "failing"
                said = (out.stderr.strip().splitlines() or [out.stdout.strip()[:120]])[-1]
            except subprocess.TimeoutExpired:
                verdict, said = "failing", f"no answer within {LIMIT_S:.0f} s"
            rows.append(
                {
                    "probe": name,
                    "verdict": verdict,
                    "seconds": time.perf_counter() - tic,
                    "said": said[:140],
                }
            )
            print(f"{verdict:<9} {rows[-1]['seconds']:6.1f} s  {name}: {rows[-1]['said']}")
    return rows
