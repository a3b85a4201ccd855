"""``python -m bench sgrld``: the SGRLD metrics of Yu et al., timed and reproduced.

1. Speed: steps per second of each metric against identity's on the softplus funnel (32 chains,
   eager and compiled) and on the digits MLP (64-50-50-10, gaussian prior, batch 100, 8 chains,
   eager), measured in one process, metrics interleaved, median of the repeats. Goal (issue
   39): Monge within 1.3x of identity, Shampoo within 2.5x.
2. The funnel reproduction through ``python -m jobs run`` (the user's path: a run with its
   compile, records and store), 32 chains x 2e5 steps, 10% burn-in, per metric: seconds and the
   tail table beside the paper's reproduced values (studies.funnel). Goal: under 60 s a metric.
3. Digits, both priors, every metric at its tuned learning rate (studies.digits): test ensemble
   log p, accuracy, ECE, confidence and curvature, mean +- sd over seeds.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import landscapes
import samplers
from runs.store import Store
from studies import digits, funnel

METRICS = ("identity", "rmsprop", "wenzel", "monge", "shampoo")
ROOT = Path(__file__).resolve().parent.parent


def speed(repeats: int, steps: int) -> list[dict]:
    """Rows: target, path, metric, steps/s (median), ratio to identity."""
    funnel_target = landscapes.make("softplus-funnel", gradient_noise=1.0, device="cpu")
    mlp = digits.target("gaussian")
    cases = []  # (target label, path, metric, kernel, target, chains, steps, compiled)
    for metric in METRICS:
        for compiled in (False, True):
            kernel = samplers.make("sgrld", **funnel.parameters(metric))
            path = "compiled" if compiled else "eager"
            n = steps * (8 if compiled else 1)
            cases.append(("funnel", path, metric, kernel, funnel_target, 32, n, compiled))
        kernel = samplers.make("sgrld", **digits.settings("gaussian", metric))
        cases.append(("digits MLP", "eager", metric, kernel, mlp, 8, max(50, steps // 10), False))
    states = {}
    for i, (_, _, _, kernel, target, chains, _, compiled) in enumerate(cases):
        g = torch.Generator().manual_seed(0)
        state = kernel.init(target.initial(g, chains), target, g)
        state, _ = kernel.run(state, target, g, 512, compiled=compiled)  # warm-up, compiles
        states[i] = (state, g)
    times: dict[int, list[float]] = {i: [] for i in range(len(cases))}
    for _ in range(repeats):
        for i, (_, _, _, kernel, target, _, n, compiled) in enumerate(cases):
            state, g = states[i]
            tic = time.perf_counter()
            state, _ = kernel.run(state, target, g, n, compiled=compiled)
            times[i].append(time.perf_counter() - tic)
            states[i] = (state, g)
    rows = []
    for i, (label, path, metric, _, _, chains, n, compiled) in enumerate(cases):
        rows.append(
            {
                "target": label,
                "path": path,
                "metric": metric,
                "chains": chains,
                "steps_per_s": statistics.median(n / t for t in times[i]),
                "compiled": compiled and getattr(cases[i][3], "compilable", True),
            }
        )
    for row in rows:
        base = next(
            r for r in rows if (r["target"], r["path"], r["metric"]) == (*_key(row), "identity")
        )
        row["slowdown"] = base["steps_per_s"] / row["steps_per_s"]
    return rows


def _key(row: dict) -> tuple[str, str]:
    return row["target"], row["path"]


def reproduce_funnel(metrics: tuple[str, ...], chains: int, steps: int) -> list[dict]:
    """Each metric's protocol run through ``python -m jobs run`` in a store of its own."""
    rows = []
    for metric in metrics:
        with tempfile.TemporaryDirectory() as home:
            spec = Path(home) / "spec.json"
            spec.write_text(json.dumps(funnel.spec(metric, chains, steps)))
            tic = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-m", "jobs", "run", str(spec), "--json"],
                cwd=ROOT,
                env={**os.environ, "BASIN_HOME": home},
                capture_output=True,
                text=True,
                check=True,
            )
            wall = time.perf_counter() - tic
            summary = json.loads(out.stdout)
            store = Store(Path(home))
            data = store.read(summary["run_id"], names=["step", "position", "diverged"])
            keep = data["step"] >= int(steps * funnel.BURN_FRACTION)
            position = data["position"][keep]
            tails = funnel.tails(position[..., 1], position[..., 0])
            rows.append(
                {
                    "metric": metric,
                    "wall_s": wall,
                    "run_s": summary["seconds"],
                    "compiled": summary["compiled"],
                    "diverged": summary["diverged_chains"],
                    **tails,
                }
            )
        print(f"funnel {metric}: {rows[-1]}", flush=True)
    return rows


def digits_table(seeds: int, steps: int) -> list[dict]:
    """Test-set metrics of each prior x metric at its tuned learning rate, over ``seeds``."""
    rows = []
    for prior in digits.PRIORS:
        target = digits.target(prior)
        for metric in METRICS:
            results = [digits.run(target, prior, metric, seed, steps) for seed in range(seeds)]
            assert not any(r["diverged"] for r in results), (prior, metric)
            row = {"prior": prior, "metric": metric, **digits.TUNED[prior][metric]}
            for key in ("log_p", "mean_single_log_p", "accuracy", "ece", "confidence", "curvature"):
                values = [r[key] for r in results]
                row[key] = (statistics.mean(values), statistics.stdev(values) if seeds > 1 else 0)
            row["seconds"] = statistics.mean(r["seconds"] for r in results)
            rows.append(row)
            print(f"digits {prior} {metric}: {row}", flush=True)
    return rows


def table_lines(speed_rows, funnel_rows, digits_rows) -> list[str]:
    lines = [
        "Speed (median steps/s; slowdown = identity's steps/s over the metric's):",
        "",
        "| target | path | chains | metric | steps/s | slowdown vs identity |",
        "|---|---|---:|---|---:|---:|",
    ]
    lines += [
        f"| {r['target']} | {r['path']} | {r['chains']} | {r['metric']} | "
        f"{r['steps_per_s']:.4g} | {r['slowdown']:.2f} |"
        for r in speed_rows
    ]
    if funnel_rows:
        cols = funnel.COLUMNS
        lines += [
            "",
            "Funnel reproduction (Yu et al.'s Sec. 4.2 protocol, `python -m jobs run`; "
            "Basin row, then the row reproduced from the authors' code, docs/methods/sgrld.md):",
            "",
            "| metric | s (wall) | compiled | " + " | ".join(cols) + " |",
            "|---|---:|---|" + "---:|" * len(cols),
            "| truth | | | "
            + " | ".join("-" if funnel.TRUTH[c] is None else f"{funnel.TRUTH[c]:.3g}" for c in cols)
            + " |",
        ]
        for r in funnel_rows:
            ours = " | ".join(_num(r[c]) for c in cols)
            lines.append(
                f"| {r['metric']} (Basin) | {r['wall_s']:.1f} | {r['compiled']} | {ours} |"
            )
            if r["metric"] in funnel.REFERENCE:
                ref = " | ".join(f"{x:.3g}" for x in funnel.REFERENCE[r["metric"]])
                lines.append(f"| {r['metric']} (paper) | | | {ref} |")
    if digits_rows:
        lines += [
            "",
            "Digits MLP 64-50-50-10 (n = 1077 train / 360 validation / 360 test), test set, "
            "mean +- sd over seeds:",
            "",
            "| prior | metric | l = h n | alpha2 | log p | mean single-draw log p | accuracy | "
            "ECE | confidence | curvature | s/run |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in digits_rows:
            pm = lambda k, r=r: f"{r[k][0]:.4f} +- {r[k][1]:.4f}"  # noqa: E731
            lines.append(
                f"| {r['prior']} | {r['metric']} | {r['learning_rate']:g} | "
                f"{r.get('alpha2', '-')} | {pm('log_p')} | {pm('mean_single_log_p')} | "
                f"{pm('accuracy')} | {pm('ece')} | {pm('confidence')} | "
                f"{r['curvature'][0]:.3g} | {r['seconds']:.1f} |"
            )
    return lines


def _num(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def run(repeats: int, quick: bool) -> list[str]:
    steps = 256 if quick else 2048
    speed_rows = speed(1 if quick else repeats, steps)
    for r in speed_rows:
        print(r, flush=True)
    funnel_steps = 20_000 if quick else funnel.STEPS
    funnel_rows = reproduce_funnel((*funnel.PROTOCOL, "wenzel"), funnel.CHAINS, funnel_steps)
    digits_rows = digits_table(1 if quick else 3, 600 if quick else digits.STEPS)
    lines = table_lines(speed_rows, funnel_rows, digits_rows)
    print("\n".join(lines))
    return lines
