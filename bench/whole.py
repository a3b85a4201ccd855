"""``python -m bench whole``: a user's whole job, Basin's process against the peer's (issue 58).

Each job runs as a whole process, from interpreter start to result: Basin's side is always
``python -m jobs run ... --seed 0 --json`` (the CLI's default path: ``compile: auto``) with a
fresh BASIN_HOME (a temporary directory) each process; the peer's is one process of
bench/peer_whole_blackjax.py (BlackJAX: import, jit, run keeping every ``thin``-th draw, an ArviZ
ESS and R-hat at the end) or of bench/peer_devinterp.py (devinterp 1.3.2's LLC estimator).
The two sides take turns, Basin then the peer, ``pairs`` times. A process's wall time is
``time.perf_counter`` around ``subprocess.run``; its CPU time is the change of
``resource.getrusage(RUSAGE_CHILDREN)`` (user + sys) across it, which counts the process and
every descendant it waited for. Per case the table gives each side's median wall and CPU time
and the median of the per-pair ratios Basin / peer (with their range: the host's noise).

A peer that takes minutes (devinterp's normal-crossing, ~500 s) runs once; its time serves
every pair. ``warm`` (the default) first runs one unmeasured process of each side per case
(Basin's with ``--compile always``): it fills Basin's compile cache and pages in both sides'
imports. ``cold`` instead clears Basin's compile cache (``python -m jobs cache --clear``) before
every Basin process, outside the timing.

The BlackJAX peer's summary takes the chains Basin's takes (``samplers.diagnostics.
diagnosed_chains``: all of them up to 256, at 4096 chains the first 256): the same work.

Imports only the standard library at the top: bench/peer_whole_blackjax.py reads BLACKJAX_CASES
from here in the peer's virtualenv.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.peer_devinterp import CASE_DEFAULTS, DEVINTERP_PYTHON

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
BLACKJAX_PYTHON = BENCH / ".peer-venv" / "bin" / "python"
PAIRS = 5
QUICK_DIVISOR = 10  # --quick: every job's steps / 10, one pair
TIMEOUT_S = 1800.0  # a process running longer is stopped and its case reported as timed out
NUTS_MAX_DEPTH = 10  # samplers/nuts.py's default max_depth, passed to both sides (tests check)

# The banana jobs; bench/peer_whole_blackjax.py runs them in BlackJAX. Step sizes in Basin's
# convention (bench.cases.blackjax_step_size converts SGLD's for BlackJAX).
BLACKJAX_CASES = {
    "banana-sgld-64": {
        "sampler": "sgld",
        "step_size": 1e-2,
        "chains": 64,
        "steps": 20_000,
        "thin": 10,
    },
    "banana-sgld-4096": {
        "sampler": "sgld",
        "step_size": 1e-2,
        "chains": 4096,
        "steps": 4000,
        "thin": 10,
    },
    "banana-nuts-128": {
        "sampler": "nuts",
        "step_size": 0.1,
        "max_depth": NUTS_MAX_DEPTH,
        "chains": 128,
        "steps": 2000,
        "thin": 1,
    },
}


@dataclass(frozen=True)
class Case:
    peer: str  # "BlackJAX" or "devinterp"
    steps: int
    goal: float  # issue 58's goal on Basin / peer, wall and CPU (warm cache)
    peer_once: bool = False  # the peer runs once; its time serves every pair
    true_llc: float | None = None
    cold_goal: float | None = None  # the goal with --cold, where the issue sets one


NC, MODULE = CASE_DEFAULTS["normal-crossing"], CASE_DEFAULTS["module"]
CASES = {
    "banana-sgld-64": Case("BlackJAX", 20_000, 1.0, cold_goal=1.5),
    "banana-sgld-4096": Case("BlackJAX", 4000, 0.7),
    "banana-nuts-128": Case("BlackJAX", 2000, 1.5),
    "llc-normal-crossing": Case("devinterp", NC["draws"], 1 / 300, peer_once=True, true_llc=0.25),
    "llc-module": Case("devinterp", MODULE["draws"], 1 / 15),
}


def basin_args(name: str, steps: int | None = None, checkpoint: str = "") -> list[str]:
    """The arguments of ``python -m jobs`` for a case's Basin process (``run`` first)."""
    steps = steps or CASES[name].steps
    if name in BLACKJAX_CASES:
        c = BLACKJAX_CASES[name]
        args = ["--target", "banana", "--sampler", c["sampler"]]
        args += ["--param", f"step_size={c['step_size']:g}"]
        if "max_depth" in c:
            args += ["--param", f"max_depth={c['max_depth']}"]
        args += ["--chains", str(c["chains"]), "--steps", str(steps), "--thin", str(c["thin"])]
    elif name == "llc-normal-crossing":  # bench/llc.py's normal_crossing: devinterp's own test
        args = ["--target", "polynomial", "--target-param", "powers=1,2"]
        args += ["--target-param", "x_std=2", "--target-param", "noise_std=0.25"]
        args += ["--target-param", f"n={NC['n']}", "--target-param", f"seed={NC['data_seed']}"]
        args += ["--sampler", "sgld", "--param", f"step_size={NC['lr']:g}"]
        args += ["--param", f"localization={NC['localization']:g}"]
        args += ["--chains", str(NC["chains"]), "--steps", str(steps)]
        args += ["--observe", "llc", "--w0", "truth"]  # devinterp's chains start at w = 0
    elif name == "llc-module":  # bench/llc.py's digits module: w0 is the checkpoint's weights
        args = ["--target", "model", "--target-param", "factory=examples.digits_mlp:make"]
        args += ["--target-param", f"checkpoint={checkpoint}", "--sampler", "sgld"]
        args += ["--param", f"step_size={MODULE['lr']:g}"]
        args += ["--param", f"batch_size={MODULE['batch_size']}"]
        args += ["--param", f"localization={MODULE['localization']:g}"]
        args += ["--param", f"nbeta={MODULE['n'] / math.log(MODULE['n'])!r}"]
        args += ["--chains", str(MODULE["chains"]), "--steps", str(steps), "--observe", "llc"]
    else:
        raise KeyError(name)
    return ["run", *args, "--seed", "0", "--json"]


def prepare(name: str, steps: int, workdir: Path) -> tuple[list[str], list[str] | None]:
    """(Basin's command, the peer's command or None where its virtualenv is missing)."""
    checkpoint, peer = "", None
    if name in BLACKJAX_CASES:
        from samplers.diagnostics import diagnosed_chains  # imports torch: the driver's only

        c = BLACKJAX_CASES[name]
        diagnose = diagnosed_chains(c["chains"], steps // c["thin"])
        if BLACKJAX_PYTHON.exists():
            peer = [str(BLACKJAX_PYTHON), "-m", "bench.peer_whole_blackjax", name]
            peer += ["--steps", str(steps), "--diagnose", str(diagnose)]
    elif name == "llc-normal-crossing":
        peer = ["normal-crossing", "--chains", str(NC["chains"]), "--draws", str(steps)]
    else:  # train the digits MLP and write the peer's files, as bench/llc.py does
        from . import llc as bench_llc

        _, peer, _ = bench_llc.digits_module(MODULE["chains"], steps, workdir)
        checkpoint = peer[peer.index("--weights-file") + 1]
        if float(peer[peer.index("--lr") + 1]) != MODULE["lr"]:  # Basin's side reads MODULE
            raise RuntimeError("bench/llc.py's module step size is not the devinterp peer's")
    if name not in BLACKJAX_CASES:
        peer = [str(DEVINTERP_PYTHON), "-m", "bench.peer_devinterp", *peer]
        peer = peer if DEVINTERP_PYTHON.exists() else None
    return [sys.executable, "-m", "jobs", *basin_args(name, steps, checkpoint)], peer


@dataclass
class Timed:
    wall: float
    cpu: float
    reply: dict


def last_json(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"no JSON line in the output: {stdout[-500:]!r}")
    return json.loads(lines[-1])


def timed(command: list[str], env: dict | None = None, timeout: float = TIMEOUT_S) -> Timed:
    """Run one whole process; its wall and CPU time (user + sys, with its waited children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(command)} exited with {out.returncode}:\n{out.stderr[-3000:]}"
        )
    return Timed(wall, cpu, last_json(out.stdout))


def clear_cache(env: dict) -> str | None:
    """``python -m jobs cache --clear`` (outside the timing); a note when it fails."""
    out = subprocess.run(
        [sys.executable, "-m", "jobs", "cache", "--clear"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode == 0:
        return None
    why = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
    return f"`python -m jobs cache --clear` failed ({why}): Basin's cache was not cleared"


def basin(command: list[str], cold: bool, notes: set[str], timeout: float) -> Timed:
    """One Basin process with a fresh BASIN_HOME (its cache cleared first with ``cold``)."""
    with tempfile.TemporaryDirectory(prefix="basin-whole-") as home:
        env = {**os.environ, "BASIN_HOME": home}
        if cold and (note := clear_cache(env)):
            if note not in notes:
                print(f"note: {note}", file=sys.stderr, flush=True)
            notes.add(note)
        return timed(command, env, timeout)


def pair_ratios(basin_s: list[float], peer_s: list[float]) -> list[float]:
    """Basin / peer pair by pair; one peer time (a peer that ran once) serves every pair."""
    if len(peer_s) == 1:
        peer_s = peer_s * len(basin_s)
    return [b / p for b, p in zip(basin_s, peer_s, strict=True)]


def median_ratio(basin_s: list[float], peer_s: list[float]) -> float | None:
    """The median of the per-pair ratios (None without a peer)."""
    return statistics.median(pair_ratios(basin_s, peer_s)) if peer_s else None


def run_case(name: str, pairs: int, quick: bool, cold: bool, warm: bool, timeout: float) -> dict:
    """Warm up, then ``pairs`` turns of Basin and the peer; the case's result (``summarise``)."""
    case = CASES[name]
    steps = max(case.steps // QUICK_DIVISOR, 10) if quick else case.steps
    notes: set[str] = set()
    basin_runs: list[Timed] = []
    peer_runs: list[Timed] = []
    load = os.getloadavg()[0]
    timed_out = None
    with tempfile.TemporaryDirectory(prefix="bench-whole-") as tmp:
        basin_cmd, peer_cmd = prepare(name, steps, Path(tmp))
        if peer_cmd is None:
            print(f"{name}: the {case.peer} peer is not set up; Basin's side only", flush=True)
        try:
            if warm and not cold:  # unmeasured: Basin's cache, both sides' imports paged in
                # "always": compiles and files the chunk, which the measured "auto" runs load
                basin([*basin_cmd, "--compile", "always"], False, notes, timeout)
                if peer_cmd and not case.peer_once:
                    timed(peer_cmd, timeout=timeout)
            for i in range(pairs):
                basin_runs.append(basin(basin_cmd, cold, notes, timeout))
                if peer_cmd and not (case.peer_once and peer_runs):
                    peer_runs.append(timed(peer_cmd, timeout=timeout))
                print(progress(name, i, basin_runs[-1], peer_runs, case.peer), flush=True)
        except subprocess.TimeoutExpired as exc:
            who = "Basin's" if exc.cmd == basin_cmd else f"the {case.peer} peer's"
            timed_out = f"{who} process ran past {exc.timeout:g} s and was stopped"
            print(f"{name}: {timed_out}", flush=True)
    result = summarise(name, steps, basin_runs, peer_runs)
    result.update(load=(load, os.getloadavg()[0]), notes=sorted(notes), timed_out=timed_out)
    result["commands"] = {"basin": basin_cmd, "peer": peer_cmd}
    return result


def progress(name: str, i: int, b: Timed, peer_runs: list[Timed], peer: str) -> str:
    line = f"{name} pair {i + 1}: Basin {b.wall:.2f} s wall, {b.cpu:.2f} s CPU"
    line += f" (compiled: {b.reply.get('compiled')})"
    if peer_runs:
        p = peer_runs[-1]
        reused = " (its one run)" if len(peer_runs) <= i else ""
        line += f"; {peer} {p.wall:.2f} s wall, {p.cpu:.2f} s CPU{reused}"
    return line


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(name: str, steps: int, basin_runs: list[Timed], peer_runs: list[Timed]) -> dict:
    r: dict = {"case": name, "steps": steps, "pairs": len(basin_runs), "peer_runs": len(peer_runs)}
    for key, runs in (("basin", basin_runs), ("peer", peer_runs)):
        r[f"{key}_wall"] = _median([t.wall for t in runs])
        r[f"{key}_cpu"] = _median([t.cpu for t in runs])
    # whole pairs only (a process stopped by the timeout leaves its pair's partner alone)
    pairs = len(basin_runs) if len(peer_runs) == 1 else min(len(basin_runs), len(peer_runs))
    for kind in ("wall", "cpu"):
        b = [getattr(t, kind) for t in basin_runs[:pairs]]
        p = [getattr(t, kind) for t in peer_runs[:pairs]]
        ratios = pair_ratios(b, p) if p else []
        r[f"{kind}_ratio"] = statistics.median(ratios) if ratios else None
        r[f"{kind}_ratios"] = ratios
    r["compiled"] = sum(t.reply.get("compiled") is True for t in basin_runs)
    r["accuracy"] = accuracy(name, basin_runs, peer_runs)
    r["inside"] = inside(name, basin_runs, peer_runs)
    r["versions"] = versions(peer_runs)
    return r


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}g}"


def accuracy(name: str, basin_runs: list[Timed], peer_runs: list[Timed]) -> str:
    """LLC cases: the estimates against the truth; banana cases: the worst ESS and R-hat."""
    if not basin_runs:
        return "-"
    b = basin_runs[0].reply
    p = peer_runs[0].reply if peer_runs else {}
    if name.startswith("llc-"):
        means = {t.reply["observables"]["llc"]["mean"] for t in basin_runs}
        same = "" if len(means) == 1 else f" (runs differ: {min(means):.4f}..{max(means):.4f})"
        mine, true = b["observables"]["llc"]["mean"], CASES[name].true_llc
        text = f"LLC Basin {mine:.4f}{same}"
        if true is not None:
            text += f" ({mine - true:+.4f})"
        if p:
            text += f", devinterp {p['llc_mean']:.4f}"
            if true is not None:
                text += f" ({p['llc_mean'] - true:+.4f})"
            if name == "llc-module":
                text += f" (its full-data baseline: {p['llc_mean_full_init']:.4f})"
        if true is None:
            return text
        text += f"; true {true:g}"
        if p:  # issue 58: both within 0.05 of the truth, or Basin no further than devinterp
            equal = max(abs(mine - true), abs(p["llc_mean"] - true)) <= 0.05
            equal = equal or abs(mine - true) <= abs(p["llc_mean"] - true)
            text += f"; equal accuracy: {'yes' if equal else 'no'}"
        return text
    coords = b["coordinates"]
    text = (
        f"ESS bulk min Basin {_f(min(coords['ess_bulk']), 4)} "
        f"({coords['diagnostic_chains']} chains), R-hat max {_f(max(coords['rhat']), 4)}"
    )
    if p:
        text += (
            f"; BlackJAX {_f(min(p['ess_bulk']), 4)} ({p['diagnosed_chains']} chains), "
            f"{_f(max(p['rhat']), 4)}"
        )
    return text


def inside(name: str, basin_runs: list[Timed], peer_runs: list[Timed]) -> str:
    """The processes' own timings (medians), for the record."""
    if not basin_runs:
        return "-"

    def med(runs: list[Timed], key: str) -> str:
        return _f(_median([t.reply[key] for t in runs if t.reply.get(key) is not None]))

    text = (
        f"Basin's run {med(basin_runs, 'seconds')} s in process, of which sampling "
        f"{med(basin_runs, 'sampling_seconds')} s"
    )
    rates = [_gradient_rate(t.reply) for t in basin_runs]
    if None not in rates:  # NUTS: its leapfrog steps, Stan's n_leapfrog__, as BlackJAX counts
        text += f", {_f(_median(rates))} gradient evaluations/s"
    if peer_runs and name in BLACKJAX_CASES:
        text += (
            f"; BlackJAX imports {med(peer_runs, 'import_s')} s, compile "
            f"{med(peer_runs, 'compile_s')} s, run {med(peer_runs, 'run_s')} s, summary "
            f"{med(peer_runs, 'summary_s')} s, {med(peer_runs, 'grad_evals_per_s')} gradient "
            "evaluations/s"
        )
    elif peer_runs:
        text += f"; devinterp's estimator call {med(peer_runs, 'seconds')} s"
    return text


def _gradient_rate(reply: dict) -> float | None:
    """A NUTS run's gradient evaluations a second of sampling: its mean leapfrog steps a step
    (the summary's scalar ``leapfrogs``) times its chains and steps."""
    leapfrogs = (reply.get("scalars") or {}).get("leapfrogs")
    if leapfrogs is None or not reply.get("sampling_seconds"):
        return None
    return leapfrogs * reply["chains"] * reply["steps"] / reply["sampling_seconds"]


def versions(peer_runs: list[Timed]) -> str:
    if not peer_runs:
        return ""
    p = peer_runs[0].reply
    if "blackjax" in p:
        return (
            f"BlackJAX {p['blackjax']} (jax {p['jax']}, {p['jax_device']}), "
            f"arviz-stats {p['arviz_stats']}"
        )
    v = p.get("versions", {})
    return f"devinterp {v.get('devinterp')} (torch {v.get('torch')})"


HEADER = [
    "| case | pairs | Basin wall / CPU s | peer wall / CPU s | Basin/peer wall (range) | "
    "Basin/peer CPU (range) | goal | Basin compiled |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
]


def row(r: dict, cold: bool) -> str:
    case = CASES[r["case"]]
    goal = case.cold_goal if cold and case.cold_goal else case.goal

    def f(x: float) -> str:  # a small ratio as 1/k: Basin k times faster
        return _f(x) if goal >= 0.1 else f"1/{1 / x:.0f}"

    def ratio(kind: str) -> str:
        rs = r[f"{kind}_ratios"]
        if not rs:
            return "-"
        met = "met" if r[f"{kind}_ratio"] <= goal else "missed"
        return f"{f(r[f'{kind}_ratio'])} ({f(min(rs))} to {f(max(rs))}), {met}"

    goal_text = f"<= {f(goal)}"
    peer = f"{_f(r['peer_wall'])} / {_f(r['peer_cpu'])}"
    if case.peer_once and r["peer_runs"]:
        peer += " (1 run)"
    return (
        f"| {r['case']} ({case.peer}) | {r['pairs']} | {_f(r['basin_wall'])} / "
        f"{_f(r['basin_cpu'])} | {peer} | {ratio('wall')} | {ratio('cpu')} | {goal_text} | "
        f"{r['compiled']} of {r['pairs']} |"
    )


def notes(results: list[dict]) -> list[str]:
    lines = []
    for r in results:
        lines.append(f"- {r['case']}: {r['accuracy']}. {r['inside']}.")
        lines.append(f"  Load average {r['load'][0]:.2f} before, {r['load'][1]:.2f} after.")
        if CASES[r["case"]].peer_once and r["peer_runs"]:
            lines.append(
                "  The peer ran once (minutes a run); its time is every pair's denominator."
            )
        lines += [f"  {n}." for n in r["notes"]]
        if r["timed_out"]:
            lines.append(f"  Stopped: {r['timed_out']}.")
    return lines


def shown(command: list[str]) -> str:
    """A command as recorded: interpreters by their short names, temporary files as TMP/name."""

    def one(arg: str) -> str:
        key, eq, value = arg.rpartition("=")
        if "bench-whole-" in value:
            return f"{key}{eq}TMP/{Path(value).name}"
        if arg == sys.executable:
            return "python"
        return str(Path(arg).relative_to(ROOT)) if arg.startswith(str(BENCH)) else arg

    return shlex.join(one(a) for a in command)


# Goal 6: what a command imports before its first step, timed inside a fresh process the way
# ``python -m jobs`` imports it (jobs/__main__.py), and torch's share of it.
IMPORTS = """import time
t = time.perf_counter()
import gc
gc.disable()
import torch
torch_s = time.perf_counter() - t
gc.enable()
import jobs.__main__
jobs.__main__.commands()
print(time.perf_counter() - t, torch_s)
"""


def imports(repeats: int = 7) -> str:
    """Goal 6's line: the median over ``repeats`` fresh processes of the entry's imports."""
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", IMPORTS], cwd=ROOT, capture_output=True)
        runs.append([float(x) for x in out.stdout.split()])
    total, torch_s = (statistics.median(r[i] for r in runs) for i in (0, 1))
    met = "met" if total <= 1.0 else "missed"
    return (
        f"- imports before the first step (goal 6, <= 1.0 s): {total:.3f} s, of which torch "
        f"{torch_s:.3f} s (median of {repeats} processes), {met}."
    )


def run(
    cases: tuple[str, ...],
    pairs: int = PAIRS,
    quick: bool = False,
    cold: bool = False,
    warm: bool = True,
    timeout: float = TIMEOUT_S,
) -> dict:
    """Every case in turn; prints the table; returns {"results", "lines", "notes", "peers"}."""
    pairs = 1 if quick else pairs
    results = []
    for name in cases:
        results.append(run_case(name, pairs, quick, cold, warm, timeout))
        print(json.dumps({k: v for k, v in results[-1].items() if k != "commands"}), flush=True)
    lines = [*HEADER, *(row(r, cold) for r in results)]
    extra = [*notes(results), imports()]
    print("\n".join([*lines, "", *extra]))
    peers = sorted({r["versions"] for r in results if r["versions"]})
    commands = [
        f"- {r['case']}: `{shown(r['commands'][side])}`"
        for r in results
        for side in ("basin", "peer")
        if r["commands"][side]
    ]
    return {
        "results": results,
        "lines": lines,
        "notes": extra,
        "peers": peers,
        "commands": commands,
    }
