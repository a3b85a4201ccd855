"""``python -m bench warmup``: Basin's ``step_size: auto`` (samplers/warmup.py) against
BlackJAX's ``window_adaptation`` (issue 59, section 1).

The target: the 10-D Gaussian ``landscapes.make("gaussian", dim=10, scales=10, condition=100,
rotate=..., seed=59)``, standard deviations log-spaced from 10 down to 1 (a covariance of
condition number 100), axis-aligned ("unrotated") and turned by a fixed Haar rotation
("rotated"). bench/peer_warmup.py rebuilds its precision matrix from the same standard
deviations and rotation, with the same formula (tests/test_bench_warmup.py checks that).

Per case, kernel and repeat, both sides start the same C chains at the same points, uniform on
[-2, 2]^10 (Stan's default start), adapt for W steps and then take D draws:
- Basin: ``nuts`` (or ``hmc`` with a fixed number of leapfrog steps, no jitter) with
  ``step_size: auto``, one pooled step and metric for all chains; the adapted values from
  ``kernel.adaptation(state)``.
- BlackJAX: ``window_adaptation`` vmapped over the chains: each chain adapts alone, then draws
  with its own step and inverse mass matrix. Its step is the median over chains.
Gradient evaluations: one per leapfrog step of a chain. HMC takes L a draw on both sides. For
NUTS, BlackJAX reports ``info.num_integration_steps`` (summed); Basin has no counter, so
``CountingNUTS`` adds up each chain's leapfrog steps as the trees grow: in lockstep (the
warm-up) the subtree's ``steps``, in the forest (the draws) the chains that run at each leaf.
Both count the step that ends a tree (a U-turn or a divergence), and neither counts the rows a
finished chain computes while the others go on (both sides batch the chains and mask them).
ESS: the bulk ESS of each coordinate (``samplers.diagnostics.ess_bulk``, all chains) of both
sides' draws, by the same function here; its minimum over coordinates, per gradient
evaluation of all chains' draws.

Basin pools its warm-up over the chains by default and BlackJAX adapts each chain alone, so
Basin also runs each repeat with ``adapt: chain`` (each chain adapts alone, all chains in one
batched run; ``--skip-per-chain`` leaves it out): like for like with BlackJAX, and, beside the
pooled run, what the pooling changes.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
import torch

import landscapes
from samplers import REGISTRY, diagnostics
from samplers import nuts as nuts_module
from samplers.forest import Forest
from samplers.nuts import NUTS

BENCH = Path(__file__).resolve().parent
PEER_PYTHON = BENCH / ".peer-venv" / "bin" / "python"
DIM, LARGEST, CONDITION, ROTATION_SEED = 10, 10.0, 100.0, 59
CASES = ("unrotated", "rotated")
HMC_STEPS = 20  # samplers/hmc.py's default leapfrog_steps, here fixed (jitter off) on both sides
START = 2.0  # chains start uniform on [-START, START]^d, Stan's default
SEED = 0  # repeat r: seed SEED + r for the starts, Basin's generator and BlackJAX's key
# the goals (issue 59): step within 25% of BlackJAX's, the unrotated diagonal metric within
# 10% of the true variances, the ESS per gradient evaluation at least 70% of BlackJAX's
STEP_GOAL, MASS_GOAL, ESS_GOAL = 0.25, 0.10, 0.70


def target(case: str):
    """The case's Gaussian, float64."""
    return landscapes.make(
        "gaussian",
        dim=DIM,
        scales=(LARGEST,),
        condition=CONDITION,
        rotate=case == "rotated",
        seed=ROTATION_SEED,
        dtype="float64",
    )


def stds_rotation(gaussian) -> tuple[list[float], list[list[float]]]:
    """The standard deviations s and rotation R of ``gaussian`` (its factor is R diag(s))."""
    s = gaussian.factor.norm(dim=0)
    return s.tolist(), (gaussian.factor / s).tolist()


class CountingForest(Forest):
    """The forest of ``CountingNUTS``: adds the chains that take a leapfrog step at each leaf."""

    def _leaf(self) -> None:
        self.kernel.grads += self.running
        super()._leaf()


class CountingNUTS(NUTS):
    """NUTS that counts each chain's leapfrog steps (gradient evaluations) in ``grads`` ([C])."""

    grads: torch.Tensor | int = 0

    def _subtree(self, *args, **kwargs):
        sub = super()._subtree(*args, **kwargs)
        self.grads = self.grads + sub["steps"]  # per chain: the steps of the still-live chains
        return sub

    def eager(self, state, target, noise, positions=False, trace=False):
        with mock.patch.object(nuts_module, "Forest", CountingForest):
            return super().eager(state, target, noise, positions, trace)


def kernel(name: str, warmup: int, adapt: str = "pooled"):
    params = {"step_size": "auto", "warmup": warmup, "adapt": adapt}
    if name == "hmc":
        params |= {"leapfrog_steps": HMC_STEPS, "jitter": False}
    params = REGISTRY[name].validate(params)
    return CountingNUTS(**params) if name == "nuts" else REGISTRY[name].build(**params)


def starts(repeats: int, chains: int) -> list[np.ndarray]:
    return [
        np.random.default_rng(SEED + r).uniform(-START, START, (chains, DIM))
        for r in range(repeats)
    ]


def basin(
    case: str, name: str, x0: np.ndarray, seed: int, warmup: int, draws: int, adapt="pooled"
) -> dict:
    """One repeat of Basin's side: the adapted step and metric (``adapt: chain``: each
    chain's, [C] and [C, d]), the draws and their gradients (``draws`` 0: the warm-up only)."""
    t = target(case)
    k = kernel(name, warmup, adapt)
    g = torch.Generator().manual_seed(seed)
    state = k.init(torch.as_tensor(x0, dtype=torch.float64), t, g)
    noise = k.noise_for(state, t, g)
    chains = x0.shape[0]
    k.grads = 0
    state, _ = k.run(state, t, noise, warmup)
    warm = k.grads if name == "nuts" else chains * warmup * HMC_STEPS
    adapted = k.adaptation(state)
    out = {"step": adapted["step_size"], "inv_mass": np.asarray(adapted["inverse_mass"])}
    if adapt == "chain":
        out = {"step": state.log_step.exp().numpy(), "inv_mass": state.inv_mass.numpy()}
    if not draws:
        return out
    k.grads = 0
    state, info = k.run(state, t, noise, draws, positions=True)
    grads = k.grads if name == "nuts" else chains * draws * HMC_STEPS
    return {
        **out,
        "draws": info.position.transpose(0, 1).numpy(),
        "grads": float(torch.as_tensor(grads).sum()),
        "warmup_grads": float(torch.as_tensor(warm).sum()),
        "divergent": int(info.diverged[-1].sum()),
        "accept": float(info.accepted.mean()),
    }


def peer(x0s: list[np.ndarray], kernels: tuple[str, ...], warmup: int, draws: int):
    """BlackJAX's side, all cases, kernels and repeats in one process: (results, versions)."""
    cases = {}
    for case in CASES:
        s, rot = stds_rotation(target(case))
        cases[case] = {"stds": s, "rotation": rot}
    extra = {"nuts": {}, "hmc": {"num_integration_steps": HMC_STEPS}}
    request = {
        "cases": cases,
        "kernels": {k: extra[k] for k in kernels},
        "starts": [x.tolist() for x in x0s],
        "seeds": [SEED + r for r in range(len(x0s))],
        "warmup": warmup,
        "draws": draws,
    }
    with tempfile.TemporaryDirectory() as tmp:
        path, out = Path(tmp) / "request.json", Path(tmp) / "out.npz"
        path.write_text(json.dumps(request))
        cmd = [str(PEER_PYTHON), "-m", "bench.peer_warmup", str(path), str(out)]
        done = subprocess.run(cmd, cwd=BENCH.parent, stdout=subprocess.PIPE, text=True)
        if done.returncode:
            raise RuntimeError(f"the BlackJAX peer exited (code {done.returncode})")
        with np.load(out) as z:
            arrays = {k: z[k] for k in z.files}
    results = {}
    for key in {k.rsplit("/", 1)[0] for k in arrays}:
        case, kernel_name, repeat = key.split("/")
        r = {f: arrays[f"{key}/{f}"] for f in ("draws", "step", "inv_mass", "grads")}
        results[case, kernel_name, int(repeat)] = {
            **r,
            "warmup_grads": float(arrays[f"{key}/warmup_grads"].sum()),
            "divergent": int(arrays[f"{key}/divergent"].sum()),
            "accept": float(arrays[f"{key}/accept"].mean()),
        }
    return results, json.loads(done.stdout.strip().splitlines()[-1])


def adaptation(r: dict, variances: np.ndarray) -> dict:
    """The step (median over chains where each chain has its own) and the metric's largest
    relative error (each chain's, median over chains)."""
    error = np.abs(np.asarray(r["inv_mass"]) / variances - 1).max(-1)
    return {"step": float(np.median(r["step"])), "mass_error": float(np.median(error))}


def efficiency(r: dict) -> dict:
    """Gradient evaluations per draw, the minimum bulk ESS over coordinates and that per
    gradient evaluation of all chains' draws."""
    ess = diagnostics.ess_bulk(r["draws"])
    grads = float(np.sum(r["grads"]))
    chains, draws = r["draws"].shape[:2]
    return {
        "grads_per_draw": grads / (chains * draws),
        "min_ess": float(ess.min()),
        "ess_per_grad": float(ess.min()) / grads,
    }


def run(
    chains: int, warmup: int, draws: int, repeats: int, kernels: tuple[str, ...], per_chain: bool
) -> dict:
    """Both sides, every case, kernel and repeat (and Basin's with ``adapt: chain`` where
    ``per_chain``); returns the tables' lines, the notes and the goals' lines."""
    # One thread: the [64, 10] arithmetic gains nothing from more, and on a busy 2-core
    # machine torch's second thread made each small matmul wait milliseconds for the other
    # (the rotated case's draws: 104 s with 2 threads, 7 s with 1).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    x0s = starts(repeats, chains)
    results, seconds = {}, {}
    start = time.perf_counter()
    try:
        for case in CASES:
            for name in kernels:
                for r, x0 in enumerate(x0s):
                    seed = SEED + r
                    results["basin", case, name, r] = basin(case, name, x0, seed, warmup, draws)
                    if per_chain:
                        one = basin(case, name, x0, seed, warmup, draws, adapt="chain")
                        results["alone", case, name, r] = one
                    print(f"Basin {case}/{name}/{r} done", file=sys.stderr, flush=True)
    finally:
        torch.set_num_threads(threads)
    seconds["Basin"] = time.perf_counter() - start
    versions = None
    if PEER_PYTHON.exists():
        start = time.perf_counter()
        theirs, versions = peer(x0s, kernels, warmup, draws)
        seconds["BlackJAX"] = time.perf_counter() - start
        results |= {("peer", *key): v for key, v in theirs.items()}
    else:
        print(
            f"BlackJAX peer missing ({PEER_PYTHON}): `python -m bench setup-peer`. Basin only.",
            file=sys.stderr,
        )
    out = tables(results, kernels, repeats)
    out["notes"] = notes(results, kernels, repeats, versions, seconds, chains)
    return out


def notes(results, kernels, repeats, versions, seconds, chains) -> list[str]:
    """What the tables do not say: how they were made, the warm-up's cost, versions, times."""
    warm = []
    for name in kernels:
        for side, label in (("basin", "Basin"), ("peer", "BlackJAX")):
            per_chain = [
                results[side, case, name, r]["warmup_grads"] / chains
                for case in CASES
                for r in range(repeats)
                if (side, case, name, r) in results
            ]
            if per_chain:
                warm.append(f"{label} {name} {_median(per_chain):.0f}")
    peer = (
        "BlackJAX not run"
        if versions is None
        else "BlackJAX {blackjax} (jax {jax}, {jax_device})".format(**versions)
    )
    timing = ", ".join(f"{side} {s:.0f} s" for side, s in seconds.items())
    return [
        f"Medians over {repeats} repeats; ratios Basin / BlackJAX, the median over repeats "
        "(their range). Basin pools its warm-up over the chains: one step and one metric for "
        "all, from their mean acceptance and all their positions. BlackJAX adapts each chain "
        "alone: its step is the median over chains, its metric error the median over chains "
        "of each chain's largest |inv_mass / variance - 1|. 'Basin per chain' runs Basin "
        "with adapt: chain (each chain adapts alone, as BlackJAX's do; all chains in one "
        "run), read the same way: like for like with BlackJAX, and what the pooling "
        "changes. accept: the mean acceptance "
        "statistic of the draws after the warm-up (NUTS: accept_stat; HMC: Basin's accepted "
        "flags, BlackJAX's acceptance_rate). In the rotated case the variances are the "
        "covariance's diagonal, which a diagonal metric cannot make isotropic.",
        "ESS: bulk ESS of each coordinate over all chains (samplers.diagnostics.ess_bulk on "
        "both sides' draws), its minimum over coordinates; a gradient evaluation is a leapfrog "
        f"step of one chain. HMC runs a fixed {HMC_STEPS} leapfrog steps (Basin's jitter "
        "off): on a Gaussian a fixed trajectory length resonates, so its ESS swings by orders "
        "of magnitude with a few percent of step; its ESS is shown, not judged.",
        "Warm-up gradient evaluations per chain (median over cases and repeats): "
        + ", ".join(warm)
        + ".",
        f"float64 on both sides; {peer}; wall time {timing}.",
    ]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    text = f"{_median(values):.3g}"
    return text if len(values) < 2 else f"{text} ({min(values):.3g}-{max(values):.3g})"


ADAPTED = (
    "| case | kernel | step Basin | step Basin per chain | step BlackJAX | Basin / BlackJAX | "
    "Basin per chain / BlackJAX | accept Basin | accept Basin per chain | accept BlackJAX | "
    "metric error Basin | metric error Basin per chain | metric error BlackJAX |"
)
EFFICIENCY = (
    "| case | kernel | grads/draw Basin | grads/draw BlackJAX | min ESS Basin | "
    "min ESS BlackJAX | min ESS/grad Basin | min ESS/grad BlackJAX | Basin / BlackJAX | "
    "min ESS/grad Basin per chain | Basin per chain / BlackJAX | divergent Basin / BlackJAX |"
)


def tables(results: dict, kernels: tuple[str, ...], repeats: int) -> dict:
    """The adaptation table, the efficiency table and a line per goal."""
    adapted = ["Adaptation:", "", ADAPTED, "|---|---|" + "---:|" * 11]
    efficient = ["Efficiency after the warm-up:", "", EFFICIENCY, "|---|---|" + "---:|" * 10]
    goals = []
    for case in CASES:
        variances = np.diag(target(case).cov.numpy())
        for name in kernels:
            runs = {
                side: [results[side, case, name, r] for r in range(repeats)]
                for side in ("basin", "alone", "peer")
                if (side, case, name, 0) in results
            }
            a = {side: [adaptation(r, variances) for r in v] for side, v in runs.items()}
            e = {
                side: [efficiency(r) for r in runs[side]]
                for side in ("basin", "alone", "peer")
                if side in runs
            }
            row = Row(a | {f"{s} efficiency": v for s, v in e.items()}, runs)
            step = row.ratio("basin", "peer", "step")
            step_alone = row.ratio("alone", "peer", "step")
            ess = row.ratio("basin efficiency", "peer efficiency", "ess_per_grad")
            ess_alone = row.ratio("alone efficiency", "peer efficiency", "ess_per_grad")
            adapted.append(
                f"| {case} | {name} | {row.col('basin', 'step')} | {row.col('alone', 'step')} | "
                f"{row.col('peer', 'step')} | {_spread(step)} | {_spread(step_alone)} | "
                f"{row.raw('basin', 'accept')} | {row.raw('alone', 'accept')} | "
                f"{row.raw('peer', 'accept')} | "
                f"{row.col('basin', 'mass_error', 2)} | {row.col('alone', 'mass_error', 2)} | "
                f"{row.col('peer', 'mass_error', 2)} |"
            )
            efficient.append(
                f"| {case} | {name} | {row.col('basin efficiency', 'grads_per_draw')} | "
                f"{row.col('peer efficiency', 'grads_per_draw')} | "
                f"{row.count('basin efficiency', 'min_ess')} | "
                f"{row.count('peer efficiency', 'min_ess')} | "
                f"{row.col('basin efficiency', 'ess_per_grad')} | "
                f"{row.col('peer efficiency', 'ess_per_grad')} | {_spread(ess)} | "
                f"{row.col('alone efficiency', 'ess_per_grad')} | {_spread(ess_alone)} | "
                f"{row.total('basin', 'divergent')} / {row.total('peer', 'divergent')} |"
            )
            goals.append(goal(case, name, step, step_alone, (ess, ess_alone), a))
    return {"lines": [*adapted, "", *efficient], "goals": goals}


class Row:
    """One case and kernel: each side's per-repeat statistics (``stats``) and runs."""

    def __init__(self, stats: dict, runs: dict):
        self.stats, self.runs = stats, runs

    def col(self, side: str, key: str, digits: int = 3) -> str:
        values = [m[key] for m in self.stats.get(side, [])]
        return f"{_median(values):.{digits}g}" if values else "-"

    def count(self, side: str, key: str) -> str:
        values = [m[key] for m in self.stats.get(side, [])]
        return f"{_median(values):.0f}" if values else "-"

    def raw(self, side: str, key: str) -> str:
        values = [r[key] for r in self.runs.get(side, [])]
        return f"{_median(values):.3f}" if values else "-"

    def total(self, side: str, key: str) -> str:
        values = [r[key] for r in self.runs.get(side, [])]
        return str(sum(values)) if values else "-"

    def ratio(self, side: str, other: str, key: str) -> list[float]:
        pairs = zip(self.stats.get(side, []), self.stats.get(other, []), strict=False)
        return [x[key] / y[key] for x, y in pairs]


def goal(case, name, step, step_alone, ess, adapted) -> str:
    """The issue's goals for one case and kernel, judged on every repeat."""
    says = {True: "met", False: "NOT met", None: "not judged"}

    def within(ratios, tolerance):
        return bool(ratios) and all(abs(x - 1) <= tolerance for x in ratios)

    parts = [
        f"step within {STEP_GOAL:.0%} of BlackJAX's: {says[within(step, STEP_GOAL)]} (pooled), "
        f"{says[within(step_alone, STEP_GOAL)]} (adapt: chain, like for like)"
    ]
    if name == "nuts":
        met = [bool(e) and all(x >= ESS_GOAL for x in e) for e in ess]
        parts.append(
            f"ESS/grad at least {ESS_GOAL:.0%} of BlackJAX's: {says[met[0]]} (pooled), "
            f"{says[met[1]] if ess[1] else says[None]} (adapt: chain)"
        )
    if case == "unrotated":
        for side, label in (("basin", "pooled"), ("alone", "adapt: chain")):
            mass = [m["mass_error"] for m in adapted.get(side, [])]
            if mass:
                met = all(x <= MASS_GOAL for x in mass)
                parts.append(
                    f"metric within {MASS_GOAL:.0%} of the true variances ({label}): "
                    f"{says[met]} (largest error {max(mass):.3f})"
                )
    return f"{case} {name}, in every repeat: " + "; ".join(parts) + "."
