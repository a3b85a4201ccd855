"""Sweeps: sets of LLC runs that vary one thing, fanned out over the worker pool.

A sweep is stored beside the runs (``Store.create_sweep``): its parameters and one cell per run,
naming what the cell varies. Its results are computed from the runs whenever they are read, so a
page watching a sweep sees it fill in as runs finish, and nothing is stored twice.

- ``dln``: the local-sampling benchmark (reference 000, sections 3-4): K generated DLN problems x
  samplers x step sizes, each run from the generating point w0, whose true LLC is known. Metrics
  per (sampler, step size): mean and SD of the relative error (lambda_hat - lambda) / lambda over
  problems, the fractions of chains that diverged (NaN) and of runs with any such chain (each
  run's estimate averages its surviving chains), and the order-preservation rate over problem
  pairs (Figs 3, 5-8).
- ``calibrate``: one target and sampler over a step size x nbeta grid: lambda_hat-versus-steps
  curves per cell, flags, and the largest step with none, per nbeta. A running estimate that
  settled says little (a step too large biases every draw alike), so a cell must also agree
  with a step an order of magnitude apart, and an SGLD step of its preconditioned size must be
  one MALA would mostly accept.
- ``order``: the integrator-order study of TATi (reference 003, Figs. 2-4): Langevin integrators
  x step sizes on one target at inverse temperature beta, many chains (the paper's seeds) each;
  the relative error of <virial> or <K> (the "thermo" observable) against the step size, on
  log-log axes, with a fitted slope per integrator: the order of its invariant-measure bias.
- ``reprior``: the repriorisation study of Hron et al. (reference 002, Fig. 7 left): ntk-fcn
  widths x {standard, reprior}, each run of reprior-lmc with the "ess" observable from the same
  start and seed; per width the per-step ESS of theta and of f(X_test) in both
  parametrisations, their ratio, the acceptance and the adapted step, live as the runs go.
- ``vi``: the variational n-scan of reference 004 (``runs.vi``): one vi run per n and source,
  the slope of -Psi against log n (an upper bound on the learning coefficient).
- ``checkpoints``: the LLC over training: one LLC run of a ``model`` target per checkpoint
  (same sampler, seed and settings, w0 the checkpoint's weights), the curve lambda_hat against
  the training step with its error band, beside the training loss at each checkpoint.
"""

from __future__ import annotations

import glob
import math
import re
from collections import defaultdict
from itertools import combinations
from pathlib import Path

import numpy as np

import landscapes
from runs import verdict
from runs.spec import RunSpec, SpecError, check_budget, parse_spec
from runs.store import FINAL, Store
from samplers import llc

CURVE_POINTS = 200  # points per lambda_hat-versus-steps curve handed to the app
RECORDS_PER_RUN = 1000  # thin so that a sweep's runs store about this many records each
MAX_RUNS = 1000  # runs in one sweep: each is validated before any is queued (~10 ms each)


def _check_size(runs: int, *fields: str) -> None:
    if runs > MAX_RUNS:
        fewer = ", ".join(fields[:-1]) + f" or {fields[-1]}"
        raise SpecError(
            "sweep",
            f"{' x '.join(fields)} = {runs} runs, over the {MAX_RUNS} a sweep may hold; "
            f"give fewer {fewer}",
        )


def dln_specs(
    size_class: str = "tiny",
    problems: int = 16,
    samplers: tuple[str, ...] = ("sgld", "rmsprop-sgld", "adam-sgld", "sghmc", "sgnht"),
    step_sizes: tuple[float, ...] = (1e-8, 1e-7, 1e-6),
    steps: int = 5000,
    chains: int = 1,
    batch_size: int = 500,
    n: int = 100_000,
    seed: int = 0,
    burn_fraction: float = 0.9,
    device: str = "auto",
    dtype: str = "float32",
) -> tuple[dict, list[tuple[dict, RunSpec]]]:
    """The sweep's parameters and its (cell, RunSpec) pairs: problem p is the DLN drawn from
    ``seed + p``; every run starts at the generating point and uses the paper's burn-in."""
    params = dict(locals())
    params["samplers"], params["step_sizes"] = list(samplers), list(step_sizes)
    if problems < 1:
        raise SpecError("problems", f"must be an integer >= 1, got {problems}")
    for field, values in (("samplers", samplers), ("step_sizes", step_sizes)):
        if not values:
            raise SpecError(field, "must hold at least one value, got none")
    _check_size(problems * len(samplers) * len(step_sizes), "problems", "samplers", "step_sizes")
    cells = []
    for problem in range(problems):
        for sampler in samplers:
            for step_size in step_sizes:
                spec = parse_spec(
                    {
                        "target": {
                            "name": "dln",
                            "params": {"size_class": size_class, "n": n, "seed": seed + problem},
                        },
                        "sampler": {
                            "name": sampler,
                            "params": {"step_size": step_size, "batch_size": batch_size},
                        },
                        "chains": chains,
                        "steps": steps,
                        "burn_in": min(steps - 1, int(burn_fraction * steps)),
                        "thin": max(1, steps // RECORDS_PER_RUN),
                        "seed": seed + problem,
                        "device": device,
                        "dtype": dtype,
                        "record": {"positions": "none"},
                        "observables": ["llc"],
                        "llc": {"w0": "truth"},
                    }
                )
                cell = {"problem": problem, "sampler": sampler, "step_size": step_size}
                cells.append((cell, spec))
    return params, cells


def calibration_specs(
    base: RunSpec, step_sizes: tuple[float, ...], nbetas: tuple[float | None, ...] = (None,)
) -> tuple[dict, list[tuple[dict, RunSpec]]]:
    """The base LLC run over a step size x nbeta grid (None: the target's n / log n). Every cell
    has the base's seed, so a trained w0 is the same in each."""
    data = base.model_dump(mode="json")
    if "llc" not in data["observables"]:
        data["observables"] = [*data["observables"], "llc"]
    params = {"base": data, "step_sizes": list(step_sizes), "nbetas": list(nbetas)}
    for field, values in (("step_sizes", step_sizes), ("nbetas", nbetas)):
        if not values:
            raise SpecError(field, "must hold at least one value, got none")
    _check_size(len(step_sizes) * len(nbetas), "step_sizes", "nbetas")
    cells = []
    for nbeta in nbetas:
        for step_size in step_sizes:
            cell_data = {**data, "sampler": dict(data["sampler"])}
            cell_data["sampler"]["params"] = {
                **data["sampler"]["params"],
                "step_size": step_size,
                "nbeta": nbeta,
            }
            cells.append(({"step_size": step_size, "nbeta": nbeta}, parse_spec(cell_data)))
    return params, cells


def submit(
    store: Store,
    kind: str,
    params: dict,
    cells: list[tuple[dict, RunSpec]],
    held_by: int | None = None,
) -> str:
    """Check every run against the memory budget first (a class too large for the device is
    refused with the estimate, before anything is queued), then queue them all (``held_by``: held
    by that process, a Ray driver or the app starting one, so no local worker takes them)."""
    for _, spec in cells:
        check_budget(spec)
    stored = []
    for cell, spec in cells:
        run_id = store.create(spec.model_dump(mode="json"), held_by=held_by)
        stored.append({**cell, "run_id": run_id})
    return store.create_sweep(kind, params, stored)


def progress(store: Store, sweep: dict) -> dict:
    counts: dict[str, int] = defaultdict(int)
    for cell in sweep["cells"]:
        try:
            counts[store.get(cell["run_id"]).status] += 1
        except KeyError:
            counts["deleted"] += 1
    # A run deleted from the Runs page will not finish: it counts as done, or a page (or the
    # CLI) watching the sweep would wait for it forever.
    done = sum(v for k, v in counts.items() if k in FINAL or k == "deleted")
    return {"runs": len(sweep["cells"]), "done": done, "by_status": dict(counts)}


def _llc(store: Store, run_id: str) -> dict | None:
    """A finished run's LLC summary, or None while it runs (or when it failed)."""
    try:
        record = store.get(run_id)
    except KeyError:
        return None
    if record.status != "completed" or not record.summary:
        return None
    return record.summary["observables"].get("llc")


# ---------------------------------------------------------------------------------------------
# DLN benchmark metrics.


def order_preservation(true: np.ndarray, estimate: np.ndarray) -> float | None:
    """Over problem pairs with lambda_1 < lambda_2, the fraction with lambda_hat_1 < lambda_hat_2
    (reference 000, Fig. 8); pairs with a NaN estimate are left out."""
    pairs = [
        (i, j) if true[i] < true[j] else (j, i)
        for i, j in combinations(range(len(true)), 2)
        if true[i] != true[j] and np.isfinite(estimate[i]) and np.isfinite(estimate[j])
    ]
    if not pairs:
        return None
    return float(np.mean([estimate[i] < estimate[j] for i, j in pairs]))


def dln_results(store: Store, sweep: dict) -> dict:
    """Per cell: the estimate and its relative error; per (sampler, step size): the metrics."""
    rows, groups = [], defaultdict(list)
    for cell in sweep["cells"]:
        summary = _llc(store, cell["run_id"])
        if summary is None:
            continue
        true, mean = summary["true"], summary["mean"]
        rel = None if mean is None or not true else (mean - true) / true
        row = {
            **cell,
            "llc": mean,
            "true": true,
            "dim": summary["dim"],
            "relative_error": rel,
            "nan_chains": summary["nan_chains"],
            "chains": summary["chains"],
            "warnings": [w["code"] for w in summary["warnings"]],
        }
        rows.append(row)
        groups[(cell["sampler"], cell["step_size"])].append(row)
    metrics = []
    for (sampler, step_size), group in sorted(groups.items()):
        rel = np.array(
            [np.nan if r["relative_error"] is None else r["relative_error"] for r in group]
        )
        finite = rel[np.isfinite(rel)]
        true = np.array([r["true"] for r in group], dtype=float)
        est = np.array([np.nan if r["llc"] is None else r["llc"] for r in group])
        metrics.append(
            {
                "sampler": sampler,
                "step_size": step_size,
                "problems": len(group),
                "relative_error_mean": float(finite.mean()) if finite.size else None,
                "relative_error_sd": float(finite.std(ddof=1)) if finite.size > 1 else None,
                "nan_fraction": sum(r["nan_chains"] for r in group)
                / sum(r["chains"] for r in group),
                # the estimate averages a run's surviving chains: say how many runs lost some
                "nan_run_fraction": sum(r["nan_chains"] > 0 for r in group) / len(group),
                "order_preservation": order_preservation(true, est),
            }
        )
    return {"progress": progress(store, sweep), "cells": rows, "metrics": metrics}


# ---------------------------------------------------------------------------------------------
# Calibration grid.


def _curve(store: Store, run_id: str, spec: RunSpec, summary: dict) -> dict:
    """The running lambda_hat (mean over finite chains) against the step, <= CURVE_POINTS.
    A paired run's losses are taken relative to w0's on the same batch, as its estimate is."""
    data = store.read(run_id, names=["step", "loss", "center_loss"])
    burn = math.ceil(spec.burn_in / spec.thin)
    loss = llc.paired_losses(data, summary["baseline_loss"])
    run = llc.running(loss, summary["baseline_loss"], summary["nbeta"], burn)
    with np.errstate(invalid="ignore"):
        good = np.isfinite(run[-1]) if len(run) else np.zeros(0, bool)
        mean = run[:, good].mean(1) if good.any() else np.full(len(run), np.nan)
    pick = (
        np.unique(np.linspace(burn, len(run) - 1, CURVE_POINTS).astype(int))
        if len(run) > burn
        else []
    )
    flushes = store.read(run_id, series="flushes")
    with np.errstate(invalid="ignore"):
        live = {
            k: np.nanmean(flushes[k], 1).tolist()
            for k in ("distance", "acceptance")
            if k in flushes
        }
    return {
        "step": data["step"][pick].tolist(),
        "llc": [None if not math.isfinite(v) else float(v) for v in mean[pick]],
        "flush_step": flushes.get("step", np.zeros(0)).tolist(),
        **live,
    }


ACCEPTANCE_MIN = 0.9  # the preconditioned MALA acceptance below which a step biases the chains
PRECISION = 0.1  # an estimate with an SE above this fraction of it can neither confirm nor be
DECADE = (5.0, 20.0)  # step ratios that count as "an order of magnitude smaller"
AGREE = 0.1  # relative difference two such estimates may have, on top of 2 combined SEs


def precise(row: dict) -> bool:
    return row["llc"] is not None and (row["se"] or 0) <= PRECISION * abs(row["llc"])


def agree(a: dict, b: dict) -> bool:
    """Whether two cells' estimates agree within AGREE plus two combined standard errors."""
    diff, noise = abs(a["llc"] - b["llc"]), 2 * math.hypot(a["se"] or 0, b["se"] or 0)
    return diff <= AGREE * max(abs(a["llc"]), abs(b["llc"])) + noise


def step_flags(rows: list[dict]) -> None:
    """Flag what the step-size axis says about each cell: "imprecise" (SE > 10% of lambda_hat:
    more chains or steps), else whether the precise cells at its nbeta and a step about 10x
    smaller confirm it, as halving a step checks an integrator: "step_sensitive" when they all
    disagree, "unconfirmed" when the grid has none (its smallest step, always). A smaller step
    that has not mixed yet reads low and makes a good step look sensitive: a false alarm, never
    a false pass."""
    for row in rows:
        if row["llc"] is None:
            continue
        if not precise(row):
            row["flags"].append("imprecise")
            continue
        others = [
            o
            for o in rows
            if o is not row
            and o["nbeta_value"] == row["nbeta_value"]
            and precise(o)
            and DECADE[0] <= row["step_size"] / o["step_size"] <= DECADE[1]
        ]
        if not others:
            row["flags"].append("unconfirmed")
        elif not any(agree(row, o) for o in others):
            row["flags"].append("step_sensitive")


def calibration_results(store: Store, sweep: dict) -> dict:
    """Per cell: the curve, flags and whether it is stable; the recommended step per nbeta."""
    rows = []
    for cell in sweep["cells"]:
        summary = _llc(store, cell["run_id"])
        if summary is None:
            continue
        spec = parse_spec(store.get(cell["run_id"]).spec)
        flags = []
        if summary["nan_chains"]:
            flags.append("nan")
        if summary["spikes"]:
            flags.append("spikes")
        mean = summary["mean"]
        if mean is None or llc.out_of_range(mean, summary["se"], summary["dim"]):
            flags.append("out_of_range")
        if not summary.get("stationary", summary.get("plateaued")):  # its name before 11/2026
            flags.append("not_stationary")
        if summary["acceptance"] is not None and summary["acceptance"] < ACCEPTANCE_MIN:
            flags.append("low_acceptance")
        rows.append(
            {
                **cell,
                "llc": mean,
                "se": summary["se"],
                "true": summary["true"],
                "nbeta_value": summary["nbeta"],
                "acceptance": summary["acceptance"],
                "flags": flags,
                "curve": _curve(store, cell["run_id"], spec, summary),
            }
        )
    step_flags(rows)
    for row in rows:
        row["stable"] = not row["flags"]
    recommended = {}
    for nbeta in sorted({r["nbeta_value"] for r in rows}):
        stable = [r for r in rows if r["nbeta_value"] == nbeta and r["stable"]]
        best = max(stable, key=lambda r: r["step_size"], default=None)
        recommended[str(nbeta)] = None if best is None else best["step_size"]
    return {"progress": progress(store, sweep), "cells": rows, "recommended": recommended}


# ---------------------------------------------------------------------------------------------
# The integrator-order study (TATi, Figs. 2-4).

ORDER_SAMPLERS = ("gla1", "gla2", "baoab", "sgld")
EXPECTED_ORDER = {"gla1": 1, "gla2": 2, "baoab": 2, "sgld": 1}  # of <virial>; BAOAB: of <K>
ORDER_OBSERVABLES = ("virial", "kinetic")
NOISE_FLOOR = 2.0  # an error within this many SEs of zero is noise: left out of the fit
# The study's shown default (CLI, page): on L = 2 theta^2 with gamma = 1 and h = 2^-3 .. 2^-6,
# GLA1 is in its first-order regime (exact local slopes 0.7, 0.87, 0.94) while GLA2's error
# (1.6% at 2^-3) stays above the Monte Carlo's SE at two steps; at a = 1 it did at one.
HARMONIC_DEFAULT = {"a": 2.0}


def order_specs(
    target: str = "harmonic",
    target_params: dict | None = None,
    samplers: tuple[str, ...] = ORDER_SAMPLERS,
    step_sizes: tuple[float, ...] = (0.125, 0.0625, 0.03125, 0.015625),
    observable: str = "virial",
    beta: float = 10.0,
    friction: float = 1.0,
    chains: int = 16_384,  # ~90 s for the 16 default runs on 2 cores; GLA2's slope +- 0.2
    steps: int = 10_000,
    burn_fraction: float = 0.1,
    seed: int = 0,
    device: str = "auto",
    dtype: str = "float64",
) -> tuple[dict, list[tuple[dict, RunSpec]]]:
    """The study's parameters and (cell, RunSpec) pairs, in TATi's units: the target is
    exp(-beta L) with L the total loss (a network's n times Basin's mean loss; a potential's U),
    the momentum p ~ N(0, 1/beta) (mass 1) and friction gamma, so a splitting kernel runs at
    temperature 1/beta with ``step_size`` = the step h. SGLD has no temperature: TATi's
    w - h grad L + sqrt(2h/beta) xi is Basin's SGLD at nbeta = beta n_L and step 2h/beta,
    listed at h. Cell i has seed + i: with one seed for all, every cell's Monte Carlo error was
    the same draw's, and a shared offset of ~1.5 SE bent the fitted slopes at small errors."""
    params = dict(locals())
    params["samplers"], params["step_sizes"] = list(samplers), list(step_sizes)
    params["target_params"] = target_params = dict(target_params or {})
    if observable not in ORDER_OBSERVABLES:
        raise SpecError(
            "observable", f"must be one of {list(ORDER_OBSERVABLES)}, got {observable!r}"
        )
    for field, values in (("samplers", samplers), ("step_sizes", step_sizes)):
        if not values:
            raise SpecError(field, "must hold at least one value, got none")
    for name in samplers:
        if name not in ORDER_SAMPLERS:
            raise SpecError("samplers", f"must be names from {list(ORDER_SAMPLERS)}, got {name!r}")
    if observable == "kinetic" and "sgld" in samplers:
        raise SpecError("samplers", "sgld has no momentum: its <K> is not defined; drop it")
    for field, value in (("beta", beta), ("friction", friction)):
        if not (math.isfinite(value) and value > 0):
            raise SpecError(field, f"must be a number > 0, got {value}")
    if not 0 <= burn_fraction < 1:
        raise SpecError("burn_fraction", f"must be in [0, 1), got {burn_fraction}")
    _check_size(len(samplers) * len(step_sizes), "samplers", "step_sizes")
    spec = landscapes.REGISTRY.get(target)
    if spec is None:
        raise SpecError("target", f"must be one of {sorted(landscapes.REGISTRY)}, got {target!r}")
    try:
        n = landscapes.facts(target, spec.validate(target_params)).get("n")
    except landscapes.ParamError as exc:
        raise SpecError(f"target.{exc.field}", str(exc).split(": ", 1)[-1]) from None
    total = float(n or 1)  # TATi's L sums the per-point losses Basin averages
    cells = []
    for sampler in samplers:
        for h in step_sizes:
            if sampler == "sgld":
                kernel = {"step_size": 2 * h / beta, "nbeta": beta * total}
            else:
                kernel = {"step_size": h, "friction": friction, "temperature": 1 / beta}
                kernel["nbeta"] = total
            run = {
                "target": {"name": target, "params": target_params},
                "sampler": {"name": sampler, "params": kernel},
                "chains": chains,
                "steps": steps,
                "burn_in": min(steps - 1, int(burn_fraction * steps)),
                "thin": steps,  # the averages are the observable's; one record a run
                "seed": seed + len(cells),
                "device": device,
                "dtype": dtype,
                "compile": "never",  # minutes of runs: a compile's stall is not worth it
                "record": {"positions": "none"},
                "observables": ["thermo"],
            }
            cells.append(({"sampler": sampler, "step_size": h}, parse_spec(run)))
    return params, cells


def fit_order(step_sizes, errors, ses) -> dict | None:
    """Slope of log|error| against log h by least squares weighted by each point's precision
    ((error / SE)^2, the inverse variance of log|error|), over the points whose error is more
    than NOISE_FLOOR SEs from zero (the paper down-weights its smallest, noisiest step by 10
    for the same reason). None with fewer than two such points. Also the slope's SE."""
    h, e, se = (np.asarray(v, dtype=float) for v in (step_sizes, errors, ses))
    use = np.isfinite(e) & np.isfinite(se) & (np.abs(e) > NOISE_FLOOR * se) & (h > 0)
    if use.sum() < 2 or len(np.unique(h[use])) < 2:
        return None
    x, y = np.log(h[use]), np.log(np.abs(e[use]))
    w = np.minimum((e[use] / np.maximum(se[use], 1e-300)) ** 2, 1e12)
    xm, ym = np.average(x, weights=w), np.average(y, weights=w)
    sxx = np.sum(w * (x - xm) ** 2)
    slope = float(np.sum(w * (x - xm) * (y - ym)) / sxx)
    intercept = float(ym - slope * xm)
    slope_se = float(math.sqrt(1 / sxx))  # the weights are the points' inverse variances
    return {"slope": slope, "slope_se": slope_se, "intercept": intercept, "points": int(use.sum())}


def order_results(store: Store, sweep: dict) -> dict:
    """Per cell: the observable's mean, exact value, relative error and its SE; per sampler:
    the fitted slope over the cells finished so far (a page sees the lines appear)."""
    observable = sweep["spec"]["observable"]
    rows, by_sampler = [], defaultdict(list)
    for cell in sweep["cells"]:
        try:
            record = store.get(cell["run_id"])
        except KeyError:
            continue
        if record.status != "completed" or not record.summary:
            continue
        thermo = record.summary["observables"].get("thermo") or {}
        value = thermo.get(observable) or {}
        row = {
            **cell,
            "mean": value.get("mean"),
            "exact": value.get("exact"),
            "error": value.get("error"),
            "error_se": value.get("error_se"),
            "diverged_chains": thermo.get("diverged_chains"),
            "chains": value.get("chains"),
        }
        rows.append(row)
        by_sampler[cell["sampler"]].append(row)
    fits = []
    for sampler in sweep["spec"]["samplers"]:
        group = sorted(by_sampler.get(sampler, []), key=lambda r: r["step_size"])
        nan = lambda v: math.nan if v is None else v  # noqa: E731
        fit = fit_order(
            [r["step_size"] for r in group],
            [nan(r["error"]) for r in group],
            [nan(r["error_se"]) for r in group],
        )
        fits.append(
            {
                "sampler": sampler,
                "expected": EXPECTED_ORDER[sampler],
                "cells": len(group),
                **(fit or {"slope": None, "slope_se": None, "intercept": None, "points": 0}),
            }
        )
    return {"progress": progress(store, sweep), "cells": rows, "fits": fits}


PARAMETRISATIONS = ("standard", "reprior")
REPRIOR_BAND = (0.8, 0.97)  # acceptance the reference's exact chains keep, MH on (section 5)


def reprior_specs(
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
    the per-step ESS saturates near 1: reference 002 section 5). Float64 by default: float32
    shifted the paper's acceptances by 2-5 points."""
    params = dict(locals())
    params["widths"] = list(widths)
    if not widths:
        raise SpecError("widths", "must hold at least one width, got none")
    if not 0 <= warmup < steps:
        raise SpecError(
            "warmup", f"must be an integer in [0, {steps - 1}] (below steps), got {warmup}"
        )
    _check_size(2 * len(widths), "widths", "parametrisations")
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
    from samplers.diagnostics import projection_ess

    out = {"theta": projection_ess(records["theta_projections"])}
    out["f"] = projection_ess(records["f_projections"]) if "f_projections" in records else None
    # the acceptance probability, as a finished run's summary reports it
    out["acceptance"] = float(np.mean(records["accept_prob"])) if "accept_prob" in records else None
    return out


def reprior_results(store: Store, sweep: dict) -> dict:
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
        "flags": reprior_flags(rows, ratios, mh),
    }


def reprior_flags(cells: list[dict], ratios: list[dict], mh: bool) -> list[dict]:
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


# ---------------------------------------------------------------------------------------------
# The LLC over training checkpoints.


def checkpoint_step(path: str) -> int | None:
    """The training step a checkpoint's file name gives: its last integer ("step-0200.pt",
    "ckpt_12_final.safetensors" -> 12), or None."""
    found = re.findall(r"\d+", Path(path).stem)
    return int(found[-1]) if found else None


def find_checkpoints(pattern: str) -> list[str]:
    """The files ``pattern`` matches (a glob; ** reaches into folders), by training step (then
    name): a SpecError naming ``--checkpoints`` when there are none."""
    matched = glob.glob(str(Path(pattern).expanduser()), recursive=True)
    paths = [str(Path(p).resolve()) for p in matched if Path(p).is_file()]
    if not paths:
        raise SpecError("checkpoints", f"no file matches {pattern!r}")
    return by_step(paths)


def by_step(paths) -> list[str]:
    """Checkpoints by training step (``checkpoint_step``; those without one last), then name."""
    return sorted(
        paths, key=lambda p: (checkpoint_step(p) is None, checkpoint_step(p) or 0, Path(p).name, p)
    )


def checkpoint_specs(base: RunSpec, checkpoints: list[str]) -> tuple[dict, list]:
    """The base LLC run of a ``model`` target once per checkpoint, each cell's w0 that
    checkpoint's weights; the same seed in every cell, so cells differ only in w0. A checkpoint
    that does not fit the module is refused here, by name, before anything is queued."""
    if base.target.name != "model":
        raise SpecError(
            "target", f"must be 'model' for a checkpoint sweep, got {base.target.name!r}"
        )
    if not checkpoints:
        raise SpecError("checkpoints", "must name one or more checkpoint files, got none")
    _check_size(len(checkpoints), "checkpoints")
    data = base.model_dump(mode="json")
    if "llc" not in data["observables"]:
        data["observables"] = [*data["observables"], "llc"]
    data["llc"] = {**data["llc"], "w0": "truth"}  # each checkpoint's weights: the point measured
    cells = []
    for k, path in enumerate(checkpoints):
        step = checkpoint_step(path)
        cell = {**data, "target": {**data["target"], "params": {**data["target"]["params"]}}}
        cell["target"]["params"]["checkpoint"] = path
        spec = parse_spec(cell)
        landscapes.facts("model", spec.target.params)  # loads it: a mismatch is named now
        cells.append(({"checkpoint": Path(path).name, "step": k if step is None else step}, spec))
    params = {"base": data, "checkpoints": [spec.target.params["checkpoint"] for _, spec in cells]}
    return params, cells


def checkpoint_results(store: Store, sweep: dict) -> dict:
    """Per checkpoint, by step: lambda_hat with its SE (None while its run goes), the training
    loss at the checkpoint (the LLC's full-data baseline L_n(w0)), the run's status, verdict and
    LLC warnings, and the running-estimate curve; ``pending`` counts the cells not done."""
    rows = []
    for cell in sweep["cells"]:
        try:
            record = store.get(cell["run_id"])
        except KeyError:
            continue  # deleted from the Runs page: no point on the curve
        summary = (record.summary or {}).get("observables", {}).get("llc")
        done = record.status == "completed" and summary is not None
        row = {
            **cell,
            "status": record.status,
            "llc": summary["mean"] if done else None,
            "se": summary["se"] if done else None,
            "train_loss": summary["baseline_loss"] if done else None,
            "nbeta": summary["nbeta"] if done else None,
            "warnings": [w["code"] for w in summary["warnings"]] if done else [],
            "verdict": (record.summary or {}).get("verdict", {}).get("status") if done else None,
            "curve": None,
        }
        if done:
            row["curve"] = _curve(store, cell["run_id"], parse_spec(record.spec), summary)
        rows.append(row)
    rows.sort(key=lambda r: (r["step"], r["checkpoint"]))
    return {"progress": progress(store, sweep), "cells": rows}


def vi_results(store: Store, sweep: dict) -> dict:
    from studies import vi_scan as vi  # vi_scan imports this module's helpers

    return {"progress": progress(store, sweep), **vi.results(store, sweep)}


RESULTS = {
    "vi": vi_results,
    "checkpoints": checkpoint_results,
    "dln": dln_results,
    "calibrate": calibration_results,
    "order": order_results,
    "reprior": reprior_results,
}


def results(store: Store, sweep_id: str) -> dict:
    sweep = store.get_sweep(sweep_id)
    return {"sweep_id": sweep_id, "kind": sweep["kind"], **RESULTS[sweep["kind"]](store, sweep)}
