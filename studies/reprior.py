"""The repriorisation study of Hron et al. (2022, Fig. 7 left), the ``reprior`` sweep:
ntk-fcn widths x {standard, reprior}, each run of reprior-lmc with the "ess" observable from the
same start and seed; per width the per-step ESS of theta and of f(X_test) in both
parametrisations, their ratio, the acceptance and the adapted step, live as the runs go. The
Wide networks page's other studies (slices, the KL from prior draws) are ``studies.wide``.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import landscapes
from landscapes.base import shown
from runs import verdict
from runs.spec import RunSpec, SpecError, parse_spec
from runs.store import Store
from samplers.diagnostics import projection_ess
from studies import arguments
from studies.sweeps import check_size, check_steps, print_flags, progress

KIND = "reprior"
HELP = "repriorisation of wide networks: ESS by width (Hron et al. 2022, Fig. 7)"
SPEC_FLAGS = False  # its own flags, not a base run's

PARAMETRISATIONS = ("standard", "reprior")
# acceptance the exact chains (MH on) of docs/methods/wide-networks.md's check keep
REPRIOR_BAND = (0.8, 0.97)


def check_depth(depth: int, field: str = "depth") -> None:
    """A SpecError naming ``field`` unless ``depth`` has a hidden layer to widen: at depth 0
    (Bayesian linear regression) every width is the same network."""
    high = int(landscapes.REGISTRY["ntk-fcn"].param("depth").high)
    if not 1 <= depth <= high:
        raise SpecError(
            field,
            f"must be an integer in [1, {high}] for a study by width, got {shown(depth)}: depth "
            "0 is Bayesian linear regression, with no hidden layer, the same at every width",
        )


def specs(
    widths: tuple[int, ...] = (8, 128),
    depth: int = 1,
    n: int = 16,
    data: str = "synthetic",
    chains: int = 2,
    steps: int = 4000,
    warmup: int = 1000,
    step_size: float = 0.01,
    refresh: float = 0.1,
    mh: bool = True,
    target_accept: float = 0.9,
    seed: int = 0,
    device: str = "auto",
    dtype: str = "float64",
) -> tuple[dict, list[tuple[dict, RunSpec]]]:
    """The study's parameters and (cell, RunSpec) pairs: at each width, both parametrisations
    from the same start (the seed draws phi_0 ~ N(0, I) alike; it also draws the data), the
    warm-up adapting each
    chain's step toward ``target_accept`` and counted as burn-in, thinning 1 (under thinning
    the per-step ESS saturates near 1: docs/methods/wide-networks.md). Float64 by default: float32
    shifted the paper's acceptances by 2-5 points."""
    params = dict(locals())
    params["widths"] = list(widths)
    if not widths:
        raise SpecError("widths", "must hold at least one width, got none")
    check_depth(depth)
    check_steps(steps)
    if not 0 <= warmup < steps:
        raise SpecError(
            "warmup",
            f"must be an integer in [0, {shown(steps - 1)}] (below steps), got {shown(warmup)}",
        )
    check_size(2 * len(widths), "widths", "parametrisations")
    cells = []
    for i, width in enumerate(widths):
        for parametrisation in PARAMETRISATIONS:
            target = {"width": width, "depth": depth, "n": n, "data": data, "seed": seed}
            kernel = {"step_size": step_size, "refresh": refresh, "mh": mh}
            kernel.update(target_accept=target_accept, warmup=warmup)
            run = {
                "target": {
                    "name": "ntk-fcn",
                    "params": {**target, "parametrisation": parametrisation},
                },
                "sampler": {"name": "reprior-lmc", "params": kernel},
                "chains": chains,
                "steps": steps,
                "burn_in": warmup,
                "seed": seed + i,  # the same at a width: both parametrisations start alike
                "device": device,
                "dtype": dtype,
                "observables": ["ess"],
            }
            cells.append(({"width": width, "parametrisation": parametrisation}, parse_spec(run)))
    return params, cells


def _ess_now(store: Store, run_id: str, spec: dict) -> dict | None:
    """A running run's ESS so far, from its recorded projections after the burn-in."""
    burn = math.ceil(spec["burn_in"] / spec["thin"])
    names = ["theta_projections", "f_projections", "accept_prob"]
    records = store.read(run_id, since=burn, names=names)
    if "theta_projections" not in records or len(records["theta_projections"]) < 4:
        return None
    out = {"theta": projection_ess(records["theta_projections"])}
    out["f"] = projection_ess(records["f_projections"]) if "f_projections" in records else None
    # the acceptance probability, as a finished run's summary reports it
    out["acceptance"] = float(np.mean(records["accept_prob"])) if "accept_prob" in records else None
    return out


def results(store: Store, sweep: dict) -> dict:
    """Per cell: status, steps done, per-step ESS of theta and f (min / mean / max over the
    projections; a running run's from its records so far), acceptance and adapted step; per
    width: the reprior / standard ratios of the mean ESS, the pair's numbers finished."""
    rows = []
    for cell in sweep["cells"]:
        try:
            record = store.get(cell["run_id"])
        except KeyError:
            continue
        row = {**cell, "status": record.status, "ess": None, "acceptance": None, "step": None}
        row["steps_done"] = (record.progress or {}).get("steps_done", 0)
        if record.status == "completed" and record.summary:
            ess = record.summary["observables"].get("ess") or {}
            row["ess"] = {"theta": ess.get("theta"), "f": ess.get("f")}
            row["acceptance"] = record.summary["scalars"].get("accept_prob")
            row["step"] = record.summary["scalars"].get("step_size")
            row["seconds"] = record.summary.get("sampling_seconds")
            row["steps"] = record.summary.get("steps")
        elif record.status == "running":
            now = _ess_now(store, cell["run_id"], record.spec)
            if now is not None:
                row["ess"] = {"theta": now["theta"], "f": now["f"]}
                row["acceptance"] = now["acceptance"]
        rows.append(row)
    ratios = []
    for width in sweep["spec"]["widths"]:
        pair = {r["parametrisation"]: r for r in rows if r["width"] == width}
        entry = {"width": width}
        for key in ("theta", "f"):
            means = [
                ((pair.get(p) or {}).get("ess") or {}).get(key) or {} for p in PARAMETRISATIONS
            ]
            a, b = (m.get("mean") for m in means)
            entry[key] = b / a if a and b and math.isfinite(a) and math.isfinite(b) else None
        seconds = [(pair.get(p) or {}).get("seconds") for p in PARAMETRISATIONS]
        steps = [(pair.get(p) or {}).get("steps") for p in PARAMETRISATIONS]
        entry["cost"] = (
            (seconds[1] / steps[1]) / (seconds[0] / steps[0])
            if all(seconds) and all(steps)
            else None
        )
        ratios.append(entry)
    mh = sweep["spec"]["mh"]
    return {
        "progress": progress(store, sweep),
        "cells": rows,
        "ratios": ratios,
        "mh": mh,
        "band": REPRIOR_BAND,
        "skip_mh_floor": verdict.SKIP_MH_ACCEPTANCE,
        "flags": flags(rows, ratios, mh),
    }


def flags(cells: list[dict], ratios: list[dict], mh: bool) -> list[dict]:
    """What the finished runs' numbers say is wrong, each {level, where, message, try}: a
    cell's acceptance outside REPRIOR_BAND (MH on) or under the paper's floor (MH skipped) is
    "fail"; a width whose finished pair's repriorised ESS is no higher than the standard one's
    is "warn" (small widths are far from the prior; short runs give noisy ESS)."""
    out = []
    lo, hi = REPRIOR_BAND
    floor = verdict.SKIP_MH_ACCEPTANCE
    for cell in cells:
        if cell["status"] != "completed":
            continue
        where = f"width {cell['width']}, {cell['parametrisation']}"
        acc = cell["acceptance"]
        if acc is None:
            message, advice = "no acceptance was recorded (every chain diverged?)", "a smaller step"
        elif mh and acc < lo:
            message = f"acceptance {acc:.3f}, below {lo}: the adapted step is too large"
            advice = "a longer warm-up, a smaller initial step or a higher target acceptance"
        elif mh and acc > hi:
            message = f"acceptance {acc:.3f}, above {hi}: the step is smaller than it could be"
            advice = "a longer warm-up or a larger initial step (the ESS undersells the map)"
        elif not mh and acc < floor:
            message = (
                f"mean acceptance probability {acc:.3f} with MH skipped, below the paper's "
                f"{floor}: the draws carry the integrator's bias"
            )
            advice = f"a target acceptance of {floor} or more, or MH on"
        else:
            continue
        out.append({"level": "fail", "where": where, "message": message, "try": advice})
    done = [c["width"] for c in cells if c["status"] == "completed"]
    for ratio in ratios:
        if done.count(ratio["width"]) < 2:
            continue
        low = [
            f"{k} x{ratio[k]:.2f}" for k in ("f", "theta") if ratio[k] is not None and ratio[k] <= 1
        ]
        if low:
            out.append(
                {
                    "level": "warn",
                    "where": f"width {ratio['width']}",
                    "message": "the repriorised ESS is no higher than the standard one "
                    f"({', '.join(low)}): at small widths phi's posterior is still far from "
                    "the prior, and short runs give noisy ESS",
                    "try": "more steps, or a wider network",
                }
            )
    return out


# -- the command line: python -m jobs sweep reprior ... -----------------------------------------


def add_arguments(k: argparse.ArgumentParser) -> None:
    k.add_argument("--widths", default="8,128", help="comma-separated hidden widths")
    k.add_argument("--depth", type=int, default=1, help="hidden layers")
    k.add_argument("--n", type=int, default=16, help="training points")
    k.add_argument("--data", choices=("synthetic", "digits"), default="synthetic")
    k.add_argument("--chains", type=int, default=2)
    k.add_argument("--steps", type=int, default=4000)
    k.add_argument("--warmup", type=int, default=1000, help="step-size adaptation (burn-in)")
    k.add_argument("--step-size", dest="step_size", type=float, default=0.01, help="initial")
    k.add_argument("--refresh", type=float, default=0.1, help="momentum refresh beta")
    k.add_argument("--skip-mh", dest="skip_mh", action="store_true", help="no MH test")
    k.add_argument("--target-accept", dest="target_accept", type=float, default=0.9)
    arguments.add_common(k)


def specs_from_args(args: argparse.Namespace, base=None) -> tuple[dict, list]:
    widths = arguments.integers(args.widths, "--widths")
    return specs(**arguments.keywords(args, specs, widths=widths, mh=not args.skip_mh))


def print_text(result: dict) -> None:
    fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
    for c in result["cells"]:
        ess = c["ess"] or {}
        f, theta = ess.get("f") or {}, ess.get("theta") or {}
        print(
            f"width {c['width']:<6} {c['parametrisation']:<8} {c['status']:<9} "
            f"ESS/step f {fmt(f.get('mean'))} (min {fmt(f.get('min'))}) "
            f"theta {fmt(theta.get('mean'))}  acceptance {fmt(c['acceptance'])}  "
            f"step {fmt(c['step'])}"
        )
    print_flags(result)
    ratio = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
    for r in result["ratios"]:
        print(
            f"width {r['width']:<6} reprior / standard: ESS f x{ratio(r['f'])}, "
            f"theta x{ratio(r['theta'])}, time a step x{ratio(r['cost'])}"
        )
