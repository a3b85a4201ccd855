"""What the potential pages (Playground, Compare) share: targets built for their closed forms,
exact draws, coordinate labels, tail ESS of a finished run, and an even subsample of a run's
draws that keeps every rerun's cost flat however long the run grows."""

from __future__ import annotations

import json
import math

import numpy as np
import streamlit as st
import torch

import landscapes
from landscapes import ParamError
from samplers import diagnostics

from . import store
from .widgets import kept

POTENTIALS = [name for name, spec in landscapes.REGISTRY.items() if spec.kind == "potential"]
DEFAULTS = {"step_size": 0.1}  # the registry's 1e-3 suits networks; toys mix visibly at 0.1
EXACT_DRAWS = 20_000
EXACT_SEED = 20_250_131
# Draws behind histograms, tails and KS: an even subsample beyond this (the statistics' Monte
# Carlo error at 10^5 draws is below what the figures show; a 4096-chain run has 10^7).
MAX_STAT = 100_000
# Draws a potential page's run keeps by default (thin chosen to fit): ~0.35 GB in the store for
# a 2-D target, and what a live view can fetch as it streams. Every step of 4096 chains would
# be 200 MB/s to write and to read back, which no page needs to draw a histogram or a trace.
AUTO_DRAWS = 20_000_000


@st.cache_resource(max_entries=32, show_spinner=False)
def target_of(name: str, params_json: str) -> landscapes.Target | ParamError:
    """The target on the CPU in float64, for closed-form evaluations only (or its error)."""
    try:
        return landscapes.make(name, device="cpu", dtype="float64", **json.loads(params_json))
    except ParamError as exc:
        return exc


@st.cache_data(max_entries=32, show_spinner=False)
def exact_draws(name: str, params_json: str) -> np.ndarray | None:
    """EXACT_DRAWS draws of the target's exact sampler (fixed seed), or None without one."""
    target = target_of(name, params_json)
    if target.exact_sample is None:
        return None
    return target.exact_sample(torch.Generator().manual_seed(EXACT_SEED), EXACT_DRAWS).numpy()


def labels_of(target: landscapes.Target) -> list[str]:
    """One name per coordinate: x, y for a typed formula, else from the target's layout."""
    if target.name == "custom":
        return ["x", "y"][: target.dim] if target.dim <= 2 else [f"w{i}" for i in range(target.dim)]
    out = []
    for key, shape in target.layout.items():
        size = math.prod(shape)
        out += [key] if size == 1 else [f"{key}{i}" for i in range(size)]
    return out


def targets_exact(sampler_params: dict) -> bool:
    """Truths hold for exp(-L): nbeta 1 (a potential's own), no localization, temperature 1."""
    return (
        sampler_params.get("nbeta") in (None, 1.0)
        and not sampler_params.get("localization")
        and sampler_params.get("temperature", 1.0) == 1.0
    )


@st.cache_data(max_entries=128, show_spinner="Computing tail ESS…")
def tail_ess(run_id: str, burn: int) -> list[float] | None:
    """ESS of the 5% and 95% quantiles per coordinate of a finished run (not in its summary)."""
    data = store().read(run_id, names=["position", "diverged"])
    if "position" not in data or data["position"].shape[0] - burn < 4:
        return None
    draws = np.moveaxis(data["position"][burn:, ~data["diverged"][-1]], 0, 1)
    if not draws.shape[0]:
        return None
    k = diagnostics.diagnosed_chains(*draws.shape[:2])  # the chains the summary's ESS used
    return np.atleast_1d(diagnostics.ess_tail(draws[:k].astype(float))).tolist()


def even_sample(
    position: np.ndarray, diverged: np.ndarray, burn: int, limit: int = MAX_STAT
) -> tuple[np.ndarray, int, int]:
    """(sample [records, chains, d], every, total): one record in ``every`` after the burn-in,
    of the chains that never diverged, at most ``limit`` draws, out of ``total`` such draws.

    Only the kept records are copied, so a view of a long run costs the same at its millionth
    draw as at its first."""
    good = ~diverged[-1]
    total = max(0, len(position) - burn) * int(good.sum())
    every = max(1, -(-total // limit))
    return position[burn::every][:, good], every, total


def ks_bound(ess: float | None, drawn: int, exact: int) -> float | None:
    """The KS distance bound (alpha = 0.001) for ``drawn`` of a run's draws, an even subsample,
    against ``exact`` exact draws; None without a usable ESS. The run's ESS counts all of its
    draws, and a subsample of them holds at most as many effective draws as it has draws: a
    long, well-mixed run's ESS passed as is made the bound too tight for the sample tested."""
    if ess is None or not np.isfinite(ess) or ess <= 0 or drawn < 1:
        return None
    return diagnostics.ks_bound(min(ess, drawn), exact)


def auto_thin(chains: int, steps: int) -> int:
    """The smallest thin that keeps at most AUTO_DRAWS draws."""
    return max(1, -(-chains * steps // AUTO_DRAWS))


def run_length(prefix: str) -> dict:
    """Chains, steps, burn-in, thin and seed of a potential page's runs (RunSpec fields)."""
    c1, c2, c3, c4, c5 = st.columns(5)
    chains = int(c1.number_input("chains", 1, 4096, 32, key=kept(f"{prefix}.chains")))
    steps = int(c2.number_input("steps", 10, 100_000, 2000, step=100, key=kept(f"{prefix}.steps")))
    burn_pct = c3.number_input("burn-in (% of steps)", 0, 90, 10, key=kept(f"{prefix}.burn_pct"))
    auto = auto_thin(chains, steps)
    thin = c4.number_input(
        "thin (0: auto)",
        0,
        100_000,
        0,
        key=kept(f"{prefix}.thin"),
        help=f"Record every k-th step. 0 keeps at most {AUTO_DRAWS:.0e} draws: every {auto} "
        "step(s) for this run.",
    )
    seed = c5.number_input("seed", 0, 2**31 - 1, 0, key=kept(f"{prefix}.seed"))
    return {
        "chains": chains,
        "steps": steps,
        "burn_in": steps * int(burn_pct) // 100,
        "thin": int(thin) or auto,
        "seed": int(seed),
    }
