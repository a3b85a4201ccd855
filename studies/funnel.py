"""The funnel experiment of Yu et al. (Sec. 4.2): its protocol as RunSpecs, the tail statistics of
the neck v, and the values reproduced from the authors' code (docs/methods/sgrld.md) to put beside
them. Shared by the Funnel page, the CLI's benchmark (``python -m bench sgrld``) and the tests.

The target is the softplus funnel (mu = 2, sigma^2 = 80) with N(0, 1) noise added to the gradient;
every metric starts at (1, 1) with the paper's step size and settings (App. A.4). The paper ran one
chain for 2e6 steps; 32 chains x 2e5 steps with a 10% burn-in reproduce its statistics (an
independent re-implementation; docs/methods/sgrld.md). Also the Funnel page's tail table: which runs
follow the protocol, their tails, and the cells far from the truth.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import stats

import landscapes
from runs.budget import is_sampling
from runs.store import Store

TARGET = {"name": "softplus-funnel", "params": {"gradient_noise": 1.0}}
START = (1.0, 1.0)
SIGMA2 = 80.0
# metric -> the paper's sampler parameters (the rest are the metric's defaults: its decay and
# epsilon for potentials, as Yu et al. App. A.4 gives them)
PROTOCOL: dict[str, dict] = {
    "identity": {"metric": "identity", "step_size": 0.001},
    "rmsprop": {"metric": "rmsprop", "step_size": 0.0025},
    "monge": {"metric": "monge", "step_size": 0.003, "alpha2": 0.1},
    "shampoo": {"metric": "shampoo", "step_size": 0.003},
}
CHAINS, STEPS, BURN_FRACTION = 32, 200_000, 0.1
# The Funnel page's default length: its 4 metrics x 32 chains x 200,000 steps would be ~340 MiB
# and ~7 min, over both run budgets (runs.budget: 50 MiB, 60 s), and the first Run would queue
# nothing; a tenth of the steps fits them (~34 MiB, ~55 s estimated on a store with no history).
PAGE_STEPS = 20_000


def parameters(metric: str) -> dict:
    """The paper's sampler parameters for ``metric``; wenzel, which the paper did not run on
    the funnel, gets identity's step (and its own defaults)."""
    return PROTOCOL.get(metric, {"metric": metric, "step_size": PROTOCOL["identity"]["step_size"]})


COLUMNS = ("v sd", "v q01", "v min", "P(v<-5)", "P(v<-10)", "KS vs N(0,80)", "θ1 sd")
# Reproduced by rerunning the authors' code, one chain x 2e6 steps (docs/methods/sgrld.md).
TRUTH = {
    "v sd": math.sqrt(SIGMA2),
    "v q01": stats.norm.ppf(0.01, 0, math.sqrt(SIGMA2)),
    "v min": None,
    "P(v<-5)": stats.norm.cdf(-5, 0, math.sqrt(SIGMA2)),
    "P(v<-10)": stats.norm.cdf(-10, 0, math.sqrt(SIGMA2)),
    "KS vs N(0,80)": 0.0,
    "θ1 sd": 1.908,
}
REFERENCE = {
    "identity": (6.26, -6.99, -8.06, 0.088, 0.000, 0.211, 1.71),
    "rmsprop": (7.76, -13.24, -15.45, 0.219, 0.051, 0.083, 1.85),
    "monge": (8.48, -18.74, -26.08, 0.196, 0.063, 0.093, 2.07),
    "shampoo": (7.69, -12.81, -14.19, 0.306, 0.068, 0.091, 1.52),
}
# The figure's scatter: log p contour levels and axes (theta_1 across, v up).
CONTOURS = (-10.0, -7.5, -5.0, -2.5)
X_RANGE, V_RANGE = (-5.0, 9.0), (-25.0, 25.0)
V_BINS = 30


def spec(metric: str, chains: int = CHAINS, steps: int = STEPS, seed: int = 1, **extra) -> dict:
    """The RunSpec (as a dict) of ``metric`` under the paper's protocol."""
    return {
        "target": TARGET,
        "sampler": {"name": "sgrld", "params": {**parameters(metric), **extra}},
        "chains": chains,
        "steps": steps,
        "burn_in": int(steps * BURN_FRACTION),
        "seed": seed,
        "start": list(START),
    }


def tails(v: np.ndarray, theta1: np.ndarray) -> dict[str, float]:
    """The tail table's columns of draws of v and theta_1 (any shapes, pooled)."""
    v, theta1 = np.ravel(v), np.ravel(theta1)
    v, theta1 = v[np.isfinite(v)], theta1[np.isfinite(theta1)]
    if not len(v):
        return dict.fromkeys(COLUMNS)
    ks = stats.kstest(v, stats.norm(0, math.sqrt(SIGMA2)).cdf).statistic
    values = (
        v.std(),
        np.quantile(v, 0.01),
        v.min(),
        np.mean(v < -5),
        np.mean(v < -10),
        ks,
        theta1.std() if len(theta1) else None,
    )
    return {k: None if x is None else float(x) for k, x in zip(COLUMNS, values, strict=True)}


# -- the Funnel page's table: Basin's runs beside the truth and the paper's rows -----------------

# Where a tail statistic is suspect: off the truth by more than a relative or absolute
# tolerance, or (v min) never below the true 1% quantile. Colour, not a test: 32 chains x 2e5
# steps of a correct sampler land within these (the re-implementation's KS at 16 x 1e5 is noisier).
TOLERANCE = {
    "v sd": ("relative", 0.1),
    "v q01": ("relative", 0.1),
    "v min": ("above", "v q01"),
    "P(v<-5)": ("absolute", 0.03),
    "P(v<-10)": ("absolute", 0.03),
    "KS vs N(0,80)": ("absolute", 0.05),
    "θ1 sd": ("relative", 0.1),
}
PAPER = "paper (1 chain × 2e6 steps)"


def is_protocol_run(spec: dict) -> bool:
    """A run of Yu et al.'s funnel protocol (``spec``): SGRLD on the softplus funnel from
    the protocol's start."""
    return (
        is_sampling(spec)
        and spec["target"]["name"] == TARGET["name"]
        and spec["sampler"]["name"] == "sgrld"
        and spec.get("start") == list(START)
        and not spec.get("observables")
    )


def run_tails(store: Store, run_id: str, burn: int) -> dict:
    """``tails`` of every kept draw of a run (after the burn-in, chains that never diverged)."""
    data = store.read(run_id, names=["position", "diverged"])
    if "position" not in data:
        return dict.fromkeys(COLUMNS)
    kept = data["position"][burn:, ~data["diverged"][-1]]
    return tails(kept[..., -1], kept[..., 0])


def suspect(column: str, value) -> bool:
    """Whether a tail statistic is far from the truth (``TOLERANCE``)."""
    if value is None or not math.isfinite(value):
        return False
    how, tolerance = TOLERANCE[column]
    if how == "above":
        return value > TRUTH[tolerance]
    off = abs(value - TRUTH[column])
    return off > (tolerance * abs(TRUTH[column]) if how == "relative" else tolerance)


def table(basin: list[tuple[str, str, dict]], metrics=None) -> tuple[list[dict], list]:
    """The Funnel page's tail table and its suspect cells: the truth, then each (metric,
    source, tails) of ``basin`` followed by the paper's reproduced row of that metric (once),
    then the paper's rows of ``metrics`` (default: all of them) not shown yet. Returns (rows,
    per row the columns ``suspect`` flags)."""
    rows = [{"metric": "truth", "source": "N(0, 80); θ1 | v ~ N(2, sp(v))", **TRUTH}]
    paper = {m: dict(zip(COLUMNS, v, strict=True)) for m, v in REFERENCE.items()}

    def paper_row(metric: str) -> None:
        if metric in paper:
            rows.append({"metric": metric, "source": PAPER, **paper.pop(metric)})

    for metric, source, found in basin:
        rows.append({"metric": metric, "source": source, **dict.fromkeys(COLUMNS), **found})
        paper_row(metric)
    for metric in REFERENCE if metrics is None else metrics:
        paper_row(metric)
    flags = [[c for c in COLUMNS if suspect(c, row[c])] for row in rows]
    return rows, flags


def theta1_density(target: landscapes.Target, edges) -> np.ndarray:
    """theta_1's exact density averaged over each bin, (F(b) - F(a)) / (b - a) from the
    target's CDF: its marginal has a cusp at mu, which a pdf sampled at bin centres misses."""
    edges = np.asarray(edges, dtype=float)
    with torch.no_grad():
        cdf = target.x_cdf(torch.from_numpy(edges)).numpy()
    return np.diff(cdf) / np.diff(edges)
