"""``python -m bench llc``: Basin's LLC estimate against devinterp 1.3.2 on the same tasks.

(a) devinterp's own normal-crossing test: y = x w1 w2^2 (powers [1, 2], true LLC 0.25),
    x ~ N(0, 2^2), y = 0.25 N(0, 1), n = 1000, full batch, SGLD lr 4e-4, nbeta = n / log n,
    no localization, 10 chains x 5000 draws from w = 0.
(b) a small DLN, widths 5,4,3,4 with a rank-2 product (true LLC 8), n = 10000, batch 500, SGLD
    lr 1e-6, localization 1, 4 chains x 5000 steps from the generating point; both sides get the
    same weights and data (written to .npz for the peer).
(c) per-step cost on a 100K-class DLN (one chain, batch 500): Basin's SGLD step against a bare
    forward + backward pass of the same batch in plain torch, the floor for a gradient sampler.

Basin's time is the whole estimate in this process: build the target, run the chains, average.
The chains run as compiled chunks where a run of the same spec would (``worth_compiling``: when
the compile pays for itself within the run), else eagerly; "cold" is the first call in a fresh
process (with the compile, if any; inductor's disk cache makes it shorter after the first ever
run), "warm" is the median of later repeats.
devinterp's is the one call of its estimator (bench/peer_devinterp.py), run once per case: at
~5 minutes a run, repeats would take longer than the machine's patience.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import landscapes
import samplers
from samplers import llc
from samplers.fused import compiled_entry, worth_compiling

BENCH = Path(__file__).resolve().parent
PEER_PYTHON = BENCH / ".devinterp-venv" / "bin" / "python"
SEEDS = 10  # Basin's normal-crossing estimate again with these many other seeds (same data)


def basin_estimate(
    target, sampler: str, chains: int, steps: int, seed: int = 0, **params
) -> tuple[float, dict]:
    """(seconds, estimate) of one LLC estimate from the target's w0, end to end."""
    start = time.perf_counter()
    g = torch.Generator().manual_seed(seed)
    kernel = samplers.make(sampler, **params)
    kernel.paired = True  # as an LLC run does: batch losses paired with w0's on the same batch
    w0 = target.w0.expand(chains, -1).clone()
    state = kernel.init(w0, target, g)
    fused = worth_compiling(kernel, state, target, steps)  # as a run of this spec decides
    _, info = kernel.run(state, target, g, steps, fused=fused)
    if "center_loss" in info.scalars:  # minibatches: L_b(w_t) - L_b(w0) has the excess's mean
        excess, baseline = info.loss - info.scalars["center_loss"], 0.0
    else:
        excess, baseline = info.loss, float(target.full_loss(target.w0[None])[0])
    est = llc.estimate(excess.numpy(), baseline, kernel.nbeta_for(target))
    return time.perf_counter() - start, {**est.as_dict(), "compiled": fused}


def normal_crossing(chains: int, steps: int):
    def make():
        return landscapes.make(
            "polynomial", powers=(1, 2), x_std=2.0, noise_std=0.25, n=1000, seed=42, device="cpu"
        )

    def run(seed: int = 0):
        return basin_estimate(make(), "sgld", chains, steps, seed, step_size=4e-4, localization=0.0)

    return run, ["normal-crossing", "--chains", str(chains), "--draws", str(steps)], 0.25


def small_dln(chains: int, steps: int, workdir: Path):
    def make():
        return landscapes.make("dln", widths=(5, 4, 3, 4), rank=2, n=10_000, seed=0, device="cpu")

    target = make()
    layers = target.unflatten(target.w0[None])
    np.savez(workdir / "w0.npz", **{k: v[0].numpy() for k, v in layers.items()})
    np.savez(workdir / "data.npz", x=target.x.numpy(), y=target.y.numpy())

    def run():
        return basin_estimate(
            make(), "sgld", chains, steps, step_size=1e-6, batch_size=500, localization=1.0
        )

    peer = ["dln", "--chains", str(chains), "--draws", str(steps), "--lr", "1e-6"]
    peer += ["--w0-file", str(workdir / "w0.npz"), "--data-file", str(workdir / "data.npz")]
    return run, peer, target.true_llc[0]


def peer(args: list[str]) -> dict | None:
    if not PEER_PYTHON.exists():
        return None
    out = subprocess.run(
        [str(PEER_PYTHON), "-m", "bench.peer_devinterp", *args],
        cwd=BENCH.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def step_cost(repeats: int, chunks: int = 2) -> dict:
    """Seconds per step: Basin's SGLD (eager and compiled) and a bare forward + backward.

    Each timing runs ``chunks`` whole compiled chunks (13 steps each here: their noise is
    capped at 32 MiB): a run's per-step cost. A call of fewer steps pads its last chunk with
    no-op steps that still cost a forward and backward each, which a long run pays once."""
    target = landscapes.make("dln", size_class="100K", n=2000, seed=0, device="cpu")
    g = torch.Generator().manual_seed(0)
    kernel = samplers.make("sgld", step_size=1e-8, batch_size=500, localization=1.0)
    state = kernel.init(target.w0[None].clone(), target, g)
    state, _ = kernel.run(state, target, g, 2, fused=True)  # compiles; learns the chunk
    steps = chunks * compiled_entry(kernel, target, state).length()
    layers = [w[0].clone().requires_grad_(True) for w in target.unflatten(target.w0[None]).values()]

    def bare() -> None:
        for _ in range(steps):
            index = torch.randint(target.n, (500,), generator=g)
            h, y = target.x[index], target.y[index]
            for w in layers:
                h = h @ w.T
            ((h - y) ** 2).sum(-1).mean().backward()
            for w in layers:
                w.grad = None

    # An LLC run with the full-data baseline also reports w0's loss on each step's batch
    # (``Kernel.paired``): the mean of the batch's entries in L_i(w0), computed at init.
    paired = samplers.make("sgld", step_size=1e-8, batch_size=500, localization=1.0)
    paired.paired = True

    def basin(fused: bool, kernel=kernel):
        state = kernel.init(target.w0[None].clone(), target, g)  # the paired one: with L_i(w0)

        def go() -> None:
            nonlocal state
            state, _ = kernel.run(state, target, g, steps, fused=fused)

        return go

    cases = {"bare": bare, "eager": basin(False), "compiled": basin(True)}
    cases["compiled_paired"] = basin(True, paired)
    for go in cases.values():
        go()  # warm-up (and compile)
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for name, go in cases.items():  # alternating: the same noise for all
            start = time.perf_counter()
            go()
            times[name].append((time.perf_counter() - start) / steps)
    out = {k: statistics.median(v) for k, v in times.items()}
    out["dim"] = target.dim
    out["steps"] = steps
    out["widths"] = list(target.widths)
    return out


def run(repeats: int, quick: bool) -> dict:
    steps = 500 if quick else 5000
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (go, peer_args, true) in {
            "normal-crossing": normal_crossing(10, steps),
            "dln": small_dln(4, steps, Path(tmp)),
        }.items():
            cold, est = go()
            warm = [go()[0] for _ in range(repeats)]
            other = peer(peer_args)
            results[name] = {"true": true, "basin_cold_s": cold, "basin_warm_s": warm, "basin": est}
            results[name]["devinterp"] = other
            if name == "normal-crossing":  # one estimate's error is mostly its own noise
                results[name]["seeds"] = [go(seed)[1]["mean"] for seed in range(1, SEEDS + 1)]
            print(json.dumps({name: results[name]}), flush=True)
    results["step_cost"] = step_cost(repeats)
    print(json.dumps({"step_cost": results["step_cost"]}), flush=True)
    return results
