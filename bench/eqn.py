"""``python -m bench eqn``: TATi's ensemble quasi-Newton sampler (issue 41, items 2 and 5).

1. Overhead (run first, alone in the machine's share of it): time per step of EQN against
   BAOAB on the same target from the same walkers, 8 and 16 walkers, on the d = 64 Gaussian
   of the study and on the digits MLP 64-16-10 (d = 1210; its largest tensor, the first
   layer's 16 x 64 weight, has 1024 entries, the most EQN preconditions). Each measurement is
   ``covariance_every`` = 1000 steps, so it holds exactly one rebuild of B (amortised as in a
   run); the two kernels take turns, ``repeats`` times; median ms per step and the median of
   each repeat's EQN / BAOAB. Goal (issue 41): EQN / BAOAB <= 1.5 (the paper: ~1.4 with 8
   walkers, ~1.5 with 16).
2. Fig. 10 of Heber et al. (2020) (their Sec. 3.4.1, with the mean-loss convention of
   docs/methods/tati.md): the IAT of each eigen-direction of L(w) = (1/d) w^T C w, lambda =
   linspace(1, 100, d), against walkers {1, 8, 16} for d = 4 and d = 64; EQN (BAOAB, step 0.125,
   friction 1, temperature 1, eta 10, B rebuilt every 1000 steps), 50,000 steps, 10% burn-in,
   float64, walkers started from exact draws of the target. The IAT of each walker's projection on
   each eigenvector, averaged over the walkers; mean +- sd over 5 seeds. One walker is plain BAOAB.
   The position variance per direction against d / (2 lambda). Seeds run in ``jobs`` processes of
   one torch thread each.

Torch runs on one thread in each process, as ``python -m jobs worker`` runs each run on a CPU
(runs.worker.default_slots); ``--threads`` changes it for the timing.
"""

from __future__ import annotations

import math
import multiprocessing
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch

import landscapes
import samplers
from landscapes.potentials import haar_rotation
from samplers import diagnostics

STEP, FRICTION, TEMPERATURE, ETA, EVERY = 0.125, 1.0, 1.0, 10.0, 1000
STEPS, BURN, SEEDS = 50_000, 0.1, 5
QUICK_STEPS, QUICK_SEEDS = 5_000, 2
DIMS, WALKERS = (4, 64), (1, 8, 16)
ROTATION_SEED = 0  # the target's eigenvectors: one C for all seeds, as in the paper
CHUNK = 1000  # steps a kernel.run call while tracing the study's positions
MLP = {"dataset": "digits", "hidden_sizes": (16,), "prior": "gaussian"}
MLP_STEP = 0.005  # BAOAB on U = n L + prior (n = 1437): stable over the timing's steps
OVERHEAD_WALKERS = (8, 16)
# An independent numpy reproduction (docs/methods/tati.md; slowest direction), and the paper's
# Fig. 10 read off the plot.
REFERENCE = {(4, 1): "30.8", (4, 8): "2.5", (4, 16): "1.6", (64, 1): "305", (64, 8): "131"}
PAPER = {(4, 1): "~30-40", (64, 1): "~400"}


def lambdas(d: int) -> np.ndarray:
    return np.linspace(1.0, 100.0, d)


def gaussian(d: int) -> landscapes.Target:
    """exp(-(1/d) w^T C w): N(0, V diag(d / (2 lambda)) V^T), V = haar_rotation(d, 0)."""
    scales = tuple(math.sqrt(d / (2 * lam)) for lam in lambdas(d))
    return landscapes.make(
        "gaussian", dim=d, scales=scales, rotate=True, seed=ROTATION_SEED, dtype="float64"
    )


def eigenvectors(target: landscapes.Target, d: int) -> np.ndarray:
    """V, column i the direction of lambda_i: the rotation the target drew (checked)."""
    v = haar_rotation(d, ROTATION_SEED)
    scales = torch.tensor([math.sqrt(d / (2 * lam)) for lam in lambdas(d)], dtype=torch.float64)
    assert torch.allclose(target.factor, v * scales, rtol=0, atol=1e-14)
    return v.numpy()


def kernel(name: str, step: float = STEP) -> samplers.Kernel:
    """BAOAB, or EQN with the study's eta and rebuild schedule."""
    extra = {"eta": ETA, "covariance_every": EVERY} if name == "eqn" else {}
    return samplers.make(name, step_size=step, friction=FRICTION, temperature=TEMPERATURE, **extra)


# --------------------------------------------------------------------------- Fig. 10 study


def study_run(d: int, walkers: int, seed: int, steps: int) -> dict:
    """One seed: IAT per walker and direction, and the variance per direction."""
    torch.set_num_threads(1)
    target = gaussian(d)
    v = eigenvectors(target, d)
    eqn = kernel("eqn")
    g = torch.Generator().manual_seed(seed)
    state = eqn.init(target.exact_sample(g, walkers), target, g)
    noise = eqn.noise_for(state, target, g)
    burn = int(BURN * steps)
    modes = np.empty((steps - burn, walkers, d))  # [T, C, d] along the eigenvectors
    tic = time.perf_counter()
    done = 0
    while done < steps:
        n = min(CHUNK, steps - done)
        state, info = eqn.run(state, target, noise, n, positions=True)
        keep = info.position[max(0, burn - done) :].numpy()  # the step-t position is row t
        if len(keep):
            start = max(done, burn) - burn
            modes[start : start + len(keep)] = keep @ v
        done += n
    seconds = time.perf_counter() - tic
    iat = np.stack([diagnostics.iat(modes[:, c][None])[0] for c in range(walkers)])  # [C, d]
    return {
        "d": d,
        "walkers": walkers,
        "seed": seed,
        "iat": iat.mean(0),  # [d]: averaged over walkers
        "var": modes.reshape(-1, d).var(0),
        "draws": modes.shape[0] * walkers,
        "diverged": int(state.diverged.sum()),
        "seconds": seconds,
    }


def study(quick: bool, jobs: int) -> dict:
    steps = QUICK_STEPS if quick else STEPS
    seeds = QUICK_SEEDS if quick else SEEDS
    # biggest first, so that the processes end together
    tasks = sorted(
        ((d, c, s) for d in DIMS for c in WALKERS for s in range(seeds)),
        key=lambda t: -(t[0] * t[1]),
    )
    tic = time.perf_counter()
    if jobs > 1:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=context) as pool:
            futures = [pool.submit(study_run, d, c, s, steps) for d, c, s in tasks]
            runs = [f.result() for f in futures]
    else:
        runs = [study_run(d, c, s, steps) for d, c, s in tasks]
    wall = time.perf_counter() - tic
    cells = {}
    for d in DIMS:
        for c in WALKERS:
            mine = [r for r in runs if (r["d"], r["walkers"]) == (d, c)]  # in seed order
            iat = np.stack([r["iat"] for r in mine])  # [seeds, d]
            var = np.mean([r["var"] for r in mine], axis=0)
            exact = d / (2 * lambdas(d))
            draws = sum(r["draws"] for r in mine)
            dev = var / exact - 1
            # the variance's relative standard error, ~sqrt(2 tau / N) (tau of x^2 <= tau of x)
            se = np.sqrt(2 * iat.mean(0) / draws)
            worst = int(np.argmax(np.abs(dev)))
            cells[d, c] = {
                "mean": iat.mean(0),
                "sd": iat.std(0, ddof=1) if len(mine) > 1 else np.zeros(d),
                "worst_dev": float(dev[worst]),
                "worst_dir": worst,
                "worst_z": float(dev[worst] / se[worst]),
                "median_abs_dev": float(np.median(np.abs(dev))),
                "diverged": sum(r["diverged"] for r in mine),
                "seconds": statistics.median(r["seconds"] for r in mine),
            }
    return {"steps": steps, "seeds": seeds, "jobs": jobs, "wall": wall, "cells": cells}


def study_lines(s: dict) -> list[str]:
    pm = lambda c, i: f"{c['mean'][i]:.3g} +- {c['sd'][i]:.2g}"  # noqa: E731
    lines = [
        f"IAT along the slowest (lambda = 1) and fastest (lambda = 100) eigen-direction, "
        f"mean +- sd over {s['seeds']} seeds of the per-walker IATs' mean; {s['steps']} steps, "
        f"{BURN:.0%} burn-in. Reference: an independent numpy reproduction (docs/methods/tati.md) "
        "(slowest direction), the paper's Fig. 10 read off the plot, and the prediction "
        "2 gamma / (omega^2 eps), omega^2 = 2 lambda / d, for one walker. Variance: the "
        "worst relative deviation over the directions of the variance (pooled over walkers, "
        "mean over seeds) from d / (2 lambda), with its z = deviation / (relative SE "
        "sqrt(2 tau / N)), and the median |deviation|.",
        "",
        "| d | walkers | IAT slowest | reference | IAT fastest | worst variance dev. "
        "(direction, z) | median abs. dev. | diverged | s / run |",
        "|---:|---:|---:|---|---:|---|---:|---:|---:|",
    ]
    for (d, c), cell in s["cells"].items():
        ref = [x for x in (REFERENCE.get((d, c)), PAPER.get((d, c))) if x]
        if c == 1:
            ref.append(f"predicted {2 * FRICTION / (2 / d * STEP):.0f}")
        lines.append(
            f"| {d} | {c} | {pm(cell, 0)} | {', '.join(ref) or '-'} | {pm(cell, d - 1)} | "
            f"{cell['worst_dev']:+.1%} (lambda {lambdas(d)[cell['worst_dir']]:.3g}, z "
            f"{cell['worst_z']:+.1f}) | {cell['median_abs_dev']:.1%} | {cell['diverged']} | "
            f"{cell['seconds']:.1f} |"
        )
    d = max(DIMS)
    few = 8
    lams = lambdas(d)[:few]
    lines += [
        "",
        f"d = {d}, the {few} slowest directions (mean +- sd over seeds):",
        "",
        "| walkers | " + " | ".join(f"lambda {lam:.3g}" for lam in lams) + " |",
        "|---:|" + "---:|" * few,
    ]
    for c in WALKERS:
        cell = s["cells"][d, c]
        lines.append(f"| {c} | " + " | ".join(pm(cell, i) for i in range(few)) + " |")
    lines += ["", f"d = {d}, every direction (lambda ascending), mean over seeds:", ""]
    for c in WALKERS:
        values = " ".join(f"{x:.3g}" for x in s["cells"][d, c]["mean"])
        lines.append(f"- {c} walker{'s' if c > 1 else ''}: {values}")
    return lines


# --------------------------------------------------------------------------- overhead


def overhead(repeats: int, steps: int, threads: int) -> list[dict]:
    """Rows: target, walkers, BAOAB and EQN ms per step (medians), EQN / BAOAB."""
    torch.set_num_threads(threads)
    gauss, mlp = gaussian(64), landscapes.make("mlp", **MLP)
    targets = {  # label: target, step, the walkers' start
        "Gaussian d = 64 (float64)": (gauss, STEP, gauss.exact_sample),
        "digits MLP 64-16-10, d = 1210, full batch n = 1437 (float32)": (
            mlp,
            MLP_STEP,
            mlp.initial,
        ),
    }
    rows = []
    for label, (target, step, draw) in targets.items():
        for walkers in OVERHEAD_WALKERS:
            start = draw(torch.Generator().manual_seed(0), walkers)
            kernels = {name: kernel(name, step) for name in ("baoab", "eqn")}
            runs = {}
            for name, k in kernels.items():  # same chains, same stream
                g = torch.Generator().manual_seed(1)
                state = k.init(start, target, g)
                noise = k.noise_for(state, target, g)
                state, _ = k.run(state, target, noise, 10)  # warm-up; step 0's rebuild
                runs[name] = [state, noise]
            times = {name: [] for name in kernels}
            for _ in range(repeats):  # turns; a window of `steps` = EVERY holds one rebuild
                for name, k in kernels.items():
                    state, noise = runs[name]
                    tic = time.perf_counter()
                    state, _ = k.run(state, target, noise, steps)
                    times[name].append((time.perf_counter() - tic) / steps)
                    runs[name][0] = state
            ratios = [e / b for b, e in zip(times["baoab"], times["eqn"], strict=True)]
            rows.append(
                {
                    "target": label,
                    "walkers": walkers,
                    "baoab_ms": 1e3 * statistics.median(times["baoab"]),
                    "eqn_ms": 1e3 * statistics.median(times["eqn"]),
                    "ratio": statistics.median(ratios),
                    "ratios": ratios,
                    "diverged": {n: int(r[0].diverged.sum()) for n, r in runs.items()},
                }
            )
            print(overhead_line(rows[-1]), flush=True)
    return rows


OVERHEAD_HEADER = [
    "| target | walkers | BAOAB ms/step | EQN ms/step | EQN / BAOAB (median) | repeats' "
    "ratios | goal <= 1.5 | diverged (BAOAB, EQN) |",
    "|---|---:|---:|---:|---:|---|---|---|",
]


def overhead_line(r: dict) -> str:
    return (
        f"| {r['target']} | {r['walkers']} | {r['baoab_ms']:.3f} | {r['eqn_ms']:.3f} | "
        f"{r['ratio']:.2f} | {', '.join(f'{x:.2f}' for x in r['ratios'])} | "
        f"{'met' if r['ratio'] <= 1.5 else 'missed'} | "
        f"{r['diverged']['baoab']}, {r['diverged']['eqn']} |"
    )


def run(repeats: int, quick: bool, jobs: int, threads: int) -> dict:
    tic = time.perf_counter()
    steps = 200 if quick else EVERY
    print(f"Overhead: {steps} steps a measurement, median of {repeats} turns, {threads} thread(s)")
    print("\n".join(OVERHEAD_HEADER), flush=True)
    rows = overhead(repeats, steps, threads)
    timing = time.perf_counter() - tic
    print(f"(timing part: {timing:.0f} s)\n", flush=True)
    s = study(quick, jobs)
    lines = study_lines(s)
    print("\n".join(lines))
    total = time.perf_counter() - tic
    print(f"\n(study: {s['wall']:.0f} s in {jobs} process(es); whole bench: {total:.0f} s)")
    return {
        "overhead": rows,
        "overhead_steps": steps,
        "study": s,
        "study_lines": lines,
        "timing_s": timing,
        "total_s": total,
    }
