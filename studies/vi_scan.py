"""The VI n-scan (the small tanh experiment of docs/methods/vi.md), the ``vi`` sweep: one ``vi`` run
(``runs.vi``) per n and source, -Psi against log n and its fitted slope, an upper bound on the
learning coefficient. Also the Networks page's VI table.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import landscapes
from runs.spec import RunSpec, SpecError, parse_spec, target_facts
from runs.store import Store
from runs.vi import NAMES, SOURCES
from studies import arguments
from studies.sweeps import CURVE_POINTS, check_size, print_flags, progress

KIND = "vi"
HELP = "the VI n-scan (resolution of singularities): -Psi against log n, its slope"
SPEC_FLAGS = False  # its own flags, not a base run's

# ---------------------------------------------------------------------------------------------
# The n-scan.

NS = (500, 1000, 2000, 5000)  # the default scan


def specs(
    target: str,
    target_params: dict | None = None,
    ns: tuple[int, ...] = NS,
    sources: tuple[str, ...] = ("gamma",),
    vi_options: dict | None = None,
    seed: int = 0,
    device: str = "auto",
    dtype: str = "float64",
) -> tuple[dict, list[tuple[dict, RunSpec]]]:
    """The sweep's parameters and one (cell, vi RunSpec) per n and source. The target must take
    an ``n`` (its data's size, or a potential's own n) and have a truth w0 (so Psi = ELBO +
    n S_n, whose slope in log n is the learning coefficient's; the ELBO's is n S_n's)."""
    params = dict(locals())
    params["ns"], params["sources"] = list(ns), list(sources)
    if len(ns) < 2:
        raise SpecError("ns", f"must hold at least two values of n for a slope, got {list(ns)}")
    for source in sources:
        if source not in SOURCES:
            raise SpecError("source", f"must be names from {list(SOURCES)}, got {source!r}")
    if not sources:
        raise SpecError("source", f"must name one or more of {list(SOURCES)}, got none")
    check_size(len(ns) * len(sources), "ns", "sources")
    if any(n < 2 for n in ns):
        raise SpecError("ns", f"must be integers >= 2, got {list(ns)}")
    registered = landscapes.REGISTRY.get(target)
    nested = registered is not None and registered.kind == "network"
    cells = []
    for source in sources:
        for n in ns:
            given = {"n": max(ns)} if nested else {"n": n}
            options = {"points": n} if nested else {}
            spec = parse_spec(
                {
                    "kind": "vi",
                    "target": {"name": target, "params": {**(target_params or {}), **given}},
                    "vi": {**(vi_options or {}), **options, "source": source},
                    "seed": seed,
                    "device": device,
                    "dtype": dtype,
                }
            )
            cells.append(({"n": n, "source": source}, spec))
    facts = target_facts(cells[0][1])
    if not facts.has_truth:
        raise SpecError(
            "target",
            f"{target} has no known truth w0, so no n S_n: its ELBO's slope in log n would be "
            "n S_n's, not the learning coefficient's; choose a target with a truth (tanh, rrr, "
            "dln, polynomial, normal-crossing)",
        )
    return params, cells


def fit_slope(ns, psi) -> dict | None:
    """Least squares of -Psi on log n: slope (lambda_vb), its standard error from the
    residuals (None with two points) and intercept; None with fewer than two finite points."""
    points = [(n, p) for n, p in zip(ns, psi, strict=True) if p is not None and math.isfinite(p)]
    if len(points) < 2:
        return None
    x = np.log([n for n, _ in points])
    y = -np.array([p for _, p in points])
    slope, intercept = np.polyfit(x, y, 1)
    se = None
    if len(points) > 2:
        residual = y - (slope * x + intercept)
        se = float(math.sqrt(residual @ residual / (len(x) - 2) / ((x - x.mean()) ** 2).sum()))
    return {"slope": float(slope), "slope_se": se, "intercept": float(intercept), "points": len(x)}


def results(store: Store, sweep: dict) -> dict:
    """The sweep's progress; per cell: status, Psi with its SE, exact log Z_bar, the live
    objective curve; per source: the fitted slope; the exact log Z_bar's own slope where known;
    flags."""
    cells = []
    for cell in sweep["cells"]:
        row = {"n": cell["n"], "source": cell["source"], "run_id": cell["run_id"]}
        row.update(status="deleted", psi=None, psi_se=None, log_z_bar=None, curve=None)
        row.update(epochs=0, epochs_total=None, verdict=None, true_lc=None, rate=None, dim=None)
        try:
            record = store.get(cell["run_id"])
        except KeyError:
            cells.append(row)
            continue
        row["status"] = record.status
        row["rate"] = (record.progress or {}).get("steps_per_second") or None  # epochs / s
        data = store.read(cell["run_id"], names=["epoch", "objective"])
        if data:
            stride = max(1, math.ceil(len(data["epoch"]) / CURVE_POINTS))
            row["curve"] = {
                "epoch": data["epoch"][::stride].tolist(),
                "objective": data["objective"][::stride].tolist(),
            }
            row["epochs"] = int(data["epoch"][-1])
        row["epochs_total"] = record.spec["vi"]["epochs"]
        summary = record.summary or {}
        if record.status == "completed":
            row.update(
                psi=summary.get("objective"),
                psi_se=summary.get("objective_se"),
                log_z_bar=summary.get("log_z_bar"),
                verdict=summary.get("verdict"),
                true_lc=summary.get("true_lc"),
                dim=summary.get("dim"),
            )
        cells.append(row)
    fits = {}
    for source in sweep["spec"]["sources"]:
        mine = sorted((c for c in cells if c["source"] == source), key=lambda c: c["n"])
        fit = fit_slope([c["n"] for c in mine], [c["psi"] for c in mine])
        fits[source] = fit
    ns = sorted({c["n"] for c in cells})
    bound = {c["n"]: c["log_z_bar"] for c in cells if c["log_z_bar"] is not None}
    exact = fit_slope(list(bound), list(bound.values())) if len(bound) == len(ns) else None
    truth = next((c["true_lc"] for c in cells if c["true_lc"]), None)
    return {
        "progress": progress(store, sweep),
        "cells": cells,
        "eta_s": eta(cells),
        "slopes": fits,
        "log_z_bar_fit": exact,
        "true_lc": truth,
        "flags": flags(cells, fits, truth, exact),
    }


def eta(cells: list[dict]) -> float | None:
    """Seconds until the scan ends: each unfinished fit's remaining epochs at its own rate
    (epochs a second so far), or the median rate of the others before it starts, shared by
    the fits running at once; None before any fit has a rate, 0 once all have ended."""
    left = [c for c in cells if c["status"] in ("queued", "running")]
    if not left:
        return 0.0
    rates = [c["rate"] for c in cells if c.get("rate")]
    if not rates:
        return None
    typical = float(np.median(rates))
    seconds = sum(
        ((c["epochs_total"] or 0) - c["epochs"]) / (c.get("rate") or typical) for c in left
    )
    running = sum(c["status"] == "running" for c in left)
    return seconds / max(1, running)


def flags(cells: list[dict], fits: dict, truth: dict | None, exact: dict | None) -> list[dict]:
    """What makes the scan's slope suspect: a run's failing or warning verdict, a slope below
    the true lambda by more than 2 SEs (lambda_vb >= lambda: the fits are short of their best,
    or the n are too small for the asymptotics), a source worse than the other everywhere."""
    out = []
    for c in cells:
        v = c["verdict"]
        if v and v["status"] != "good":
            for s in v["signals"]:
                out.append(
                    {
                        "level": s["status"],
                        "where": f"{NAMES[c['source']]} n = {c['n']}",
                        "message": s["message"],
                        "try": s["try"],
                    }
                )
    if exact and truth and abs(exact["slope"] - truth["lambda"]) > 0.5 * truth["lambda"]:
        out.append(
            {
                "level": "warn",
                "where": "exact log Z_bar",
                "message": f"the exact log Z_bar's own slope over these n is {exact['slope']:.3f}"
                f" against the true lambda {truth['lambda']:.3f}: at these n this dataset's "
                "fluctuations, not the fits, set the slope",
                "try": "a wider range of n (up to 10x or more), more values of n, or another "
                "data seed (the target's seed parameter)",
            }
        )
    dim = next((c["dim"] for c in cells if c.get("dim")), None)
    for source, fit in fits.items():
        if (
            fit
            and dim
            and fit["slope_se"] is not None
            and fit["slope"] > dim / 2 + 2 * fit["slope_se"]
        ):
            out.append(
                {
                    "level": "warn",
                    "where": NAMES[source],
                    "message": f"the slope {fit['slope']:.3f} +- {fit['slope_se']:.3f} is above "
                    f"d/2 = {dim / 2:g}, which a Gaussian at w0 of scale 1/sqrt(n) reaches: "
                    "these fits are far from their family's best, and the slope bounds nothing",
                    "try": "more epochs (the fits' curves say which are still rising)",
                }
            )
        if fit is None or truth is None or fit["slope_se"] is None:
            continue
        if fit["slope"] < truth["lambda"] - 2 * fit["slope_se"]:
            out.append(
                {
                    "level": "warn",
                    "where": NAMES[source],
                    "message": f"the slope {fit['slope']:.3f} +- {fit['slope_se']:.3f} is below "
                    f"the true lambda {truth['lambda']:.3f}, which a converged VI slope bounds "
                    "from above",
                    "try": "more epochs, larger n, or more values of n",
                }
            )
    return out


def rows(cells: list[dict]) -> dict:
    """The VI scan's table on the Networks page: one row per fit, with its verdict."""
    fmt = lambda v: None if v is None else round(v, 3)  # noqa: E731
    return {
        "n": [c["n"] for c in cells],
        "source": [c["source"] for c in cells],
        "status": [c["status"] for c in cells],
        "epochs": [f"{c['epochs']}/{c['epochs_total']}" for c in cells],
        "Ψ": [fmt(c["psi"]) for c in cells],
        "SE": [fmt(c["psi_se"]) for c in cells],
        "log Z̄ (exact)": [fmt(c["log_z_bar"]) for c in cells],
        "verdict": [(c["verdict"] or {}).get("status", "") for c in cells],
    }


# -- the command line: python -m jobs sweep vi ... ----------------------------------------------


def add_arguments(k: argparse.ArgumentParser) -> None:
    k.add_argument("--target", default="tanh", help="a target with data and a truth w0")
    arguments.add_pairs(k, "--target-param")
    k.add_argument("--ns", default="500,1000,2000,5000", help="comma-separated values of n")
    k.add_argument("--source", default="gamma", help="gamma, gaussian, or both: gamma,gaussian")
    help_ = "the fits' options (epochs, prior_mean, prior_variance, lambda0, ...)"
    arguments.add_pairs(k, "--vi-param", help_)
    arguments.add_common(k)


def specs_from_args(args: argparse.Namespace, base=None) -> tuple[dict, list]:
    return specs(
        **arguments.keywords(
            args,
            specs,
            target_params=arguments.pairs(args.target_param, "--target-param"),
            ns=arguments.integers(args.ns, "--ns"),
            sources=arguments.names(args.source),
            vi_options=arguments.pairs(args.vi_param, "--vi-param"),
        )
    )


def print_text(result: dict) -> None:
    print_flags(result)
    fmt = lambda v, spec=".3f": "-" if v is None else format(v, spec)  # noqa: E731
    for c in result["cells"]:
        psi = "-" if c["psi"] is None else f"{c['psi']:.3f} +- {c['psi_se']:.2g}"
        print(
            f"{c['source']:<9} n {c['n']:<8} {c['status']:<9} epochs {c['epochs']}/"
            f"{c['epochs_total']}  Psi {psi:<20} log Z_bar {fmt(c['log_z_bar'])}"
        )
    for source, fit in result["slopes"].items():
        if fit is None:
            print(f"{source:<9} slope of -Psi against log n: - (fewer than two finished n)")
        else:
            se = "" if fit["slope_se"] is None else f" +- {fit['slope_se']:.3f}"
            print(f"{source:<9} slope of -Psi against log n: {fit['slope']:.3f}{se}")
    if result["log_z_bar_fit"]:
        print(f"exact log Z_bar's slope: {result['log_z_bar_fit']['slope']:.3f}")
    if result["true_lc"]:
        print(f"true learning coefficient: {result['true_lc']['lambda']:.3f}")
