"""Benchmarks, side by side with a peer library.

    python -m bench setup-peer [--cuda]     # bench/.peer-venv with jax, blackjax, scikit-learn
    python -m bench engine [--repeats 5] [--steps 512] [--quick] [--device auto|cpu|cuda]
                           [--chains 64,4096] [--no-record]
    python -m bench jobs [--repeats 5] [--thin 1,10] [--quick] [--no-record]
    python -m bench setup-devinterp         # bench/.devinterp-venv with devinterp 1.3.2
    python -m bench llc [--repeats 5] [--quick] [--no-record] [--cases module,...]
    python -m bench surface [--repeats 5] [--quick] [--no-record]
    python -m bench app [--repeats 5] [--quick] [--no-record]
    python -m bench faults [--no-record]    # issue 38's bad inputs and faults: the census
    python -m bench sgrld [--repeats 5] [--quick] [--no-record]  # Yu et al.'s SGRLD metrics
    python -m bench eqn [--repeats 5] [--quick] [--jobs 2] [--threads 1] [--no-record]
    python -m bench reprior [--repeats 5] [--quick] [--no-record]  # Hron et al. 2022: ESS, KL
    python -m bench vi [--quick] [--no-record]  # the VI paper's Sec. 7 test, small, as sweeps
    python -m bench gpu [--device cpu --quick]  # the GPU path beside the CPU (needs CUDA)
    python -m bench scale [--repeats 3] [--quick]  # README's DLN sweep: local pool vs 2-node Ray
    python -m bench whole [--pairs 5] [--cases a,b,...] [--cold] [--quick] [--no-record]
                          # issue 58: a whole job's process, Basin vs BlackJAX / devinterp
    python -m bench warmup [--chains 64] [--warmup 1000] [--draws 1000] [--repeats 3]
                           [--kernels nuts,hmc] [--skip-per-chain]
                           # issue 59: step_size auto vs BlackJAX's window_adaptation

``engine`` runs every case of bench/cases.py on Basin and on BlackJAX alternately, a case's
chain counts in turn (Basin and peer at the first count, then at the next, ...), ``--repeats``
times, prints the median chain-steps per second of each side and their ratio, and appends the
table to bench/RESULTS.md (unless --no-record or --quick).

``whole`` runs each case's job as a whole process (``python -m jobs run ... --json`` against the
peer's script), the two sides taking turns, and reports the median of the per-pair ratios of wall
and CPU time (bench/whole.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from .cases import CASES, case_chains

BENCH = Path(__file__).resolve().parent
PEER_VENV = BENCH / ".peer-venv"
PEER_PYTHON = PEER_VENV / "bin" / "python"
RESULTS = BENCH / "RESULTS.md"
# 512: two whole noise blocks of 256 steps, each a compiled chunk (bench.engine.BasinCase);
# the quick run's one block still compiles
STEPS, QUICK_STEPS, REPEATS = 512, 256, 5
QUICK_JOBS_STEPS = 2000  # ``jobs --quick``: a smoke test of both sides, far too short to read
# A measurement lasts at least this long (its step count doubles from STEPS until Basin's takes
# this long, and both sides then run that many): 512 steps at 64 chains last ~3 ms, which times
# thread wake-ups and the other runtime's still-spinning threads, not the sampler.
MIN_SECONDS = 0.2


def setup_peer(cuda: bool) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    jax = "jax[cuda12]" if cuda else "jax"
    pip = [str(PEER_VENV / "bin" / "pip"), "install", jax, "jaxlib", "blackjax", "scikit-learn"]
    pip += ["arviz-stats[xarray]", "arviz-base"]  # bench whole's summary, as Basin's requirements
    subprocess.run(pip, check=True)
    print(f"BlackJAX peer ready in {PEER_VENV}")


class Peer:
    """bench/peer_blackjax.py --serve in the peer virtualenv; it keeps what it compiled."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [str(PEER_PYTHON), "-m", "bench.peer_blackjax", "--serve"],
            cwd=BENCH.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.versions: dict = {}
        self.keys: dict[tuple[str, int], str] = {}  # the key schedule the peer kept per case

    def measure(self, case: str, chains: int, steps: int) -> float:
        request = {"case": case, "chains": chains, "steps": steps}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        while line := self.proc.stdout.readline():
            if line.startswith("{"):
                reply = json.loads(line)
                self.versions = {k: reply[k] for k in ("jax", "jaxlib", "blackjax", "jax_device")}
                self.keys[case, chains] = reply["keys"]
                return reply["seconds"]
        raise RuntimeError(f"the BlackJAX peer exited (code {self.proc.wait()}); see its stderr")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def now() -> str:
    return datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")


def machine(*details: str) -> str:
    """The "Machine: ..." line of a results block, with the bench's own details after it."""
    where = [f"{platform.platform()}, {os.cpu_count()} CPUs", f"Python {platform.python_version()}"]
    return "Machine: " + "; ".join([*where, *details]) + "."


def record(block: list[str]) -> None:
    """Append a results block to bench/RESULTS.md (its heading first, in a new file)."""
    new = not RESULTS.exists()
    ends_blank = new or RESULTS.read_text().endswith("\n\n")  # a reading may end the file
    with RESULTS.open("a") as f:
        if new:
            f.write("# Benchmark results\n\nAppended by `python -m bench ...`; newest last.\n\n")
        f.write(("" if ends_blank else "\n") + "\n".join(block) + "\n")
    print(f"recorded in {RESULTS}")


def rate(chains: int, steps: int, seconds: list[float]) -> float | None:
    return statistics.median(chains * steps / s for s in seconds) if seconds else None


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def engine(args: argparse.Namespace) -> None:
    from . import engine as basin  # imports torch; setup-peer does not need it

    steps = args.steps or (QUICK_STEPS if args.quick else STEPS)
    repeats = args.repeats or (1 if args.quick else REPEATS)
    banana = tuple(int(c) for c in args.chains.split(",")) if args.chains else None
    peer = Peer() if PEER_PYTHON.exists() else None
    if peer is None:
        print(
            f"BlackJAX peer missing ({PEER_VENV}): create it with `python -m bench setup-peer`. "
            "Running Basin's side only.",
            file=sys.stderr,
        )
    rows, times, steps_of = [], {}, {}
    header = "| case | C | steps | Basin chain-steps/s | BlackJAX chain-steps/s | Basin/BlackJAX |"
    print(f"median of {repeats} repeats\n{header}\n|---|---:|---:|---:|---:|---:|")
    try:
        for name in CASES:
            counts = case_chains(name, banana)
            cases = {c: basin.BasinCase(name, c, args.device) for c in counts}
            for chains, case in cases.items():
                case.seconds(steps)  # warm-up (compiles)
                n = steps  # doubled until a measurement lasts MIN_SECONDS
                while case.seconds(n) < MIN_SECONDS and not args.quick and n < 1024 * steps:
                    n *= 2
                steps_of[name, chains] = n
                times[name, chains] = {"basin": [], "peer": []}
            # Alternate sides and chain counts, so that all see the same phases of a noisy host
            # (the MLP's step ratio compares its two chain counts repeat by repeat).
            for _ in range(repeats):
                for chains, case in cases.items():
                    n, t = steps_of[name, chains], times[name, chains]
                    t["basin"].append(case.seconds(n))
                    if peer:  # the peer compiles and warms up on its first call of each size
                        t["peer"].append(peer.measure(name, chains, n))
            for chains in counts:
                n, t = steps_of[name, chains], times[name, chains]
                b, p = rate(chains, n, t["basin"]), rate(chains, n, t["peer"])
                ratio = b / p if p else None
                rows.append(f"| {name} | {chains} | {n} | {fmt(b)} | {fmt(p)} | {fmt(ratio)} |")
                print(rows[-1], flush=True)
    finally:
        if peer:
            peer.close()

    # Time per step of the MLP at hi chains over lo chains, the median over repeats of each
    # repeat's pair of measurements.
    lo, hi = (("mlp-sgld", c) for c in CASES["mlp-sgld"]["chains"])
    mlp = [
        statistics.median(
            (t_hi / steps_of[hi]) / (t_lo / steps_of[lo])
            for t_lo, t_hi in zip(times[lo][side], times[hi][side], strict=True)
        )
        if times[lo][side]
        else None
        for side in ("basin", "peer")
    ]
    mlp_line = (
        f"MLP step time, {hi[1]} chains / {lo[1]} chain (median of the repeats' pairs): "
        f"Basin {fmt(mlp[0])} (goal <= 3), BlackJAX {fmt(mlp[1])}."
    )
    print(mlp_line)
    if args.no_record or args.quick:
        print("(not recorded: --no-record or --quick)")
        return
    peer_line = (
        "BlackJAX peer: {blackjax} (jax {jax}, jaxlib {jaxlib}, {jax_device})".format(
            **peer.versions
        )
        if peer
        else "BlackJAX peer: not set up"
    )
    stamp = now()
    block = [
        f"## {stamp}",
        "",
        f"`python -m bench {shlex.join(sys.argv[1:])}`: each measurement runs the steps given "
        f"(doubled from {steps} until one lasts {MIN_SECONDS} s), median of {repeats} repeats, "
        "Basin and BlackJAX alternating, and a case's chain counts too; float32.",
        "",
        machine(basin.describe(args.device), peer_line),
        "",
        header,
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
        mlp_line,
        "",
    ]
    if peer:
        kept = ", ".join(f"{case} {c}: {keys}" for (case, c), keys in peer.keys.items())
        block += [f"BlackJAX's PRNG keys, the faster of two schedules per case: {kept}.", ""]
    record(block)


def jobs(args: argparse.Namespace) -> None:
    from . import jobs as bench_jobs  # imports torch

    thins = tuple(int(t) for t in args.thin.split(","))
    repeats = 1 if args.quick else args.repeats
    print(f"median of {repeats} repeats, turns, from rest\n{bench_jobs.HEADER}")
    rows = bench_jobs.run(repeats, thins, QUICK_JOBS_STEPS if args.quick else None)
    if args.no_record or args.quick:
        print("(not recorded: --no-record or --quick)")
        return
    stamp = now()
    block = [
        f"## {stamp}: jobs overhead",
        "",
        f"`python -m bench {shlex.join(sys.argv[1:])}`: bare `kernel.run` in the loop's blocks "
        f"(`runs.loop.plan`), tracing the positions the spec records (held up to a flush's "
        f"32 MB, then dropped) vs "
        f"the sampling loop of `runs.loop.execute` into a fresh Store (blocks, records, flushes, "
        f"progress); the last column is the whole run (target build, summary with ESS and "
        f"R-hat). Median of {args.repeats}, the sides taking turns "
        f"to go first, each timed from rest ({bench_jobs.SETTLE_S:g} s idle before it); the "
        "overhead is the median of each repeat's jobs / bare, and the range is theirs. The "
        "control, `bare while writing them`, times the bare side while a plain thread writes "
        "the jobs side's bytes to a plain file (the median of its ratios to bare): the disk's "
        "own cost. Goal (issue 4): overhead <= 10%.",
        "",
        machine(),
        "",
        bench_jobs.HEADER,
        *rows,
        "",
    ]
    record(block)


def llc_bench(args: argparse.Namespace) -> None:
    from . import llc as bench_llc  # imports torch

    cases = tuple(c.strip() for c in args.cases.split(",") if c.strip())
    unknown = sorted(set(cases) - set(bench_llc.CASES))
    if unknown:
        raise SystemExit(f"--cases: unknown {unknown}; choose from {list(bench_llc.CASES)}")
    results = bench_llc.run(args.repeats, args.quick, cases, args.module_chains)
    if args.no_record or args.quick:
        return
    stamp = now()
    rows = []
    for name in ("normal-crossing", "dln", "module"):
        if name not in results:
            continue
        r = results[name]
        peer = r["devinterp"] or {}
        peer_s = statistics.median(r["devinterp_s"]) if r["devinterp_s"] else None
        peer_llc = f"{fmt(peer['llc_mean'], 4)} +- {fmt(peer['llc_std'], 2)}" if peer else "-"
        if peer.get("llc_mean_full_init") is not None:
            peer_llc += f" (full-data baseline: {fmt(peer['llc_mean_full_init'], 4)})"
        true = "-" if r["true"] is None else f"{r['true']:g}"
        for path in bench_llc.PATHS:  # one row per path: eager, then compiled chunks
            b, cold = r["basin"][path], r["basin_cold_s"][path]
            warm = statistics.median(r["basin_warm_s"][path])
            steps = "compiled" if b["compiled"] else "eager"
            rows.append(
                f"| {name} | {true} | {fmt(b['mean'], 4)} +- {fmt(b['std'], 2)} | "
                f"{steps} | {peer_llc} | {cold:.2f} | {warm:.3f} | {fmt(peer_s, 4)} | "
                f"{fmt(peer_s / cold if peer_s else None)} | "
                f"{fmt(peer_s / warm if peer_s else None)} |"
            )
    notes = []
    if "normal-crossing" in results:
        nc = results["normal-crossing"]
        errors = [m - nc["true"] for m in nc["seeds"]]
        peer_error = (nc["devinterp"] or {}).get("llc_mean", math.nan) - nc["true"]
        notes += [
            f"Accuracy on normal-crossing, where one estimate's error is mostly its own noise: "
            f"Basin with {len(errors)} more seeds (same data) reads "
            f"{statistics.mean(nc['seeds']):.4f} on average, SD "
            f"{statistics.stdev(nc['seeds']):.4f} between seeds, RMS error "
            f"{math.sqrt(statistics.mean(e * e for e in errors)):.4f}; "
            f"devinterp's one run is off by {peer_error:+.4f}.",
            "",
        ]
    if "module" in results:
        r = results["module"]
        peer = r["devinterp"] or {}
        peer_full = peer.get("llc_per_chain_full_init") or []
        peer_se = statistics.stdev(peer_full) / math.sqrt(len(peer_full)) if peer_full else None
        parts = []
        for path in bench_llc.PATHS:
            b = r["basin"][path]
            se = b["se"]
            if peer_se is not None:
                gap = b["mean"] - peer["llc_mean_full_init"]
                combined = math.sqrt(se * se + peer_se * peer_se)
                parts.append(
                    f"{path} {fmt(b['mean'], 4)} (SE {fmt(se, 2)}) - devinterp "
                    f"{fmt(peer['llc_mean_full_init'], 4)} (SE {fmt(peer_se, 2)}) = "
                    f"{gap:+.3g}, {abs(gap) / combined:.2f} combined SE"
                )
        notes += [
            f"module: the digits MLP of examples/digits_mlp.py as a user's nn.Module "
            f"({peer.get('params', '?')} parameters), w0 = examples.train_digits.train after "
            f"{bench_llc.MODULE_TRAIN_STEPS} SGD steps (seed 0); SGLD lr "
            f"{bench_llc.MODULE_STEP:g}, localization 1, nbeta = n / log n = "
            f"{fmt(peer.get('nbeta'), 4)} on both sides, batch 128, "
            f"{peer.get('chains', '?')} chains x {peer.get('draws', '?')} draws, no burn-in. "
            f"devinterp's own baseline is {peer.get('init_loss_batches', '?')} minibatches "
            f"(init_loss {fmt(peer.get('init_loss'), 5)} against the full data's "
            f"{fmt(peer.get('init_loss_full'), 5)}); Basin against devinterp's full-data-baseline "
            f"variant, SE = SD over chains / sqrt(chains): " + "; ".join(parts) + ".",
            "",
        ]
    if "step_cost" in results:
        cost = results["step_cost"]
        notes += [
            f"100K-class DLN (widths {cost['widths']}, d = {cost['dim']}), one chain, batch 500, "
            f"{cost['steps']} steps a timing (whole noise blocks), ms per step: "
            f"bare forward + backward {cost['bare'] * 1e3:.2f}, Basin SGLD eager "
            f"{cost['eager'] * 1e3:.2f} ({cost['eager'] / cost['bare']:.2f}x), compiled "
            f"{cost['compiled'] * 1e3:.2f} ({cost['compiled'] / cost['bare']:.2f}x); compiled "
            f"and paired with w0's batch loss as LLC runs are, "
            f"{cost['compiled_paired'] * 1e3:.2f} "
            f"({cost['compiled_paired'] / cost['bare']:.2f}x).",
            "",
        ]
    block = [
        "",
        f"## {stamp}: LLC, Basin vs devinterp 1.3.2",
        "",
        f"`python -m bench {shlex.join(sys.argv[1:])}`. Basin: median of {args.repeats} warm "
        "repeats after one cold run, eagerly and with compiled chunks (the cold one with its "
        "compile), each repeat a fresh `llc.Paired` wrap as an LLC run makes; devinterp: its "
        "estimator call, once per case, and where a run takes under "
        f"{bench_llc.PEER_TURNS_S:g} s once more in each repeat, taking turns with Basin "
        "(then the median of its runs; runs per case: "
        + ", ".join(f"{k} {len(v['devinterp_s'])}" for k, v in results.items() if k != "step_cost")
        + "). LLC: mean +- SD over chains. Goal (issue 5): devinterp / Basin >= 200 "
        "on normal-crossing at equal or better accuracy; 100K-class DLN step <= 1.2 x a bare "
        "forward + backward; module: agreement within the combined SE, devinterp / Basin >= 10.",
        "",
        machine(f"torch {__import__('torch').__version__}, float32"),
        "",
        "| task | true LLC | Basin LLC | Basin steps | devinterp LLC | Basin cold s "
        "| Basin warm s | devinterp s | devinterp / Basin cold | devinterp / Basin warm |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        *notes,
    ]
    record(block)


def surface_bench(args: argparse.Namespace) -> None:
    from . import surface as bench_surface  # imports torch

    r = bench_surface.run(args.repeats, args.quick)
    s = r["surface"]
    print(json.dumps({k: v for k, v in r.items() if k != "pca"} | {"pca": r["pca"]}, indent=1))
    if args.no_record or args.quick:
        return
    stamp = now()
    pca_rows = []
    for method, runs in r["pca"].items():
        first = runs[0]
        ratio = ", ".join(f"{x:.4f}" for x in first["ratio"][:3])
        pca_rows.append(
            f"| {method} | {len(runs)} | {statistics.median(x['seconds'] for x in runs):.1f} | "
            f"{max(x['rss_peak'] for x in runs) / 2**30:.2f} | "
            f"{max(x['rss_peak'] - x['rss_before'] for x in runs) / 2**30:.2f} | {ratio} | "
            f"{first['orthonormal_error']:.1e} |"
        )
    limit = ", ".join(f"{x:.4f}" for x in r["walk_ratio"][:3])
    block = [
        "",
        f"## {stamp}: loss-landscape surfaces",
        "",
        f"`python -m bench {shlex.join(sys.argv[1:])}`. Goal (issue 6): the batched 41 x 41 "
        "surface >= 10x faster than a per-point loop; the PCA of a 10^5-parameter, 2000-snapshot "
        "trajectory within a 2-core, 24 GiB machine's memory, with no d x d matrix.",
        "",
        machine(f"torch {__import__('torch').__version__}"),
        "",
        f"(a) Digits MLP 64-32-10 (d = {s['dim']}, full training split n = {s['n']}), 41 x 41 "
        f"grid on filter-normalised random directions, median of {len(s['all_seconds']['batched'])}"
        " alternating repeats, in float32, and in float64 (the rows marked float64: surfaces"
        " default to float64). Basin batched: the grid points as chains of one target "
        "(`landscapes.surface.grid_losses`, the first layer computed once per direction), at "
        f"most {s['chunk']} grid points per batched pass.",
        "",
        "| side | seconds | side / batched | max rel. diff. from batched |",
        "|---|---:|---:|---:|",
        *(
            row
            for prefix, t in (("", s), ("float64: ", r["surface64"]))
            for row in (
                f"| {prefix}Basin batched | {t['seconds']['batched']:.4f} | 1 | 0 |",
                *(
                    f"| {prefix}{label} | {t['seconds'][side]:.4f} | "
                    f"{t['seconds'][side] / t['seconds']['batched']:.1f} | "
                    f"{t['max_rel_diff'][side]:.1e} |"
                    for side, label in (
                        ("loop_target", "loop, same target one point at a time"),
                        ("loop_module", "loop, nn.Sequential + vector_to_parameters (Li et al.)"),
                    )
                ),
            )
        ),
        *(
            row
            for label, case in (
                ("banana (d = 2)", r["potential"]),
                (f"DLN (d = {r['linear']['dim']}, n = {r['linear']['n']})", r["linear"]),
            )
            for row in (
                f"| {label}: Basin batched | {case['seconds']['batched']:.4f} | 1 | 0 |",
                f"| {label}: loop, one point at a time | {case['seconds']['loop_target']:.4f} | "
                f"{case['seconds']['loop_target'] / case['seconds']['batched']:.0f} | "
                f"{case['max_rel_diff']['loop_target']:.1e} |",
            )
        ),
        "",
        "(b) PCA of a Gaussian random walk, 2000 snapshots x d = 10^5 (float32, 0.75 GiB), "
        "100 components; each run in a fresh process. Peak RSS is the process's whole peak "
        "(torch, the data and the PCA); 'PCA extra' is the peak minus the RSS before the PCA. "
        f"Exact d -> inf shares of PC1-3: {limit}.",
        "",
        "| method | runs | seconds (median) | peak RSS GiB | PCA extra GiB | PC1-3 share "
        "| max abs(V V^T - I) |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *pca_rows,
        "",
    ]
    record(block)


def app_bench(args: argparse.Namespace) -> None:
    from . import app as bench_app

    load = os.getloadavg()[0]
    r = bench_app.run(args.repeats, args.quick)
    load_after = os.getloadavg()[0]
    rerun, step, tab, fps = r["rerun"], r["step"], r["fresh_tab"], r["fps"]
    print(json.dumps(r, indent=1))

    def each(xs: list[float], scale: float = 1, digits: int = 2) -> str:
        return ", ".join(f"{x * scale:.{digits}f}" for x in xs)

    def verdict(value: float, goal: float, under: bool = True) -> str:
        return "met" if (value < goal if under else value >= goal) else "missed"

    med = statistics.median
    pw, noop, in_page = (med(step[way]) for way in ("playwright", "noop", "in_page"))
    frame, frames = r["first_frame_median"], r["first_frame"]
    rows = [
        "| click Run -> first animated frame drawn (warm; the player's `#frame` reads 'step k "
        f"of T'), browser's own clock: click event -> label written | {frame['in_page']:.2f} s | "
        f"< 1 s | {verdict(frame['in_page'], 1.0)} | {each(frames['in_page'])} |",
        f"| the same, Playwright's clock: `click()` -> the label found in the iframe | "
        f"{frame['playwright']:.2f} s | < 1 s | {verdict(frame['playwright'], 1.0)} | "
        f"{each(frames['playwright'])} |",
        *(
            f"| frames drawn a second while playing at {speed} steps/s (player's `data-fps`, "
            f"read once a second) | {med(x):.0f} | "
            + (f">= 30 | {verdict(med(x), 30, under=False)}" if speed == 30 else "- | -")
            + f" | {each(x, digits=0)} |"
            for speed, x in fps.items()
        ),
        f"| Step click, Playwright `click()` -> `data-frame` + 1 | {pw * 1e3:.1f} ms | < 150 ms | "
        f"{verdict(pw, 0.150)} | {each(step['playwright'], 1e3, 1)} |",
        f"| Playwright no-op: one read of `data-frame` | {noop * 1e3:.1f} ms | - | - | "
        f"{each(step['noop'], 1e3, 1)} |",
        f"| Step click in the page: `el.click()` -> next animation frame (performance.now) | "
        f"{in_page * 1e3:.1f} ms | < 150 ms | {verdict(in_page, 0.150)} | "
        f"{each(step['in_page'], 1e3, 1)} |",
        f"| Playground rerun (AppTest, server side) while 4096 chains stream | "
        f"{r['rerun_median'] * 1e3:.0f} ms | < 300 ms | {verdict(r['rerun_median'], 0.300)} | "
        f"{each(rerun['seconds'], 1e3, 0)} |",
        f"| fresh tab -> first figure visible (`goto` -> first `.js-plotly-plot`; the app's "
        f"scripts in the HTTP cache) | {med(tab['first']):.2f} s | < 3 s | "
        f"{verdict(med(tab['first']), 3.0)} | {each(tab['first'])} |",
        f"| fresh tab -> the shown run's density figure visible | {med(tab['run']):.2f} s | - | "
        f"- | {each(tab['run'])} |",
        f"| first visit (a new browser context, empty HTTP cache) -> first figure visible | "
        f"{tab['cold_first'][0]:.2f} s | - | - | |",
        f"| click Run -> first live point (density figure), warm | "
        f"{r['first_point_median']:.2f} s | < 2 s (issue 7) | "
        f"{verdict(r['first_point_median'], 2.0)} | {each(r['first_point_warm'])} |",
        f"| the same, first run of the worker (compiles the kernel) | "
        f"{r['first_point_cold']:.2f} s | - | - | |",
    ]
    header = ["| measurement | median | goal | met? | all |", "|---|---:|---|---|---|"]
    print("\n".join(["", *header, *rows]))
    if args.no_record or args.quick:
        print("(not recorded: --no-record or --quick)")
        return
    errors = r["console_errors"]
    block = [
        "",
        f"## {now()}: the app, animated (issue 40)",
        "",
        f"`python -m bench {shlex.join(sys.argv[1:])}`. Goals (issue 40) on the 2-core machine: "
        "first animated frame under 1 s after Run on a warm server; the animation holds 30 "
        "frames a second; a Step click under 150 ms (client-side); a page rerun under 300 ms "
        "while a 4096-chain run streams; a fresh tab shows its first figure within 3 s.",
        "",
        machine(f"torch {__import__('torch').__version__}", "headless Debian Chromium"),
        "",
        "This machine is shared and noisy (other work ran beside the bench; load average "
        f"{load:.2f} at the start, {load_after:.2f} at the end): each figure is the median of "
        "its repeats, all of them listed. One server and one Chromium page for the browser "
        f"measures (bench/app.py, each function's docstring says what its clock measures); the "
        f"Playground's default run, {r['default_run']}, the first 1000 steps traced for the "
        "player; the store emptied and the page reloaded before each click on Run.",
        "",
        *header,
        *rows,
        "",
        f"The fresh tabs opened with {r['runs_in_store']} completed run(s) in the store. The "
        f"streaming run (recording one step in {rerun['thin']}) had {rerun['records'][0]} to "
        f"{rerun['records'][-1]} records during the reruns. Console errors in the page: "
        f"{len(errors)}.",
        "",
    ]
    record(block)


def faults_bench(args: argparse.Namespace) -> None:
    from . import faults

    rows = faults.run()
    verdicts = [r["verdict"] for r in rows]
    counts = {v: verdicts.count(v) for v in ("handled", "traceback", "failing")}
    print(f"{len(rows)} probes: {counts}")
    if args.no_record:
        return
    record(
        [
            "",
            f"## {now()}: faults",
            "",
            f"`python -m bench {shlex.join(sys.argv[1:])}`: each bad input or fault of issue 38 "
            "through `python -m jobs` in a store of its own (bench/faults.py). Goal (issue 38): "
            "0 failing, 0 tracebacks for user input, 0 draws lost across kill / corrupt probes.",
            "",
            f"Probes tried: {len(rows)}; handled with a clear error or survived: "
            f"{counts['handled']}; tracebacks: {counts['traceback']}; "
            f"failing: {counts['failing']}.",
            "",
            "| probe | verdict | s | what the user saw (last line) |",
            "|---|---|---:|---|",
            *(
                f"| {r['probe']} | {r['verdict']} | {r['seconds']:.1f} | "
                f"{r['said'].replace('|', '/')} |"
                for r in rows
            ),
            "",
        ]
    )


def sgrld_bench(args: argparse.Namespace) -> None:
    from . import sgrld

    lines = sgrld.run(args.repeats, args.quick)
    if args.no_record or args.quick:
        print("(not recorded: --no-record or --quick)")
        return
    record(
        [
            "",
            f"## {now()}: sgrld",
            "",
            f"`python -m bench {shlex.join(sys.argv[1:])}`: the SGRLD metrics of Yu et al. "
            "(bench/sgrld.py). Goals (issue 39): Monge within 1.3x of identity's time a step, "
            "Shampoo within 2.5x; the 32 x 2e5 funnel reproduction under 60 s a metric.",
            "",
            machine(f"torch {__import__('torch').__version__}, CPU"),
            "",
            *lines,
            "",
        ]
    )


def eqn_bench(args: argparse.Namespace) -> None:
    from . import eqn as bench_eqn  # imports torch

    r = bench_eqn.run(args.repeats, args.quick, args.jobs, args.threads)
    if args.no_record or args.quick:
        print("(not recorded: --no-record or --quick)")
        return
    s = r["study"]
    record(
        [
            "",
            f"## {now()}: EQN (issue 41)",
            "",
            f"`python -m bench {shlex.join(sys.argv[1:])}` (bench/eqn.py), "
            f"{r['total_s']:.0f} s in all: the overhead timing alone first "
            f"({r['timing_s']:.0f} s), then the Fig. 10 study's "
            f"{s['seeds'] * len(bench_eqn.DIMS) * len(bench_eqn.WALKERS)} runs in "
            f"{s['jobs']} processes ({s['wall']:.0f} s). Goals (issue 41): EQN's time a step "
            "at most 1.5x BAOAB's on the same walkers; Fig. 10 of Heber et al. (2020) "
            "reproduced.",
            "",
            machine(
                f"torch {__import__('torch').__version__}, CPU, {args.threads} torch thread(s) "
                "for the timing, 1 a study process"
            ),
            "",
            f"Overhead: {r['overhead_steps']} steps a measurement (= covariance_every: each "
            f"holds one rebuild of B), median of {args.repeats} turns, the same walkers and "
            f"noise stream for both kernels; BAOAB step 0.125 on the Gaussian, "
            f"{bench_eqn.MLP_STEP} on the MLP (gaussian prior, U = n L + prior), friction 1, "
            "EQN eta 10.",
            "",
            *bench_eqn.OVERHEAD_HEADER,
            *(bench_eqn.overhead_line(row) for row in r["overhead"]),
            "",
            *r["study_lines"],
            "",
        ]
    )


def reprior_bench(args: argparse.Namespace) -> None:
    from . import reprior as bench_reprior  # imports torch

    load = os.getloadavg()[0]
    r = bench_reprior.run(args.repeats, args.quick)
    load_after = os.getloadavg()[0]
    if args.no_record or args.quick:
        print("(not recorded: --no-record or --quick)")
        return
    s = r["ess"]
    record(
        [
            "",
            f"## {now()}: repriorisation (issue 42)",
            "",
            f"`python -m bench {shlex.join(sys.argv[1:])}` (bench/reprior.py), "
            f"{r['total_s']:.0f} s in all: the speed timing first ({r['timing_s']:.0f} s), then "
            f"the ESS study's {len(s['chains'])} runs in-process ({s['wall']:.0f} s), then the "
            f"KL study ({r['kl_s']:.0f} s). Goals (issue 42): Basin's ESS and KL tables beside "
            "those of the independent small-scale check (docs/methods/wide-networks.md); the "
            "repriorised step at most 3x the standard step on CPU (the check measured 1.7-2.9x).",
            "",
            machine(f"torch {__import__('torch').__version__}, CPU, 1 torch thread"),
            "",
            f"Load average {load:.2f} at the start, {load_after:.2f} at the end (a shared host).",
            "",
            *r["lines"],
            "",
        ]
    )


def vi_bench(args: argparse.Namespace) -> None:
    from . import vi as bench_vi  # imports torch

    r = bench_vi.run(args.quick)
    if args.no_record or args.quick:
        print("(not recorded: --no-record or --quick)")
        return
    record(
        [
            "",
            f"## {now()}: VI via resolution of singularities (issue 43)",
            "",
            f"`python -m bench {shlex.join(sys.argv[1:])}` (bench/vi.py), {r['total_s']:.0f} s "
            "in all: the n-scans at H = 1, 2, 4 ("
            + ", ".join(f"{w:.0f} s" for w in r["walls"].values())
            + "). Goals (issue 43): the H = 1 scan (both sources, 6 values of n, 300 epochs; "
            "docs/methods/vi.md) within 10 minutes on the 2-core machine, in the background with "
            "progress and ETA; the table beside the paper's Table 2.",
            "",
            machine(f"torch {__import__('torch').__version__}, float64, CPU, 1 thread per fit"),
            "",
            *r["lines"],
            "",
        ]
    )


def live_bench(args: argparse.Namespace) -> None:
    from . import live as bench_live

    rows = bench_live.run(args.repeats, args.steps, args.chains)
    print(json.dumps(rows, indent=1))
    if args.no_record:
        return

    def median(key: str) -> str:
        return f"{statistics.median(r[key] for r in rows):.2f}"

    def each(key: str) -> str:
        return ", ".join(f"{r[key]:.2f}" for r in rows)

    switched = sum(bool(r["compiled"]) for r in rows)
    record(
        [
            "",
            f"## {now()}: live from the first second",
            "",
            f"`python -m bench {shlex.join(sys.argv[1:])}`: banana SGLD, {args.chains} chains x "
            f"{args.steps} steps, compile auto, submitted to a warm `python -m jobs worker` with "
            "an empty inductor cache of its own each repeat (a cold compile); the store polled "
            f"every {bench_live.POLL_S} s. Goals (issue 36): first records within 1 s, no gap "
            "over 2 s while the compile runs.",
            "",
            machine(f"torch {__import__('torch').__version__}"),
            "",
            "| measurement | median | all |",
            "|---|---:|---|",
            f"| submit -> first records (s) | {median('first_records_s')} | "
            f"{each('first_records_s')} |",
            f"| longest gap between record updates (s) | {median('max_gap_s')} | "
            f"{each('max_gap_s')} |",
            f"| whole run, submit to completed (s) | {median('run_s')} | {each('run_s')} |",
            "",
            f"Runs that switched to the compiled chunk before their end: {switched} of "
            f"{len(rows)}.",
            "",
        ]
    )


def scale_bench(args: argparse.Namespace) -> None:
    from . import scale

    r = scale.run(args.repeats, args.quick)
    local, ray = r["median"]["local"], r["median"]["ray"]
    lines = [
        "| backend | wall s (each repeat) | median s |",
        "|---|---|---:|",
        f"| local pool (2 slots) | {', '.join(f'{t:.1f}' for t in r['local_s'])} | {local:.1f} |",
        f"| Ray, 2 local nodes x 1 CPU | {', '.join(f'{t:.1f}' for t in r['ray_s'])} | {ray:.1f} |",
    ]
    print("\n".join(lines))
    print(f"Ray / local: {ray / local:.2f}; the same estimates: {r['same_estimates']}")
    if args.quick or args.no_record:
        return
    record(
        [
            "",
            f"## {now()}: a DLN sweep on the local pool and on a 2-node local Ray cluster",
            "",
            f"`python -m bench {shlex.join(sys.argv[1:])}`: `{r['command']}` ({r['runs']} runs), "
            "each time in a fresh store, local and Ray alternating (bench/scale.py).",
            "",
            machine(),
            "",
            *lines,
            "",
            f"Ray / local wall time: {ray / local:.2f}. Every run's estimate the same on both: "
            f"{r['same_estimates']}.",
        ]
    )


def whole_bench(args: argparse.Namespace) -> None:
    import importlib.metadata

    from . import whole

    cases = tuple(c.strip() for c in args.cases.split(",") if c.strip())
    unknown = sorted(set(cases) - set(whole.CASES))
    if unknown:
        raise SystemExit(f"--cases: unknown {unknown}; choose from {list(whole.CASES)}")
    r = whole.run(cases, args.pairs, args.quick, args.cold, not args.cold, args.timeout)
    if args.no_record or args.quick:
        print("(not recorded: --no-record or --quick)")
        return
    cache = (
        "Basin's compile cache cleared before every Basin process (`python -m jobs cache --clear`)"
        if args.cold
        else "one unmeasured process of each side per case first (Basin's cache warm)"
    )
    record(
        [
            "",
            f"## {now()}: whole jobs, Basin vs the peers (issue 58)",
            "",
            f"`python -m bench {shlex.join(sys.argv[1:])}` (bench/whole.py): each job a whole "
            "process, Basin (a fresh BASIN_HOME each) and the peer taking turns; wall = "
            "perf_counter around the process, CPU = its getrusage(RUSAGE_CHILDREN) user + sys; "
            f"medians, and the median of the per-pair ratios with their range; {cache}.",
            "",
            machine(f"torch {importlib.metadata.version('torch')}", *r["peers"]),
            "",
            *r["lines"],
            "",
            *r["notes"],
            "",
            "The commands (Basin's, then the peer's):",
            "",
            *r["commands"],
            "",
        ]
    )


def warmup_bench(args: argparse.Namespace) -> None:
    from . import warmup

    kernels = tuple(k.strip() for k in args.kernels.split(",") if k.strip())
    unknown = sorted(set(kernels) - {"nuts", "hmc"})
    if unknown:
        raise SystemExit(f"--kernels: unknown {unknown}; choose from nuts, hmc")
    r = warmup.run(
        args.chains, args.warmup, args.draws, args.repeats, kernels, not args.skip_per_chain
    )
    print(f"`python -m bench {shlex.join(sys.argv[1:])}` (bench/warmup.py, not recorded)")
    print("\n".join(["", *r["lines"], "", *r["notes"], "", *r["goals"]]))


def gpu_bench(args: argparse.Namespace) -> None:
    import torch

    from . import gpu

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "bench gpu: no CUDA device here, nothing measured (bench/RESULTS.md keeps saying the "
            "GPU figures are not measured); `--device cpu --quick` checks the script on the CPU"
        )
    devices = ["cuda", "cpu"] if args.device == "cuda" else ["cpu"]
    quick = args.quick or args.device == "cpu"
    rows = gpu.run(devices, quick)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "the CPU only"
    lines = gpu.table(rows, devices)
    print("\n".join(lines))
    if quick or args.no_record:
        return
    record(
        [
            "",
            f"## {now()}: the GPU path, {name}",
            "",
            f"`python -m bench {shlex.join(sys.argv[1:])}` (bench/gpu.py says what each row "
            "measures; cuda / cpu: how many times faster the GPU is).",
            "",
            machine(f"torch {torch.__version__}", f"GPU {name}"),
            "",
            *lines,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    setup = sub.add_parser("setup-peer", help="create bench/.peer-venv with jax and blackjax")
    setup.add_argument("--cuda", action="store_true", help="install jax[cuda12] (GPU machines)")
    run = sub.add_parser("engine", help="chain-steps per second, Basin vs BlackJAX")
    run.add_argument("--repeats", type=int, help=f"measurements per side (default {REPEATS})")
    run.add_argument("--steps", type=int, help=f"steps per measurement (default {STEPS})")
    run.add_argument(
        "--quick", action="store_true", help="smoke test: few steps, 1 repeat, not recorded"
    )
    run.add_argument("--device", default="auto", help="Basin's device: auto, cpu, cuda[:i]")
    run.add_argument("--chains", help="banana chain counts (default 64,4096)")
    run.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    overhead = sub.add_parser("jobs", help="run-through-jobs overhead vs the bare sampler loop")
    overhead.add_argument("--repeats", type=int, default=5)
    overhead.add_argument("--thin", default="1,10", help="thinning values to measure")
    overhead.add_argument(
        "--quick", action="store_true", help=f"{QUICK_JOBS_STEPS} steps, 1 repeat, not recorded"
    )
    overhead.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    sub.add_parser("setup-devinterp", help="create bench/.devinterp-venv with devinterp 1.3.2")
    llc = sub.add_parser("llc", help="LLC estimates, Basin vs devinterp 1.3.2")
    llc.add_argument("--repeats", type=int, default=5)
    llc.add_argument("--quick", action="store_true", help="500 steps, nothing recorded")
    llc.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    llc.add_argument(
        "--cases",
        default="normal-crossing,dln,module,step-cost",
        help="comma-separated: normal-crossing, dln, module, step-cost (default all)",
    )
    llc.add_argument(
        "--module-chains", dest="module_chains", type=int, default=4, help="the module case's"
    )
    surface = sub.add_parser("surface", help="batched surfaces vs per-point loops; a large PCA")
    surface.add_argument("--repeats", type=int, default=5)
    surface.add_argument("--quick", action="store_true", help="one repeat, nothing recorded")
    surface.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    app = sub.add_parser(
        "app", help="the app's responsiveness: first point and frame, fps, Step, reruns, new tab"
    )
    app.add_argument("--repeats", type=int, default=5, help="clicks on Run, tabs; 4x reruns")
    app.add_argument("--quick", action="store_true", help="two of each, three reruns, not recorded")
    app.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    faults = sub.add_parser("faults", help="issue 38's bad inputs and faults through the CLI")
    faults.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    sgrld = sub.add_parser("sgrld", help="SGRLD metrics: speed, the funnel and digits tables")
    sgrld.add_argument("--repeats", type=int, default=5)
    sgrld.add_argument("--quick", action="store_true", help="short runs, not recorded")
    sgrld.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    eqn = sub.add_parser("eqn", help="EQN: Fig. 10's IAT study and its overhead vs BAOAB")
    eqn.add_argument("--repeats", type=int, default=5, help="turns of the overhead timing")
    eqn.add_argument("--quick", action="store_true", help="short runs, not recorded")
    eqn.add_argument("--jobs", type=int, default=2, help="processes for the study's seeds")
    eqn.add_argument("--threads", type=int, default=1, help="torch threads for the timing")
    eqn.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    reprior = sub.add_parser(
        "reprior", help="wide BNN repriorisation: ESS, KL and step-cost tables (Hron et al. 2022)"
    )
    reprior.add_argument("--repeats", type=int, default=5, help="turns of the speed timing")
    reprior.add_argument("--quick", action="store_true", help="short runs, not recorded")
    reprior.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    vi_p = sub.add_parser("vi", help="VI via resolution of singularities: the n-scan, small")
    vi_p.add_argument("--quick", action="store_true", help="30 epochs, 3 n, not recorded")
    vi_p.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    scale_p = sub.add_parser("scale", help="README's DLN sweep: local pool vs a 2-node Ray cluster")
    scale_p.add_argument("--repeats", type=int, default=3)
    scale_p.add_argument("--quick", action="store_true", help="2 problems, 500 steps, no record")
    scale_p.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    gpu_p = sub.add_parser("gpu", help="the GPU path beside the CPU: engine, DLN LLC, surface, law")
    gpu_p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    gpu_p.add_argument("--quick", action="store_true", help="small sizes, not recorded")
    gpu_p.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    live = sub.add_parser("live", help="submit to first records, and gaps while compiling")
    live.add_argument("--repeats", type=int, default=3)
    live.add_argument("--steps", type=int, default=20_000)
    live.add_argument("--chains", type=int, default=64)
    live.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    whole_p = sub.add_parser("whole", help="whole job processes, Basin vs BlackJAX / devinterp")
    whole_p.add_argument("--pairs", type=int, default=5, help="Basin-peer turns per case")
    whole_p.add_argument(
        "--cases",
        default="banana-sgld-64,banana-sgld-4096,banana-nuts-128,llc-normal-crossing,llc-module",
        help="comma-separated (default all)",
    )
    warmth = whole_p.add_mutually_exclusive_group()
    warmth.add_argument(
        "--warm", action="store_true", help="one unmeasured process a side first (default)"
    )
    warmth.add_argument(
        "--cold", action="store_true", help="clear Basin's compile cache before each process"
    )
    whole_p.add_argument("--timeout", type=float, default=1800.0, help="seconds a process")
    whole_p.add_argument("--quick", action="store_true", help="steps / 10, 1 pair, not recorded")
    whole_p.add_argument("--no-record", action="store_true", help="do not append to RESULTS.md")
    warmup_p = sub.add_parser("warmup", help="step_size auto vs BlackJAX's window_adaptation")
    warmup_p.add_argument("--chains", type=int, default=64)
    warmup_p.add_argument("--warmup", type=int, default=1000, help="adapting steps")
    warmup_p.add_argument("--draws", type=int, default=1000, help="draws after the warm-up")
    warmup_p.add_argument("--repeats", type=int, default=3, help="seeds, the same on both sides")
    warmup_p.add_argument("--kernels", default="nuts,hmc", help="comma-separated: nuts, hmc")
    warmup_p.add_argument(
        "--skip-per-chain",
        action="store_true",
        help="leave out Basin's adapt: chain runs (each chain adapting alone, as BlackJAX's)",
    )
    args = parser.parse_args()
    if args.command == "warmup":
        return warmup_bench(args)
    if args.command == "whole":
        return whole_bench(args)
    if args.command == "faults":
        return faults_bench(args)
    if args.command == "sgrld":
        return sgrld_bench(args)
    if args.command == "eqn":
        return eqn_bench(args)
    if args.command == "reprior":
        return reprior_bench(args)
    if args.command == "vi":
        return vi_bench(args)
    if args.command == "gpu":
        return gpu_bench(args)
    if args.command == "scale":
        return scale_bench(args)
    if args.command == "live":
        live_bench(args)
    elif args.command == "app":
        app_bench(args)
    elif args.command == "surface":
        surface_bench(args)
    elif args.command == "setup-peer":
        setup_peer(args.cuda)
    elif args.command == "setup-devinterp":
        from .peer_devinterp import setup_devinterp

        setup_devinterp()
    elif args.command == "llc":
        llc_bench(args)
    elif args.command == "jobs":
        jobs(args)
    else:
        engine(args)


if __name__ == "__main__":
    main()
