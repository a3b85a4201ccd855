"""``python -m bench gpu``: Basin's GPU path, one prepared script (about 5 minutes on one GPU).

On a CUDA machine it measures, each beside the same work on this machine's CPU:

(a) the engine benchmark's banana cases (bench/cases.py: SGLD, MALA, HMC) at 64 ... 65,536
    chains: chain-steps per second (compiled chunks, as runs step);
(b) the DLN LLC at the 10K class (widths 50 x 5: d = 10,000) and the 100K class (Hitchcock &
    Hoogland's generator, their App. D.1 and Table 1; seed 0): an LLC run's SGLD chains (batch 500,
    paired with w0's batch loss), its steps per second and lambda_hat against the true LLC;
(c) a 41 x 41 loss surface of the digits MLP (d = 2410) on two filter-normalised directions;
(d) the law of a short run's draws: MALA on the banana from its exact sampler's draws (a
    stationary start), 4096 chains x 200 steps on each device; the last draws' KS distance to
    fresh exact draws on each coordinate, on each device, and between the devices. Same
    kernel, same law: every KS distance within its 0.1% bound.

It prints one table and appends it to bench/RESULTS.md with the device's name. Without CUDA it
says so and measures nothing (``--device cpu --quick`` runs the script's every step on the CPU
alone, small, to check it works; nothing is recorded then).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

import landscapes
import samplers
from samplers import llc

from .engine import BasinCase

ENGINE_CASES = ("banana-sgld", "banana-mala", "banana-hmc")
ENGINE_CHAINS = (64, 1024, 16_384, 65_536)
DLN_CLASSES = {"10K": {"widths": (50, 50, 50, 50, 50)}, "100K": {"size_class": "100K"}}
LLC_CHAINS, LLC_STEPS = 16, 2000
SURFACE_GRID = 41
KS_CHAINS, KS_STEPS = 4096, 200


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, work: Callable, *args, **kwargs) -> tuple[float, object]:
    """Seconds of ``work(*args, **kwargs)``, the device's queued work included, and its value."""
    _sync(device)
    start = time.perf_counter()
    out = work(*args, **kwargs)
    _sync(device)
    return time.perf_counter() - start, out


def engine_rows(devices: list[str], quick: bool) -> list[dict]:
    steps = 64 if quick else 256
    counts = (64, 1024) if quick else ENGINE_CHAINS
    rows = []
    for name in ENGINE_CASES:
        for chains in counts:
            row = {"part": "engine", "case": f"{name}, {chains} chains", "unit": "chain-steps/s"}
            for device in devices:
                case = BasinCase(name, chains, device)
                case.seconds(steps)  # compiles, warms up
                row[device] = chains * steps / min(case.seconds(steps) for _ in range(3))
            rows.append(row)
    return rows


def llc_rows(devices: list[str], quick: bool) -> list[dict]:
    rows = []
    for label, params in DLN_CLASSES.items():
        n = 20_000 if quick else 100_000
        row = {"part": "DLN LLC", "unit": "steps/s", "notes": []}
        for device in devices:
            target = landscapes.make("dln", n=n, seed=0, device=device, dtype="float32", **params)
            kernel = samplers.make("sgld", step_size=1e-7, batch_size=500, localization=1.0)
            # the CPU takes minutes on the 100K class: its rate from fewer steps
            steps = 100 if quick or (device == "cpu" and len(devices) > 1) else LLC_STEPS
            g = torch.Generator(device=target.device).manual_seed(0)
            paired = llc.Paired(kernel, target, target.w0)
            state = paired.init(target.w0.expand(LLC_CHAINS, -1).clone(), target, g)
            paired.run(state, target, g, 20, compiled=True)  # compiles, warms up
            seconds, (_, info) = timed(
                target.device, paired.run, state, target, g, steps, compiled=True
            )
            excess = (info.loss - info.scalars["center_loss"]).cpu().numpy()
            est = llc.estimate(excess[steps // 5 :], 0.0, kernel.nbeta_for(target))
            row[device] = steps / seconds
            row["case"] = f"{label} class, d = {target.dim:,}, {LLC_CHAINS} chains, batch 500"
            row["notes"].append(
                f"{device}: lambda_hat {est.mean:.3g} +- {est.se:.2g} over {steps} steps "
                f"(true {target.true_llc[0]:g})"
            )
        row["notes"] = "; ".join(row["notes"])
        rows.append(row)
    return rows


def surface_rows(devices: list[str], quick: bool) -> list[dict]:
    from landscapes.surface import grid_losses, random_directions

    grid = 11 if quick else SURFACE_GRID
    row = {"part": "surface", "case": f"digits MLP, {grid} x {grid}, d = 2410", "unit": "s"}
    losses = {}
    for device in devices:
        target = landscapes.make("mlp", hidden_sizes=(32,), device=device, dtype="float32")
        theta = target.initial(torch.Generator(device=target.device).manual_seed(0), 1)[0]
        theta = theta.cpu().numpy()
        vectors = random_directions(target, theta, seed=0).vectors
        c = np.linspace(-1, 1, grid)
        grid_losses(target, theta, vectors, c[:2], c[:2])  # warms up
        seconds, out = timed(target.device, grid_losses, target, theta, vectors, c, c)
        row[device], losses[device] = seconds, out
    if len(losses) == 2:
        a, b = losses.values()
        row["notes"] = f"largest relative difference between devices {np.max(abs(a - b) / b):.1e}"
    return [row]


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov distance."""
    values = np.sort(np.concatenate([a, b]))
    fa = np.searchsorted(np.sort(a), values, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), values, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


def ks_bound(n: int, m: int, alpha: float = 1e-3) -> float:
    """The two-sample KS distance exceeded with probability ``alpha`` under one law."""
    return math.sqrt(-0.5 * math.log(alpha / 2)) * math.sqrt((n + m) / (n * m))


def law_rows(devices: list[str], quick: bool) -> list[dict]:
    chains = 1024 if quick else KS_CHAINS
    draws = {}
    for k, device in enumerate(devices):
        target = landscapes.make("banana", device=device, dtype="float32")
        g = torch.Generator(device=target.device).manual_seed(1 + k)
        kernel = samplers.make("mala", step_size=0.05)
        state = kernel.init(target.exact_sample(g, chains), target, g)
        state, _ = kernel.run(state, target, g, KS_STEPS, compiled=True)
        exact = target.exact_sample(g, chains).cpu().numpy()
        draws[device] = (state.position.cpu().numpy(), exact)
    bound = ks_bound(chains, chains)
    rows = []
    for j in range(2):
        row = {"part": "law", "case": f"banana MALA x{j}, KS to exact", "unit": "KS"}
        for device, (last, exact) in draws.items():
            row[device] = ks_distance(last[:, j], exact[:, j])
        if len(draws) == 2:
            (a, _), (b, _) = draws.values()
            row["notes"] = f"between devices {ks_distance(a[:, j], b[:, j]):.3f}"
        row["notes"] = (row.get("notes", "") + f"; bound (0.1%) {bound:.3f}").lstrip("; ")
        row["pass"] = all(row[d] <= bound for d in draws) and (
            len(draws) < 2 or ks_distance(*(v[0][:, j] for v in draws.values())) <= bound
        )
        rows.append(row)
    return rows


PARTS = {"engine": engine_rows, "llc": llc_rows, "surface": surface_rows, "law": law_rows}


def run(devices: list[str], quick: bool) -> list[dict]:
    """Every part on every device; a part that fails is a row saying how, not the end."""
    rows = []
    for name, part in PARTS.items():
        started = time.perf_counter()
        try:
            rows += part(devices, quick)
        except Exception as exc:  # a device's failure is a result: reported, the rest goes on
            rows.append({"part": name, "case": "failed", "notes": f"{type(exc).__name__}: {exc}"})
        print(f"{name}: {time.perf_counter() - started:.1f} s", flush=True)
    return rows


def table(rows: list[dict], devices: list[str]) -> list[str]:
    head = ["part", "case", "unit", *devices]
    ratio = len(devices) == 2
    lines = [
        "| " + " | ".join(head + (["cuda / cpu"] if ratio else []) + ["notes"]) + " |",
        "|" + "---|" * (len(head) + ratio + 1),
    ]
    for r in rows:
        values = [f"{r[d]:.4g}" if isinstance(r.get(d), float) else "-" for d in devices]
        cells = [r["part"], r["case"], r.get("unit", "-"), *values]
        if ratio:
            a, b = r.get(devices[0]), r.get(devices[1])
            speed = isinstance(a, float) and isinstance(b, float) and r.get("unit") != "KS"
            faster = (b / a if r["unit"] == "s" else a / b) if speed and a and b else None
            cells.append("-" if faster is None else f"{faster:.3g}x")
        note = r.get("notes", "")
        if "pass" in r:
            note = ("pass: " if r["pass"] else "FAIL: ") + note
        lines.append("| " + " | ".join([*cells, note]) + " |")
    return lines
