"""``python -m bench llc``: Basin's LLC estimate against devinterp 1.3.2 on the same tasks.

(a) devinterp's own normal-crossing test: y = x w1 w2^2 (powers [1, 2], true LLC 0.25),
    x ~ N(0, 2^2), y = 0.25 N(0, 1), n = 1000, full batch, SGLD lr 4e-4, nbeta = n / log n,
    no localization, 10 chains x 5000 draws from w = 0.
(b) a small DLN, widths 5,4,3,4 with a rank-2 product (true LLC 8), n = 10000, batch 500, SGLD
    lr 1e-6, localization 1, 4 chains x 5000 steps from the generating point; both sides get the
    same weights and data (written to .npz for the peer).
(m) "module": a user's nn.Module, the digits MLP of examples/digits_mlp.py (64-128-10, 9,610
    parameters, cross-entropy, n = 1437), trained by examples.train_digits.train for
    MODULE_TRAIN_STEPS SGD steps into a temporary directory; both sides load that state dict
    (Basin: ``landscapes.make("model", factory="examples.digits_mlp:make", checkpoint=...)`` in
    float32; devinterp: the same architecture in plain torch, data from .npz). SGLD lr
    MODULE_STEP, localization 1, nbeta = n / log n passed to both, batch 128, 4 chains x 2000
    draws, no burn-in. devinterp's own baseline is 4 minibatches of 128: compare Basin with its
    ``llc_mean_full_init``.
(c) per-step cost on a 100K-class DLN (one chain, batch 500): Basin's SGLD step against a bare
    forward + backward pass of the same batch in plain torch, the floor for a gradient sampler.

Basin's time is the whole estimate in this process: build the target, run the chains (wrapped
in ``llc.Paired`` as an LLC run is), average; eagerly, and with ``compiled=True`` (whole noise
blocks as compiled chunks). "cold" is each path's first call in a fresh process (the target's
build and, compiled, the compile: inductor's disk cache makes it shorter after the first ever
run), "warm" is the median of later repeats, which reuse the target and kernel as a warm
worker does (``runs.build.build``) and wrap it anew as its LLC runs do.
devinterp's is the call of its estimator (bench/peer_devinterp.py): once per case where a run
takes minutes (repeats would outlast the machine's patience), else (the module case) once more in
each repeat, taking turns with Basin's paths so the machine's noise hits both alike; its time is
then the median of its runs.
"""

from __future__ import annotations

import json
import math
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
from samplers.compiled import compile_problem

BENCH = Path(__file__).resolve().parent
PEER_PYTHON = BENCH / ".devinterp-venv" / "bin" / "python"
SEEDS = 10  # Basin's normal-crossing estimate again with these many other seeds (same data)
CASES = ("normal-crossing", "dln", "module", "step-cost")
MODULE_TRAIN_STEPS = 1000  # examples.train_digits.train: SGD + momentum, batches of 64, seed 0
MODULE_STEP = 1e-5  # SGLD step size of the module case, both sides
MODULE_DRAWS = 2000


PATHS = ("eager", "compiled")
PEER_TURNS_S = 30.0  # a peer run quicker than this takes a turn in every repeat


def basin_estimate(target, kernel, chains: int, steps: int, seed: int, compiled: bool) -> dict:
    """One LLC estimate from the target's w0, its chains run by ``kernel``."""
    g = torch.Generator().manual_seed(seed)
    paired = llc.Paired(kernel, target, target.w0)  # as an LLC run: batch losses paired with w0's
    state = paired.init(target.w0.expand(chains, -1).clone(), target, g)
    _, info = paired.run(state, target, g, steps, compiled=compiled)
    if "center_loss" in info.scalars:  # minibatches: L_b(w_t) - L_b(w0) has the excess's mean
        excess, baseline = info.loss - info.scalars["center_loss"], 0.0
    else:
        excess, baseline = info.loss, float(target.full_loss(target.w0[None])[0])
    est = llc.estimate(excess.numpy(), baseline, kernel.nbeta_for(target))
    # compiled=True steps eagerly where nothing compiles: say which ran
    ran = compiled and compile_problem(target.device.type) is None
    return {**est.as_dict(), "compiled": ran}


def estimator(make, sampler: str, chains: int, steps: int, **params):
    """``go(seed, compiled) -> (seconds, estimate)``: each path builds its own target and kernel
    on its first call (timed) and reuses them after; the ``llc.Paired`` wrap is new for every
    estimate, as ``runs.loop.execute`` makes one for every LLC run."""
    built: dict[bool, tuple] = {}

    def go(seed: int = 0, compiled: bool = False) -> tuple[float, dict]:
        start = time.perf_counter()
        if compiled not in built:
            built[compiled] = make(), samplers.make(sampler, **params)
        target, kernel = built[compiled]
        est = basin_estimate(target, kernel, chains, steps, seed, compiled)
        return time.perf_counter() - start, est

    return go


def normal_crossing(chains: int, steps: int):
    def make():
        return landscapes.make(
            "polynomial", powers=(1, 2), x_std=2.0, noise_std=0.25, n=1000, seed=42, device="cpu"
        )

    go = estimator(make, "sgld", chains, steps, step_size=4e-4, localization=0.0)
    return go, ["normal-crossing", "--chains", str(chains), "--draws", str(steps)], 0.25


def small_dln(chains: int, steps: int, workdir: Path):
    def make():
        return landscapes.make("dln", widths=(5, 4, 3, 4), rank=2, n=10_000, seed=0, device="cpu")

    target = make()
    layers = target.unflatten(target.w0[None])
    np.savez(workdir / "w0.npz", **{k: v[0].numpy() for k, v in layers.items()})
    np.savez(workdir / "data.npz", x=target.x.numpy(), y=target.y.numpy())
    params = {"step_size": 1e-6, "batch_size": 500, "localization": 1.0}
    go = estimator(make, "sgld", chains, steps, **params)
    peer = ["dln", "--chains", str(chains), "--draws", str(steps), "--lr", "1e-6"]
    peer += ["--w0-file", str(workdir / "w0.npz"), "--data-file", str(workdir / "data.npz")]
    return go, peer, target.true_llc[0]


def digits_module(chains: int, steps: int, workdir: Path):
    """The digits MLP as a user's model at a trained w0 (module doc, case m)."""
    import contextlib
    import io

    from examples.digits_mlp import data
    from examples.train_digits import train

    with contextlib.redirect_stdout(io.StringIO()):  # its progress lines are not the bench's
        checkpoint = train(workdir / "digits", MODULE_TRAIN_STEPS, seed=0)[-1]
    x, y = data()
    np.savez(workdir / "digits.npz", x=x.numpy(), y=y.numpy())
    n = len(x)

    def make():
        return landscapes.make(
            "model",
            factory="examples.digits_mlp:make",
            checkpoint=str(checkpoint),
            device="cpu",
            dtype="float32",
        )

    nbeta = n / math.log(n)
    params = {"step_size": MODULE_STEP, "batch_size": 128, "localization": 1.0, "nbeta": nbeta}
    go = estimator(make, "sgld", chains, steps, **params)
    peer = ["module", "--chains", str(chains), "--draws", str(steps), "--lr", str(MODULE_STEP)]
    peer += ["--batch-size", "128", "--weights-file", str(checkpoint)]
    peer += ["--data-file", str(workdir / "digits.npz")]
    return go, peer, None


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


def step_cost(repeats: int, blocks: int = 2) -> dict:
    """Seconds per step: Basin's SGLD (eager and compiled) and a bare forward + backward.

    Each timing runs ``blocks`` whole noise blocks (fewer steps than 256 each here: a block's
    noise is capped at 32 MiB), so the compiled side runs compiled chunks only, as a long
    run's steps do."""
    target = landscapes.make("dln", size_class="100K", n=2000, seed=0, device="cpu")
    g = torch.Generator().manual_seed(0)
    params = {"step_size": 1e-8, "batch_size": 500, "localization": 1.0}
    kernel = samplers.make("sgld", **params)
    start = kernel.init(target.w0[None].clone(), target, g)
    steps = blocks * kernel.noise_for(start, target, g).length
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
    # (``llc.Paired``): the mean of the batch's entries in L_i(w0), computed once.
    paired = llc.Paired(samplers.make("sgld", **params), target, target.w0)

    def basin(compiled: bool, kernel=kernel):
        state = kernel.init(target.w0[None].clone(), target, g)
        noise = kernel.noise_for(state, target, g)  # one stream: every call runs whole blocks

        def go() -> None:
            nonlocal state
            state, _ = kernel.run(state, target, noise, steps, compiled=compiled)

        return go

    cases = {"bare": bare, "eager": basin(False), "compiled": basin(True)}
    cases["compiled_paired"] = basin(True, paired)
    for go in cases.values():
        go()  # warm-up (and compile)
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for name, go in cases.items():  # alternating: the machine's noise hits all alike
            start = time.perf_counter()
            go()
            times[name].append((time.perf_counter() - start) / steps)
    out = {k: statistics.median(v) for k, v in times.items()}
    out["dim"] = target.dim
    out["steps"] = steps
    out["widths"] = list(target.widths)
    return out


def run(repeats: int, quick: bool, cases: tuple[str, ...] = CASES, module_chains: int = 4) -> dict:
    steps = 500 if quick else 5000
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        makers = {
            "normal-crossing": lambda: normal_crossing(10, steps),
            "dln": lambda: small_dln(4, steps, Path(tmp)),
            "module": lambda: digits_module(
                module_chains, 500 if quick else MODULE_DRAWS, Path(tmp)
            ),
        }
        for name, build in makers.items():
            if name not in cases:
                continue
            go, peer_args, true = build()
            r = {"true": true, "basin": {}, "basin_cold_s": {}, "basin_warm_s": {}}
            for path in PATHS:
                r["basin_cold_s"][path], r["basin"][path] = go(compiled=path == "compiled")
                r["basin_warm_s"][path] = []
            r["devinterp"] = peer(peer_args)
            r["devinterp_s"] = [r["devinterp"]["seconds"]] if r["devinterp"] else []
            turns = bool(r["devinterp_s"]) and r["devinterp_s"][0] < PEER_TURNS_S
            for _ in range(repeats):  # the paths taking turns: the machine's noise hits all
                for path in PATHS:
                    r["basin_warm_s"][path].append(go(compiled=path == "compiled")[0])
                if turns:
                    r["devinterp_s"].append(peer(peer_args)["seconds"])
            if name == "normal-crossing":  # one estimate's error is mostly its own noise
                r["seeds"] = [go(seed, True)[1]["mean"] for seed in range(1, SEEDS + 1)]
            results[name] = r
            print(json.dumps({name: r}), flush=True)
    if "step-cost" in cases:
        results["step_cost"] = step_cost(repeats)
        print(json.dumps({"step_cost": results["step_cost"]}), flush=True)
    return results
