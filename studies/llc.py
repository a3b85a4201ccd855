"""What the Networks page computes of an LLC run, headless: its default settings per network,
the network's facts without building it, the LLC runs outside sweeps, the newest LLC estimate
beside a VI scan, the live health checks and a finished estimate's table.
"""

from __future__ import annotations

import numpy as np

import landscapes
from landscapes import ParamError
from runs.store import FINAL, RunRecord, Store
from samplers import llc as llc_math

# The registry's step size (1e-3) suits potentials; with nbeta = n / log n a network needs a
# far smaller one. Localization 1 is the RunSpec's LLC default, passed explicitly here since
# the widget always sends a value.
SAMPLER_DEFAULTS = {"step_size": 1e-5, "localization": 1.0}
# Where a network's true LLC is known, the step size at which SGLD's estimate lands near it in the
# Networks page's default run (4 chains x 2,000 steps, seeds 0 and 1: dln 11.9/12.6 of 12 from its
# truth, rrr 8.05/7.84 of 8, polynomial 0.24/0.21 of 0.25, tanh 0.95/0.86 of 1). At 1e-5 every DLN
# chain diverges (docs/methods/local-sampling.md: stable up to 1e-6) and the polynomial's and tanh's
# barely move (0.04 of 0.25, 0.36 of 1). SGHMC and SGNHT land near the truth at the same steps,
# except SGHMC on the polynomial, where 1 and 2 of the 4 chains diverged (seeds 0, 1; the page says
# so).
# model: a start for a user's network (the digits MLP's checkpoints read a flat, finite curve at
# 1e-5, examples/train_digits.py); the Calibrate tab checks it for any other model
STEP_SIZES = {"dln": 1e-7, "rrr": 1e-4, "polynomial": 1e-3, "tanh": 1e-3, "model": 1e-5}


def default_step_size(target_name: str, sampler: landscapes.Spec) -> float:
    """The network's step size; times ``a`` for RMSProp- and Adam-SGLD, whose step
    eps / (sqrt(v) + a) grows to eps / a where the loss gradient is small, as near w0: their
    largest step is then SGLD's. At SGLD's own step the same default run gave 13.5/13.8 of 12
    (dln), 17.4/16.7 of 8 (rrr), ~5,000 of 0.25 (polynomial) and 3.9 of 1 (tanh) for RMSProp,
    16.7/17.6, 20.8/21.4, 0.40/0.45 and 3.4/3.1 for Adam; at a x it, RMSProp 12.7/13.3,
    7.8/7.6, 0.21/0.27, 0.75/0.71 and Adam 12.9/12.0, 8.1/8.6, 0.14/0.55, 0.76/0.74: no
    estimate above d/2, no diverged chain, one loss-spike flag (RMSProp, polynomial, seed 0)."""
    step_size = STEP_SIZES.get(target_name, SAMPLER_DEFAULTS["step_size"])
    a = next((p.default for p in sampler.params if p.name == "a"), None)
    return step_size * a if a else step_size


# The DLN starts at its generating point, as the DLN benchmark's runs do: Adam's w0 on 100,000
# points stops above the minimum the chains then find: lambda-hat came out at -6 to -11.
W0_DEFAULTS = {"dln": "truth", "model": "truth"}  # a model: its own (checkpoint) weights


def network_facts(name: str, params: dict) -> dict:
    """d, n, the default nbeta, whether a true w0 and the true LLC are known, the classes of a
    classification network (None for regression), or {"error": ...}
    for parameters its builder refuses: from ``landscapes.facts``, parameter arithmetic that
    builds nothing, so a page never holds a network (11 x 5000 typed widths grew the app's
    server by 2 GB when it built the target to read these)."""
    try:
        facts = landscapes.facts(name, params)
    except ParamError as exc:
        return {"error": str(exc), "field": exc.field}
    keys = ("dim", "n", "nbeta", "truth", "true_llc", "multiplicity", "classes")
    return {key: facts[key] for key in keys}


def llc_runs(store: Store) -> list[RunRecord]:
    """LLC runs that belong to no sweep, newest first."""
    swept = {c["run_id"] for s in store.list_sweeps() for c in s["cells"]}
    return [r for r in store.list() if "llc" in r.spec.get("observables", ()) and r.id not in swept]


def latest_llc(store: Store, target: dict) -> RunRecord | None:
    """The newest completed LLC run on ``target``'s network (its name, and its parameters
    other than n), for the VI scan to show beside its slope; None when there is none."""
    spec = landscapes.REGISTRY[target["name"]]

    def others(params: dict) -> dict:  # completed with the defaults: a sweep stores what was given
        full = spec.validate({**params, "n": spec.defaults()["n"]})
        return {k: v for k, v in full.items() if k != "n"}

    same = others(target["params"])
    for record in store.list("completed"):
        t = record.spec["target"]
        llc_ = ((record.summary or {}).get("observables") or {}).get("llc")
        if llc_ and t["name"] == target["name"] and others(t["params"]) == same:
            return record
    return None


def llc_warnings_so_far(record: RunRecord, flushes: dict, dim: int) -> list[dict]:
    """The health checks the summary will make, on the latest flush of a running LLC run
    (none before its burn-in ends, nor once it has ended)."""
    step = flushes.get("step")
    if record.status in FINAL or step is None or not len(step):
        return []
    if step[-1] < record.spec["burn_in"]:
        return []
    last = flushes["acceptance"][-1]
    acceptance = float(np.nanmean(last)) if np.isfinite(last).any() else None
    return llc_math.health(llc_math.summarise(flushes["llc"][-1], 0), dim, acceptance=acceptance)


def llc_details(est: dict) -> dict:
    """A finished LLC run's estimate as the Networks page's quantity -> value table."""
    training = est.get("training") or {}
    details = {
        "λ̂ mean": est["mean"],
        "SE": est["se"],
        "SD": est["std"],
        "chains (diverged)": f"{est['chains']} ({est['nan_chains']})",
        "draws per chain": est["draws"],
        "nβ": est["nbeta"],
        "localization γ": est["localization"],
        "w0": est["w0"],
        "baseline L_n(w0)": est["baseline_loss"],
        "baseline": est["baseline"],
        "MALA acceptance of an SGLD step": est["acceptance"],
        "gradient noise / injected noise": est["noise_ratio"],
        "WBIC": est["wbic"],
        "training steps": training.get("steps"),
    }
    if training.get("cancelled"):
        details["training steps"] = f"{training['steps']} (cancelled)"
    shown = [
        "–" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)
        for v in details.values()
    ]
    return {"quantity": list(details), "value": shown}
